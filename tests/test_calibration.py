"""Every shipped check on real human answers (skill_rl/scoring/calibration.py): on each real fixture of tests/data/,
among the human messages commitlint accepts, each check passes at least 97 % of those it applies to, and at most
3 % of them score below 0.8 by the checks alone, with `expect` as mined and without it. `python
bench/calibration.py` prints the table. A fixture where a check applies to fewer than 34 answers cannot state 97 %
with one miss; there at most one miss is allowed, and the bench prints it."""

from pathlib import Path

import pytest

from skill_rl.scoring import calibration, exploits
from skill_rl.skills import Task, load_skill

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "tests" / "data").glob("git-commit-*.jsonl"))
FAST = [p for p in FIXTURES if p.stem in ("git-commit-commitlint", "git-commit-release-please")]


def _misses(cal: calibration.Calibration) -> list[str]:
    out = [
        f"{r.name}: {r.passed}/{r.applied} ({r.failures})"
        for r in cal.checks.values()
        if r.rate < calibration.MIN_PASS and (r.applied >= 34 or r.applied - r.passed > 1)
    ]
    return out + ([f"below {calibration.LOW}: {cal.low:.1%}"] if cal.low > calibration.MAX_LOW else [])


def _check(path: Path, expect: bool) -> None:
    skill = exploits.load_real(load_skill(ROOT / "skills" / "git-commit", with_tasks=False), [path], expect)
    cal = calibration.calibrate(skill)
    # mined messages all keep commitlint's rules
    assert cal.kept == cal.tasks > 30
    assert not _misses(cal), path.name


@pytest.mark.parametrize("expect", [True, False], ids=["with expect", "without expect"])
@pytest.mark.parametrize("path", FAST, ids=[p.stem for p in FAST])
def test_human_messages_pass_every_git_commit_check(path, expect):
    _check(path, expect)


# every real fixture: a few seconds each
@pytest.mark.slow
@pytest.mark.parametrize("expect", [True, False], ids=["with expect", "without expect"])
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_human_messages_pass_every_git_commit_check_on_every_fixture(path, expect):
    _check(path, expect)


def test_calibration_counts_a_check_humans_fail():
    """The measure itself: a check that fails every message it sees is reported, a gate's failures are left out."""
    from skill_rl import check

    skill = load_skill(ROOT / "skills" / "git-commit", with_tasks=False)
    tasks = [
        Task(id=f"t{i}", input="diff --git a/a b/a\n", reference=m)
        for i, m in enumerate(["fix: parse dates", "feat: add retries", "not a commit"])
    ]

    @check("format", kind="estimate")
    def never(output, task):
        return False

    import dataclasses
    import types

    module = types.ModuleType("probe")
    module.never, module.conventional = never, skill.checks.conventional
    probe = dataclasses.replace(skill, checks=module, tasks=tuple(tasks))
    cal = calibration.calibrate(probe)
    assert (
        (cal.tasks, cal.kept) == (3, 2) and cal.checks["never"].rate == 0.0 and cal.checks["conventional"].rate == 1.0
    )
    assert any("never (estimate) passes 0/2" in line for line in calibration.problems(cal, "probe"))
