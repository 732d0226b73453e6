"""The small commands around a skill: `--list`, `--init`, `--check`, and the printed run configuration."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from skill_rl.console import literal
from skill_rl.errors import Exit
from skill_rl.scoring import contract, episodes
from skill_rl.scoring.checks import is_estimate
from skill_rl.scoring.derived import derive
from skill_rl.scoring.exploits import GENERIC, exploit_problems, skill_exploits
from skill_rl.scoring.reward import Judge, Scorer
from skill_rl.scoring.rubric import checks_cover, reference_problems
from skill_rl.skills import DIMENSIONS, NAME_RE, Skill, SkillError, Task, load_skill, shipped_skills_dir, skill_dirs
from skill_rl.skills import list_skills as skill_folders
from skill_rl.text import display, show
from skill_rl.tools import scripted
from skill_rl.tools.allowed import allowed_text

TEMPLATE = Path(__file__).parent.parent / "template"
# what --init writes
TEMPLATE_FILES = ("SKILL.md", "tasks.jsonl", "checks.py")
# --check plays the scripted episodes of this many tasks, spread over the file
EPISODE_TASKS = 4


def list_command(setup, skill: None) -> int:
    """--list, for the resolved run (config.Run): the skills of --skills-dir, or of ./skills and the shipped ones."""
    return list_skills(skill_dirs(setup.settings.skills_dir))


def init_command(setup, skill: None) -> int:
    """--init NAME: into --skills-dir, else ./skills of the working directory (never the installation)."""
    return init_skill(setup.settings.skills_dir or Path("skills"), setup.settings.init)


def check_command(setup, skill: Skill) -> int:
    """--check: what the skill holds, its checks run on its references."""
    return print_check(skill)


def list_skills(skills_dirs: list[Path]) -> int:
    for d in skills_dirs:
        if not d.is_dir() or not os.access(d, os.R_OK | os.X_OK):
            what = (
                "is not a folder"
                if d.exists() and not d.is_dir()
                else "cannot be read"
                if d.exists()
                else "does not exist"
            )
            raise Exit(2, f"--skills-dir {d} {what}")
    console = Console()
    where = " then ".join(display(d) for d in skills_dirs)
    table = Table(title=literal(f"skills in {where}"))
    for col in ("name", "description", "from"):
        table.add_column(col)
    folders = skill_folders(skills_dirs)
    shipped = shipped_skills_dir().resolve()
    for folder in folders:
        origin = "shipped" if folder.parent.resolve() == shipped else display(folder.parent)
        try:
            skill = load_skill(folder, with_tasks=False, with_checks=False)
            table.add_row(literal(skill.name), literal(skill.description), literal(origin))
        except SkillError as e:
            table.add_row(literal(folder.name), literal(f"invalid: {e.problems[0]}", "red"), literal(origin))
    console.print(table if folders else literal(f"no skills in {where}"), soft_wrap=not folders)
    return 0


def init_skill(skills_dir: Path, name: str) -> int:
    # fullmatch: `$` would let "demo\n" through
    if not NAME_RE.fullmatch(name) or len(name) > 64:
        raise Exit(2, f"a skill name is 1-64 characters of a-z, 0-9 and single '-', got {name!r}")
    folder = Path(skills_dir) / name
    if folder.exists():
        raise Exit(2, f"{folder} already exists; pick another name")
    folder.mkdir(parents=True)
    title = name.replace("-", " ").capitalize()
    for file in TEMPLATE_FILES:
        text = (TEMPLATE / file).read_text().replace("{name}", name).replace("{title}", title)
        (folder / file).write_text(text)
    print(
        f"created {folder}/SKILL.md, tasks.jsonl and checks.py (three checks): edit them, then run --skill {name} --check"
    )
    print(
        "what each file may hold: docs/skills.md; which SKILL.md sentences become checks (--check lists them): "
        "docs/derived-checks.md"
    )
    return 0


def print_check(skill: Skill) -> int:
    """Print what the skill holds; exit 2 if a check fails to run on a task's reference (a broken check), or an
    exploit of its exploits.py on a task."""
    broken = reference_problems(skill) + exploit_problems(skill)
    if broken:
        print("\n".join(broken), file=sys.stderr)
        return 2
    for line in leaked_val_tasks(skill):
        print(line, file=sys.stderr)
    console = Console()
    console.print(literal(skill.name, "bold") + literal(f"  {skill.path}"), soft_wrap=True)
    console.print(literal(skill.description))
    weights = ", ".join(f"{d} {skill.weights[d]:g}" for d in DIMENSIONS)
    console.print(f"rubric weights: {weights}; judged by RULER: {', '.join(skill.judged) or 'nothing'}")
    checks = (
        [n for n in vars(skill.checks) if getattr(getattr(skill.checks, n), "dimension", None)] if skill.checks else []
    )
    shown = [n + " (estimate)" * is_estimate(getattr(skill.checks, n)) for n in checks]
    console.print(
        f"deterministic checks (checks.py): {', '.join(shown) or 'none'}"
        + ("; an estimate only cuts the reward, never pays (docs/scoring.md)" if shown != checks else "")
    )
    print_derived(console, skill, set(checks))
    console.print(f"exploits (exploits.py): {len(skill_exploits(skill))}, plus {len(GENERIC)} generic")
    print_tools(console, skill)
    if scripted.has_script(skill):
        print_episodes(console, skill)
    else:
        print_contract(console, skill)
    console.print("procedure:")
    for i, step in enumerate(skill.steps, 1):
        console.print(literal(f"  {i}. {step if len(step) <= 110 else step[:107] + '...'}"))
    table = Table(title="tasks")
    for col in ("split", "tasks", "with expect", "with reference"):
        table.add_column(col, justify="right")
    for split in ("train", "val"):
        tasks = skill.split(split)
        table.add_row(
            split,
            str(len(tasks)),
            str(sum(t.expect is not None for t in tasks)),
            str(sum(t.reference is not None for t in tasks)),
        )
    console.print(table)
    covers = checks_cover(skill, skill.split("train"))
    console.print(
        literal(
            "checks cover, on the train tasks (the rest is the judge's; --judge none pays only this): "
            + ", ".join(f"{d} {covers[d]:.0%}" for d in DIMENSIONS)
        ),
        soft_wrap=True,
    )
    if (
        not any(t.expect is not None for t in skill.tasks)
        and skill.checks is not None
        and hasattr(skill.checks, "Expect")
    ):
        console.print(
            literal("no task has `expect`: what checks.py compares with it (type, scope, ...) is unchecked"),
            soft_wrap=True,
        )
    if with_criteria := sum(bool(t.criteria) for t in skill.tasks):
        judged = "correctness" in Scorer(skill, Judge()).judged_dimensions
        console.print(
            literal(
                f"{with_criteria} task(s) carry criteria (expected output, expectations) for the judge's "
                "correctness rubric" + ("" if judged else ": but correctness is not judged here, so they are unused"),
                "" if judged else "yellow",
            ),
            soft_wrap=True,
        )
    source = "" if skill.tasks_path.name == "tasks.jsonl" else f" (from {display(skill.tasks_path)})"
    console.print(
        literal("ok", "green")
        + literal(f": {display(skill.path / 'SKILL.md')} and {len(skill.tasks)} tasks{source} are valid"),
        soft_wrap=True,
    )
    return 0


def print_tools(console: Console, skill: Skill) -> None:
    """The tools the policy may call (allowed-tools' commands, tools.py's functions), each with its JSON schema."""
    if not skill.tools:
        console.print("tools (tools.py, allowed-tools): none")
        return
    console.print(f"tools (tools.py, allowed-tools; docs/tools.md): {len(skill.tools)}")
    for t in skill.tools:
        where = f"{display(t.source)}:{t.line}" if t.source else "allowed-tools"
        first = t.description.splitlines()[0]
        console.print(literal(f"  {t.name} ({where}): {first}"), soft_wrap=True)
        if t.kind == "bash":
            console.print(literal(f"    commands: {allowed_text(t.prefixes)}"), soft_wrap=True)
        console.print(literal(f"    parameters: {json.dumps(t.parameters, sort_keys=True)}"), soft_wrap=True)


def print_episodes(console: Console, skill: Skill) -> None:
    """A skill with tools and scripted reference episodes: the references played for real and scored by the checks,
    and the scripts of exploits.py's EPISODES against them (information, as print_contract's)."""
    refs = [t for t in skill.tasks if t.reference]
    tasks = [refs[k * len(refs) // EPISODE_TASKS] for k in range(min(EPISODE_TASKS, len(refs)))]
    found = episodes.measure(skill, tasks)
    mean = sum(found.rewards) / len(found.rewards) if found.rewards else 0.0
    failed = ", ".join(f"{name} on {n}" for name, n in found.failed.items()) or "none"
    console.print(
        literal(
            f"reference episodes (checks.py reference_episode), played on {found.tasks} of the {len(refs)} tasks "
            f"with a reference, checks only: mean reward {mean:.2f}; checks failed: {failed}"
        ),
        soft_wrap=True,
    )
    for name, (below, tried) in found.exploits.items():
        verdict = literal("  held", "") if below == tried else literal("  paid", "yellow")
        console.print(verdict + literal(f"  {name}: below the reference on {below} of {tried} tasks"), soft_wrap=True)


def print_contract(console: Console, skill: Skill) -> None:
    """Which exploit families the skill's checks pay (skill_rl/scoring/contract.py), and what to add: information, never a
    failure, since the contract binds the shipped skills (their tests), not a user's."""
    found = contract.measure(skill)
    against = (
        f"against the references, on {found.tasks} of the {found.of} tasks with one"
        if found.with_references
        else f"no task has a reference: against the most the checks pay (1.00), on {found.tasks} of {found.of} tasks"
    )
    console.print(literal(f"exploit families, checks only (the --judge none reward), {against}:"), soft_wrap=True)
    for f in found.families:
        verdict = literal("  paid", "yellow") if not f.held else literal("  held")
        told = f"as high on {f.paid} of {f.tried} {f.unit}" if f.tried else "applies to no task"
        console.print(verdict + literal(f"  {f.name}: {told}"), soft_wrap=True)
    if found.unmeasured:
        console.print(literal(f"  not measured (they need references): {', '.join(found.unmeasured)}"), soft_wrap=True)
    paid = [f.name for f in found.families if not f.held]
    console.print(
        literal(
            f"the checks pay {len(paid)} of {len(found.families)} families tried"
            + (f": {', '.join(paid)}" if paid else "")
        ),
        soft_wrap=True,
    )
    for line in contract.advice(skill, found):
        console.print(literal(f"  to add: {line}"), soft_wrap=True)


