"""How often an output a policy writes from the input alone scores above the real answer: code-review, release-notes.

    python bench/families.py [--skill code-review|release-notes ...]

The families are each skill's exploits (skills/<name>/exploits.py): its `@exploit` catalogue and the per-task
families (`step=True`) written from the task's input alone: "Improve <word>" entries, titles reordered, one vague
entry per section, invented changes; LGTM and three blocking findings quoting code at random lines. Each family
is scored as a `--score` file or a training step would score it, as exploits.step_shares does: its outputs for
every task of a fixture together with the real answers, so that the step pass (skill_rl/scoring/repeats.py)
takes off what it repeats across tasks. Per fixture (the shipped tasks, and each real fixture of tests/data/, the held-out one
marked), with `expect` as given and without it (each task scored without its reference in either case, so that no reference
can stand in for content), it prints on how many tasks each family scored strictly above the real
answer, and how many real answers score below 0.8. Checks only (`--judge none`). Seconds on two cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from skill_rl.scoring import exploits, repeats  # noqa: E402
from skill_rl.scoring.rubric import score_offline  # noqa: E402
from skill_rl.skills import load_skill  # noqa: E402

DATA = ROOT / "tests" / "data"
FIXTURES = {"code-review": "review-*.jsonl", "release-notes": "release-notes-*.jsonl"}
# tests/data/README.md: measured, never tuned on
HELD_OUT = "release-please"
LOW = 0.8


@dataclasses.dataclass
class Above:
    """On how many tasks one family scored strictly above the real answer, in a step."""

    family: str
    above: int = 0
    # tasks where it scored strictly below: the reward tells it from the real answer
    below: int = 0
    tasks: int = 0
    # the first task where it scored above, for the report
    first: str = ""

    @property
    def rate(self) -> float:
        return self.above / self.tasks if self.tasks else 0.0


def measure(skill, expect: bool) -> tuple[list[Above], list[float]]:
    """Per exploit of the skill's exploits.py (the `step=True` families included), the tasks where it scored above
    and below the real answer in a step; and the real answers' rewards there. As exploits.step_shares scores: the
    real answers and one family's outputs scored together (the step pass over them, SKILL.md's lines and what
    references share exempt), each task scored without its reference; without `expect`, without that too."""
    tasks = [t if expect else t.model_copy(update={"expect": None}) for t in skill.tasks if t.reference]
    skill = dataclasses.replace(skill, tasks=tuple(tasks))
    ctx = exploits.Context(skill, tasks, "")
    families = [e for e in exploits.catalogue(skill, step=True) if e.make in vars(skill.exploits).values()]
    rows = []
    for task in tasks:
        made = {e.name: out for e in families if isinstance(out := e.make(ctx, task), str) and out != task.reference}
        bare = task.model_copy(update={"reference": None})
        rows.append(
            (task, list(made), list(made.items()), score_offline(skill, bare, [task.reference, *made.values()]))
        )
    errors = sum(len(score.check_errors) for *_, scores in rows for score in scores)
    # a check that ran past its second (a loaded machine) is scored as failing: the figures would lie
    if errors:
        print(
            f"warning: {errors} check error(s) (timeouts?) while scoring {skill.name}: these rates are not valid; "
            "run again on a quieter machine",
            file=sys.stderr,
        )
    stepped = exploits._in_a_step(rows, repeats, skill)
    rates = {e.name: Above(e.name) for e in families}
    for task, _, pairs, scores in stepped:
        human = scores[0].reward
        for (name, _), score in zip(pairs, scores[1:]):
            rate = rates[name]
            rate.tasks += 1
            rate.below += score.reward < human - 1e-9
            if score.reward > human + 1e-9:
                rate.above += 1
                rate.first = rate.first or f"{task.id}: {score.reward:.3f} > {human:.3f}"
    return list(rates.values()), [scores[0].reward for *_, scores in stepped]


def fixtures(name: str) -> dict[str, object]:
    """Label -> the skill with those tasks: its shipped tasks, then each real fixture of tests/data/."""
    skill = load_skill(ROOT / "skills" / name)
    out = {"shipped tasks": skill}
    for path in sorted(DATA.glob(FIXTURES[name])):
        label = path.stem + (" (held out)" if HELD_OUT in path.stem else "")
        out[label] = exploits.load_real(skill, [path])
    return out


def cell(rate: Above) -> str:
    return f"{rate.above}/{rate.tasks} ({rate.below} below)" if rate.tasks else "n/a"


def report(name: str) -> None:
    from rich.console import Console
    from rich.table import Table

    sets = fixtures(name)
    for expect in (True, False):
        measured = {label: measure(skill, expect) for label, skill in sets.items()}
        table = Table(
            title=f"{name}, {'with expect' if expect else 'without expect'}: tasks where "
            "the output scored strictly above the real answer (below it), checks only, in a step, without references"
        )
        table.add_column("output")
        for label in sets:
            table.add_column(label.replace(" (", "\n("), justify="right")
        columns = [{r.family: r for r in rates} for rates, _ in measured.values()]
        for family in columns[0]:
            table.add_row(family, *(cell(c[family]) for c in columns))
        table.add_row(
            f"real answers below {LOW}",
            *(f"{sum(r < LOW - 1e-9 for r in human)}/{len(human)}" for _, human in measured.values()),
        )
        Console(width=200).print(table)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skill", action="append", choices=sorted(FIXTURES), help="default: both")
    args = p.parse_args(argv)
    for name in args.skill or sorted(FIXTURES):
        report(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
