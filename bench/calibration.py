"""Each shipped check's pass rate on real human answers, per skill and fixture: the table in docs/scoring.md.

    python bench/calibration.py [--skill NAME ...] [FIXTURE.jsonl ...]   (default: every skill with fixtures)

For every skill with real fixtures in tests/data/ (git-commit-*.jsonl: commit messages humans wrote, mined with
--tasks-from-git; release-notes-*.jsonl, review-*.jsonl) or the fixtures named: per fixture, the references that keep
the skill's hard format (every gate passes: for git-commit, commitlint accepts the message), each check's pass
rate on them (F: fact, E: estimate; for a skill that turns derivation off, the checks SKILL.md's prose would
derive, measured but not used), and the share of them scoring below 0.8 by the checks alone, with `expect` as
mined and without it. Bounds (skill_rl/scoring/calibration.py): every check >= 97 %, at most 3 % below 0.8.
A fixture marked "held out" was never tuned on. Seconds on two cores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from skill_rl.scoring import calibration, exploits  # noqa: E402
from skill_rl.scoring.rubric import skill_checks  # noqa: E402
from skill_rl.skills import load_skill  # noqa: E402

DATA = ROOT / "tests" / "data"
# tests/data/README.md: measured, never tuned on
HELD_OUT = "release-please"
FIXTURES = {
    "git-commit": "git-commit-*.jsonl",
    "release-notes": "release-notes-*.jsonl",
    "code-review": "review-*.jsonl",
}


def report(skill_name: str, paths: list[Path]) -> int:
    from rich.console import Console
    from rich.table import Table

    from skill_rl.scoring.derived import derive

    skill = load_skill(ROOT / "skills" / skill_name, with_tasks=False)
    # what SKILL.md's prose would check
    off = [] if skill.derive else [d.fn for d in derive(skill).checks]
    cals = {}
    for path in paths:
        for expect in (True, False):
            cals[path, expect] = calibration.calibrate(exploits.load_real(skill, [path], expect), extra=off)
    names = list(cals[paths[0], True].checks)
    unused = {fn.__name__ for fn in off} - {fn.__name__ for fn in skill_checks(skill)}
    table = Table(title=f"{skill_name}: share of human answers (hard format kept) passing each check, checks only")
    table.add_column("check")
    for path in paths:
        held = " (held out)" if HELD_OUT in path.name else ""
        table.add_column(f"{path.stem}{held}", justify="right")
    for name in names:
        rates = []
        for path in paths:
            with_e, without = cals[path, True].checks[name], cals[path, False].checks[name]
            cell = f"{with_e.passed}/{with_e.applied} ({with_e.rate:.1%})" if with_e.applied else "n/a"
            if without.applied != with_e.applied:
                cell += f"; no expect {without.passed}/{without.applied}" if without.applied else "; no expect n/a"
            rates.append(cell)
        kind = with_e.kind[0].upper() + (", derived, not used" if name in unused else "")
        table.add_row(f"{name} ({kind})", *rates)
    for expect in (True, False):
        table.add_row(
            f"reward < {calibration.LOW}, {'with' if expect else 'without'} expect",
            *(
                f"{sum(r < calibration.LOW - 1e-9 for r in cals[p, expect].rewards)}/{cals[p, expect].kept} "
                f"({cals[p, expect].low:.1%})"
                for p in paths
            ),
        )
    table.add_row(
        "references kept (every gate passes)", *(f"{cals[p, True].kept}/{cals[p, True].tasks}" for p in paths)
    )
    Console(width=220).print(table)
    # the checks not used are measured, not held to the bounds
    for c in cals.values():
        c.checks = {n: r for n, r in c.checks.items() if n not in unused}
    bad = [
        line
        for (p, e), c in cals.items()
        for line in calibration.problems(c, f"{p.name} ({'with' if e else 'without'} expect)")
    ]
    print("\n".join(bad) if bad else "every check within the bounds on every fixture")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skill", action="append", help="a shipped skill (default: those with fixtures in tests/data/)")
    p.add_argument("fixtures", nargs="*", type=Path, help="mined JSONL files (default: the skill's in tests/data/)")
    args = p.parse_args(argv)
    status = 0
    for name in args.skill or list(FIXTURES):
        paths = args.fixtures or sorted(DATA.glob(FIXTURES.get(name, f"{name}-*.jsonl")))
        if paths:
            status |= report(name, paths)
    return status


if __name__ == "__main__":
    sys.exit(main())