def leaked_val_tasks(skill: Skill) -> list[str]:
    """A warning per val task whose input (whitespace aside) is a train task's: its val reward would measure
    recall of a trained task. A warning, not an error: the file is valid, and the user may mean it."""
    # tasks that act in different workspaces are different tasks, whatever their input says
    train: dict[tuple[str, str | None], Task] = {}
    for t in skill.split("train"):
        train.setdefault((" ".join(t.input.split()), t.workspace), t)
    path = display(skill.tasks_path)
    return [
        f"warning: {path}:{t.line}: val task {show(t.id)} has the same input as train task {show(same.id)} "
        f"(line {same.line}): its val reward measures recall of a trained task, not the skill"
        for t in skill.split("val")
        if (same := train.get((" ".join(t.input.split()), t.workspace))) is not None
    ]


def print_derived(console: Console, skill: Skill, taken: set[str]) -> None:
    """Each check derived from SKILL.md with the sentence it came from, and the sentences left to the judge."""
    found = derive(skill)
    if not skill.derive:
        names = ", ".join(d.fn.__name__ for d in found.checks) or "none"
        console.print(
            f'derived checks: off (metadata derive-checks is "false"); SKILL.md would yield: {names}',
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        return
    console.print(
        f"derived checks (from {found.path}):{' none' if not found.checks else ''}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    for d in found.checks:
        name, fn = d.fn.__name__, d.fn
        if name in taken:
            console.print(f"  {name}: not used, checks.py defines a check of that name", highlight=False, markup=False)
            continue
        flags = ", ".join([fn.dimension] + ["gate"] * fn.gate)
        console.print(f"  {name} ({flags}): {fn.__doc__}", highlight=False, markup=False, soft_wrap=True)
        console.print(f"      {found.path}:{d.line}: {d.source}", highlight=False, markup=False, soft_wrap=True)
    if found.ignored:
        console.print(
            "not derived (reads like a limit, count or enumeration; the reward does not check it, the judge may):",
            markup=False,
        )
        for s in found.ignored:
            console.print(
                f"  not derived: {found.path}:{s.line}: {s.text}", highlight=False, markup=False, soft_wrap=True
            )


def print_config(args, judge) -> None:
    """The resolved configuration of a run, secrets masked."""
    hidden = {"judge_api_key", "api_key"} | (
        {k for k in vars(args) if k.startswith(("sft_", "teacher"))} if not args.sft else set()
    )
    shown = {k: v for k, v in vars(args).items() if v not in (None, False, []) and k not in hidden}
    shown["judge"] = judge.public() if judge else "none (checks only)"
    width = max(len(k) for k in shown)
    for k, v in shown.items():
        print(f"{k:<{width}}  {v}", flush=True)
