"""A skill's own Python files, checks.py and exploits.py: user code, imported with a time limit, its problems
reported as one line naming the file and the line that was running.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import ModuleType

from skill_rl.skills.skill import DIMENSIONS
from skill_rl.text import problem
from skill_rl.watchdog import import_user_file

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


def takes_episode(fn) -> bool:
    """Whether a check takes the episode (its tool calls and workspace: skill_rl/tools) as a third parameter named
    `episode`: `check(output, task, episode)`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
        inspect.signature(fn).bind("", None, None)
    except (TypeError, ValueError):
        return False
    return len(params) >= 3 and params[2].name == "episode"


def lint_checks(path: Path, module: ModuleType) -> list[str]:
    """A check that could never be called as `check(output, task)`, or `check(output, task, episode)` with a third
    parameter named `episode`, is a problem of the skill, found at load."""
    found = (
        _callable_problem(
            path,
            "check",
            name,
            fn,
            "output, task) or (output, task, episode",
            ("", None, None) if takes_episode(fn) else ("", None),
        )
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


def load_user_code(folder: Path, file: str, lint, problems: list[str]) -> ModuleType | None:
    """Import a skill's checks.py or exploits.py (skill_rl/watchdog.py's `import_user_file`, IMPORT_SECONDS)."""
    return import_user_file(folder, file, lint, problems, IMPORT_SECONDS)
