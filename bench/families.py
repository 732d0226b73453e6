"""How often an output a policy writes from the input alone scores above the real answer: code-review, release-notes.

    python bench/families.py [--skill code-review|release-notes ...]

The families are each skill's exploits (skills/<name>/exploits.py): the `@exploit` catalogue and the families
written from the task's input alone (`FAMILIES`: "Improve <word>" entries, titles reordered, one vague entry per
section, invented changes; LGTM and three blocking findings quoting code at random lines). Each family is scored
as a `--score` file or a training step would score it: its outputs for every task of a fixture together, so that
the step pass (skill_rl/scoring/repeats.py) takes off what they repeat across tasks; the real answers are scored
the same way, as one file. Per fixture (the shipped tasks, and each real fixture of tests/data/, the held-out one
marked), with `expect` as given and without it (each task stripped of `expect` and of its reference, so that no
reference can stand in for content), it prints on how many tasks each family scored strictly above the real
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
HELD_OUT = "release-please"  # tests/data/README.md: measured, never tuned on
LOW = 0.8


@dataclasses.dataclass
class Above:
    """On how many tasks one family scored strictly above the real answer, in a step."""

    family: str
    above: int = 0
    below: int = 0  # tasks where it scored strictly below: the reward tells it from the real answer
    tasks: int = 0
    first: str = ""  # the first task where it did, for the report

    @property
    def rate(self) -> float:
        return self.above / self.tasks if self.tasks else 0.0


def families(skill) -> dict[str, object]:
    """Name -> `(ctx, task) -> str | None` for every exploit of the skill's exploits.py and its FAMILIES."""
    out = {e.name: e.make for e in exploits.skill_exploits(skill) if not e.several}
    out.update(getattr(skill.exploits, "FAMILIES", {}))
    return out


def in_a_step(skill, tasks, outputs: list[str]) -> list[float]:
    """The checks-only rewards of one output per task, scored together as one file: the repeated share taken off."""
    scores = [score_offline(skill, t, [o])[0] for t, o in zip(tasks, outputs)]
    shares = repeats.shares([(t.id, o) for t, o in zip(tasks, outputs)])
    return [repeats.penalised(s, r).reward for s, r in zip(scores, shares)]


def measure(skill, expect: bool) -> tuple[list[Above], list[float]]:
    """Per family, the tasks where it scored above the real answer; and the real answers' rewards. Without `expect`,
    every task loses its `expect` before a family writes its output, and its reference too before anything scores
    (the `@exploit` catalogue transforms the reference; FAMILIES never read it)."""
    real = [t for t in skill.tasks if t.reference]
    given = real if expect else [t.model_copy(update={"expect": None}) for t in real]
    scored = given if expect else [t.model_copy(update={"reference": None}) for t in given]
    skill = dataclasses.replace(skill, tasks=tuple(scored))
    ctx = exploits.Context(skill, given, "")
    human = in_a_step(skill, scored, [t.reference for t in real])
    rates = []
    for name, make in families(skill).items():
        made = [(k, out) for k, t in enumerate(given) if isinstance(out := make(ctx, t), str) and out != t.reference]
        rate = Above(name, tasks=len(made))
        if made:
            got = in_a_step(skill, [scored[k] for k, _ in made], [o for _, o in made])
            for (k, _), reward in zip(made, got):
                rate.below += reward < human[k] - 1e-9
                if reward > human[k] + 1e-9:
                    rate.above += 1
                    rate.first = rate.first or f"{scored[k].id}: {reward:.3f} > {human[k]:.3f}"
        rates.append(rate)
    return rates, human


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
        table = Table(title=f"{name}, {'with expect' if expect else 'without expect (nor reference)'}: tasks where "
                            "the output scored strictly above the real answer (and below it), checks only, each scored as one file")
        table.add_column("output")
        for label, skill in sets.items():
            table.add_column(label.replace(" (", "\n("), justify="right")
        columns = [{r.family: r for r in rates} for rates, _ in measured.values()]
        for family in columns[0]:
            table.add_row(family, *(cell(c[family]) for c in columns))
        table.add_row(f"real answers below {LOW}", *(f"{sum(r < LOW - 1e-9 for r in human)}/{len(human)}"
                                                     for _, human in measured.values()))
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
