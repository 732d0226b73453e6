"""A skill's own Python files, checks.py and exploits.py: user code, imported with a time limit, its problems
reported as one line naming the file and the line that was running.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType

from skill_rl.skills.skill import DIMENSIONS
from skill_rl.text import brief, problem
from skill_rl.watchdog import Timeout, Watchdog

# a checks.py that takes longer to import is reported, not waited for
IMPORT_SECONDS = 10.0


def _callable_problem(path: Path, what: str, name: str, fn, params: str, args: tuple) -> str | None:
    """Why a function that checks.py or exploits.py marked (`what`: 'check' or 'exploit') could never be called
    as `fn(*args)`: it is no function, it is async, or its parameters do not take `params`."""
    line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
    if not inspect.isfunction(fn):
        return problem(path, line, f"{what} '{name}' is not a function; @{what} marks functions ({params})")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return problem(path, line, f"{what} '{name}' is async; {what}s are plain functions ({params})")
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        return problem(path, line, f"{what} '{name}' must take ({params}), got {name}{inspect.signature(fn)}")
    return None


def lint_checks(path: Path, module: ModuleType) -> list[str]:
    """A check that could never be called as `check(output, task)` is a problem of the skill, found at load."""
    found = (
        _callable_problem(path, "check", name, fn, "output, task", ("", None))
        for name, fn in vars(module).items()
        if getattr(fn, "dimension", None) in DIMENSIONS
    )
    return [p for p in found if p]


def marked_exploits(module: ModuleType | None) -> list:
    """The functions of an exploits.py marked with `@exploit` (skill_rl/exploits.py), in the order it defines them."""
    fns = (
        dict.fromkeys(v for v in vars(module).values() if isinstance(getattr(v, "exploit", None), str))
        if module
        else {}
    )
    return sorted(fns, key=lambda f: getattr(getattr(f, "__code__", None), "co_firstlineno", 0))


def lint_exploits(path: Path, module: ModuleType) -> list[str]:
    """An exploit that could never be called as `exploit(ctx, task)`, or that takes another one's name."""
    out, seen = [], {}
    for name, fn in vars(module).items():
        if not isinstance(getattr(fn, "exploit", None), str) or seen.get(fn.exploit, (None, None))[1] is fn:
            continue
        if why := _callable_problem(path, "exploit", name, fn, "ctx, task", (None, None)):
            out.append(why)
        elif fn.exploit in seen:
            out.append(
                problem(
                    path,
                    fn.__code__.co_firstlineno,
                    f"exploit '{name}' is named {fn.exploit!r}, "
                    f"like exploit '{seen[fn.exploit][0]}': give each its own name",
                )
            )
        seen.setdefault(fn.exploit, (name, fn))
    return out


def _user_line(error: BaseException, path: Path) -> int | None:
    """The line of `path` that was running when `error` was raised (the innermost frame in that file)."""
    line, tb, target = None, error.__traceback__, os.path.abspath(path)
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def load_user_code(folder: Path, file: str, lint, problems: list[str]) -> ModuleType | None:
    """Import a skill's own Python file (checks.py, exploits.py): user code, so bounded in time, its prints sent
    to stderr (stdout may be JSONL), whatever it raises, SystemExit included, reported as one line naming the
    line it was running, and what `lint(path, module)` finds wrong with it reported the same way."""
    path = folder / file
    if not path.exists():
        return None
    name = f"skill_rl_{path.stem}_{folder.name.replace('-', '_')}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # dataclasses and pydantic look their module up while it runs
    sys.modules[name] = module
    with Watchdog(IMPORT_SECONDS) as dog, contextlib.redirect_stdout(sys.stderr):
        _, error = dog.call(spec.loader.exec_module, module)
    if isinstance(error, SyntaxError):
        problems.append(problem(path, error.lineno, f"{file} does not parse: {error.msg}"))
    elif isinstance(error, Timeout):
        problems.append(
            problem(path, _user_line(error, path), f"{file} did not finish importing within {IMPORT_SECONDS:g} s")
        )
    elif isinstance(error, ModuleNotFoundError) and (error.name or "").startswith("skill_rl."):
        problems.append(
            problem(
                path,
                _user_line(error, path),
                f"{file} imports {error.name}, which skill-rl no longer has: "
                "import what it needs from the package itself (from skill_rl import check, exploit, Task)",
            )
        )
    elif error is not None:
        problems.append(problem(path, _user_line(error, path), f"{file} failed to import: {brief(error)}"))
    else:
        found = lint(path, module)
        problems.extend(found)
        if not found:
            return module
    del sys.modules[name]
    return None
