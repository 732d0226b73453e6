"""Load and lint a skill folder: SKILL.md, tasks.jsonl and the optional checks.py and exploits.py.

A skill is a valid Agent Skill (agentskills.io): YAML frontmatter with only the keys the spec
allows, skill-rl settings under `metadata` as strings, then a markdown body. The body is what
the policy sees as its system prompt; it is parsed (markdown-it-py, not regexes) into sections
by heading so the judge's rubric can list the procedure's numbered steps.

Every problem is collected, not just the first, and reported as one line naming the file, the
line and the field: `skills/git-commit/tasks.jsonl:7: field 'split' must be 'train' or 'val', got 'test'`.

    skill.py        Skill, Task, Section; SkillError
    frontmatter.py  SKILL.md: frontmatter and body
    tasks.py        tasks.jsonl (through skill_rl/files.py's strict JSONL reader)
    evals.py        evals/evals.json (skill-creator's test cases), as tasks when there is no tasks.jsonl
    usercode.py     checks.py and exploits.py, imported with a time limit

tools.py and allowed-tools are read by skill_rl/tools (load_tools) when the skill has either.

How a problem is said (`problem`, `show`, ...) is skill_rl/text.py's; reading and writing files, skill_rl/files.py's.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from skill_rl.skills.evals import EVALS, load_evals
from skill_rl.skills.frontmatter import parse_body, parse_frontmatter, read_text, skill_settings, split_frontmatter
from skill_rl.skills.skill import (
    DEFAULT_WEIGHTS,
    DIMENSIONS,
    MAX_LINE_CHARS,
    NAME_RE,
    Section,
    Skill,
    SkillError,
    Task,
    read_only,
)
from skill_rl.skills.tasks import load_tasks, parse_task_line
from skill_rl.skills.usercode import lint_checks, lint_exploits, load_user_code, marked_exploits, takes_episode
from skill_rl.text import display, problem
from skill_rl.tools.declare import ToolProblem
from skill_rl.tools.loader import load_tools

__all__ = [
    "DEFAULT_WEIGHTS",
    "DIMENSIONS",
    "MAX_LINE_CHARS",
    "NAME_RE",
    "Section",
    "Skill",
    "SkillError",
    "Task",
    "find_skill",
    "list_skills",
    "load_skill",
    "load_tasks",
    "marked_exploits",
    "parse_frontmatter",
    "parse_task_line",
    "read_only",
    "read_text",
    "shipped_skills_dir",
    "skill_dirs",
    "split_frontmatter",
    "takes_episode",
]


def load_skill(folder: Path, *, with_tasks: bool = True, with_checks: bool = True) -> Skill:
    """Load and validate a skill folder; raise SkillError listing every problem found.
    `with_checks=False` (for `--list`) runs none of the skill's own code: no checks.py, no exploits.py, no tasks."""
    folder = Path(folder)
    md = folder / "SKILL.md"
    problems: list[str] = []
    text = read_text(md, problems)
    parts = split_frontmatter(md, text, problems) if text is not None else None
    if parts is None:
        raise SkillError(problems)
    source, body, body_line = parts
    fm, key_line = parse_frontmatter(md, source, problems)
    if fm is not None and fm.name != folder.name:
        problems.append(
            problem(
                md, key_line.get("name"), f"field 'name' must equal the folder name {folder.name!r}, got {fm.name!r}"
            )
        )
    weights, judged, derive = (
        skill_settings(md, fm, key_line.get("metadata"), problems) if fm else (DEFAULT_WEIGHTS, (), True)
    )
    sections, steps, rules = parse_body(md, body, body_line, problems)
    before = len(problems)
    checks = load_user_code(folder, "checks.py", lint_checks, problems) if with_checks else None
    # a task's `expect` is read with checks.py's Expect: not without it
    with_tasks = with_tasks and len(problems) == before
    exploits = load_user_code(folder, "exploits.py", lint_exploits, problems) if with_checks else None
    tools = _tools(folder, fm, key_line.get("allowed-tools"), problems) if with_checks else ()
    tasks_file = folder / "tasks.jsonl"
    # skill-creator's test cases, as tasks
    if not tasks_file.exists() and (folder / EVALS).exists():
        tasks_file = folder / EVALS
        tasks = load_evals(folder, fm.name if fm else None, problems) if with_tasks and with_checks else []
    else:
        tasks = load_tasks(tasks_file, getattr(checks, "Expect", None), problems) if with_tasks and with_checks else []
    if problems:
        raise SkillError(problems)
    return Skill(
        name=fm.name,
        description=fm.description,
        path=folder,
        body=body.strip(),
        sections=sections,
        steps=tuple(steps),
        rules=tuple(rules),
        weights=weights,
        judged=judged,
        checks=checks,
        tasks=tuple(tasks),
        derive=derive,
        exploits=exploits,
        tasks_file=tasks_file,
        allowed_tools=fm.allowed_tools,
        tools=tools,
    )


def _tools(folder: Path, fm, line: int | None, problems: list[str]) -> tuple:
    """The skill's tools (skill_rl/tools), read only when it has a tools.py or allowed-tools: a skill without
    either costs nothing more to load."""
    allowed = fm.allowed_tools if fm else None
    if not allowed and not (folder / "tools.py").exists():
        return ()
    try:
        return tuple(load_tools(folder, allowed, line=line))
    except ToolProblem as e:
        problems.extend(e.problems)
        return ()


def shipped_skills_dir() -> Path:
    """The skills that come with skill-rl: `skills/` of a checkout (editable installs included), or the
    copy that a wheel or a plain `pip install .` puts in the package as `skill_rl/shipped_skills`."""
    # skill_rl/
    package = Path(__file__).resolve().parent.parent
    installed = package / "shipped_skills"
    return installed if installed.is_dir() else package.parent / "skills"


def skill_dirs(explicit: Path | None = None) -> list[Path]:
    """Where skills are looked up, first match wins: `--skills-dir` alone when given; otherwise `skills/`
    in the working directory (when there is one), then the shipped skills."""
    if explicit is not None:
        return [Path(explicit)]
    here, shipped = Path.cwd() / "skills", shipped_skills_dir()
    if here.is_dir() and here.resolve() != shipped.resolve():
        return [here, shipped]
    return [shipped]


def list_skills(skills_dirs: Path | list[Path]) -> list[Path]:
    """Every skill folder in `skills_dirs`, by name; a name found twice is the first folder's."""
    found: dict[str, Path] = {}
    for d in [skills_dirs] if isinstance(skills_dirs, Path) else skills_dirs:
        for p in sorted(Path(d).glob("*/SKILL.md")):
            found.setdefault(p.parent.name, p.parent)
    return sorted(found.values(), key=lambda p: p.name)


def find_skill(skills_dirs: Path | list[Path], name: str) -> Path:
    dirs = [skills_dirs] if isinstance(skills_dirs, Path) else skills_dirs
    for d in dirs:
        if (Path(d) / name / "SKILL.md").exists():
            return Path(d) / name
    names = [p.name for p in list_skills(dirs)]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    where = " or ".join(display(d) for d in dirs)
    hint = (
        f"did you mean {' or '.join(repr(c) for c in close)}?"
        if close
        else f"--list shows the {len(names)} skill(s) there"
    )
    raise SkillError([f"{where}: no skill named {name!r}; {hint}"])
