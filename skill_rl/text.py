"""How things are said in one line: a path as the user typed it, a problem at `file:line`, an exception, a
value of any size, and pydantic's validation errors, each bounded so that no message runs away.
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from skill_rl.keys import redact


def display(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def problem(path: Path, line: int | None, msg: str) -> str:
    """One problem with a file, as `file:line: msg` (`file: msg` when no line is meant)."""
    return f"{display(path)}:{line}: {msg}" if line else f"{display(path)}: {msg}"


_repr = reprlib.Repr(maxlevel=2, maxtuple=4, maxlist=4, maxdict=4, maxset=4, maxstring=60, maxother=60)


def brief(error: BaseException, limit: int = 200) -> str:
    """An exception as one bounded line: `ZeroDivisionError: division by zero`."""
    text = " ".join(redact(str(error)).split())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def show(value: Any, limit: int = 40) -> str:
    """A value as it appears in a message: bounded work and length, whatever its size or shape."""
    text = repr(value[:limit]) if isinstance(value, str) else _repr.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def pydantic_problems(path: Path, err: ValidationError, line_of, skip: set[str] = frozenset()) -> list[str]:
    """One line per error; errors on the top-level fields in `skip` (already reported) are left out."""
    out = []
    for e in err.errors():
        if e["loc"] and str(e["loc"][0]) in skip:
            continue
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            msg = f"field '{loc}' is not allowed"
        elif e["type"] == "missing":
            msg = f"field '{loc}' is required"
        else:
            msg = f"field '{loc}': {e['msg'][0].lower()}{e['msg'][1:]}, got {show(e.get('input'))}"
        out.append(problem(path, line_of(e["loc"]), msg))
    return out
