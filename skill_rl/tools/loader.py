"""load_tools: the tools of a skill folder, from its tools.py (imported the way checks.py is: skill_rl/watchdog.py's
`import_user_file`, with a time limit) and its SKILL.md `allowed-tools` (allowed.py). A skill with neither has none.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from skill_rl.tools.allowed import parse_allowed_tools
from skill_rl.tools.declare import Tool, ToolProblem, describe, is_tool
from skill_rl.watchdog import import_user_file

# a tools.py that takes longer to import is reported, not waited for
IMPORT_SECONDS = 10.0


def _marked(module: ModuleType) -> list:
    """The functions tools.py marks with @tool, in the order it defines them."""
    fns = dict.fromkeys(v for v in vars(module).values() if is_tool(v))
    return sorted(fns, key=lambda f: f.__code__.co_firstlineno)


def _described(path: Path, module: ModuleType) -> tuple[list[Tool], list[str]]:
    tools, problems = [], []
    for fn in _marked(module):
        try:
            tools.append(describe(path, fn))
        except ToolProblem as e:
            problems.extend(e.problems)
    return tools, problems


def load_tools(skill_dir: Path, allowed_tools: str | None, *, line: int | None = None) -> list[Tool]:
    """The skill's tools: allowed-tools' `bash` and `read`, then tools.py's, by name once each. ToolProblem lists
    every problem, one line each naming SKILL.md (and `line`, the field's) or tools.py and the line."""
    skill_dir = Path(skill_dir)
    tools, problems = parse_allowed_tools(skill_dir / "SKILL.md", line, allowed_tools)
    module = import_user_file(skill_dir, "tools.py", lambda p, m: _described(p, m)[1], problems, IMPORT_SECONDS)
    if module is not None:
        tools += _described(skill_dir / "tools.py", module)[0]
    seen: dict[str, Tool] = {}
    for t in tools:
        if t.name in seen:
            from skill_rl.text import problem

            line_of = getattr(getattr(module, t.function or "", None), "__code__", None)
            problems.append(
                problem(
                    skill_dir / "tools.py",
                    line_of.co_firstlineno if line_of else None,
                    f"tool '{t.name}' is named like another (allowed-tools gives 'bash' and 'read'): rename it",
                )
            )
        seen.setdefault(t.name, t)
    if problems:
        raise ToolProblem(problems)
    return list(seen.values())
