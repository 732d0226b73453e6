"""A skill's checks.py: user code, imported with a time limit, its problems reported as file:line.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from types import ModuleType

from skill_rl.watchdog import Timeout, Watchdog
from skill_rl.skills.skill import DIMENSIONS, brief, problem


IMPORT_SECONDS = 10.0  # a checks.py that takes longer to import is reported, not waited for


def _check_problems(path: Path, module: ModuleType) -> list[str]:
    """A check that could never be called as `check(output, task)` is a problem of the skill, found at load."""
    out = []
    for name, fn in vars(module).items():
        if getattr(fn, "dimension", None) not in DIMENSIONS:
            continue
        line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
        if not inspect.isfunction(fn):
            out.append(problem(path, line, f"check '{name}' is not a function; @check marks functions (output, task)"))
        elif inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            out.append(problem(path, line, f"check '{name}' is async; checks are plain functions (output, task)"))
        else:
            try:
                inspect.signature(fn).bind("", None)
            except TypeError:
                out.append(problem(path, line, f"check '{name}' must take (output, task), got {name}{inspect.signature(fn)}"))
    return out


def load_checks(folder: Path, problems: list[str]) -> ModuleType | None:
    """Import the skill's checks.py: user code, so bounded in time, its prints sent to stderr (stdout may be
    JSONL), and whatever it raises, SystemExit included, reported as one line."""
    path = folder / "checks.py"
    if not path.exists():
        return None
    name = f"skill_rl_checks_{folder.name.replace('-', '_')}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pydantic look their module up while it runs
    with Watchdog(IMPORT_SECONDS) as dog, contextlib.redirect_stdout(sys.stderr):
        _, error = dog.call(spec.loader.exec_module, module)
    if isinstance(error, SyntaxError):
        problems.append(problem(path, error.lineno, f"checks.py does not parse: {error.msg}"))
    elif isinstance(error, Timeout):
        problems.append(problem(path, None, f"checks.py did not finish importing within {IMPORT_SECONDS:g} s"))
    elif isinstance(error, ModuleNotFoundError) and (error.name or "").startswith("skill_rl."):
        line = next((f.lineno for f in reversed(traceback.extract_tb(error.__traceback__)) if f.filename == str(path)), None)
        problems.append(problem(path, line, f"checks.py imports {error.name}, which skill-rl no longer has: import "
                                            "what a checks.py needs from the package itself (from skill_rl import check, Task)"))
    elif error is not None:
        problems.append(problem(path, None, f"checks.py failed to import: {brief(error)}"))
    else:
        found = _check_problems(path, module)
        problems.extend(found)
        if not found:
            return module
    del sys.modules[name]
    return None
