"""Checks calibrated on human answers: how often real human answers pass each check.

A check that humans often fail and a template passes teaches RL to leave human style, so every shipped check is
held to this: on real tasks (mined from public history, the human answer as the reference) whose reference keeps
the skill's hard format (every gate check passes: for git-commit, commitlint accepts the message), each check
passes at least MIN_PASS of the references where it applies, and at most MAX_LOW of the references score below
LOW by the checks alone (`--judge none`). `python bench/calibration.py` prints the table per skill and fixture;
tests/test_calibration.py holds the shipped checks to it.

A result passes when it is True or a number of at least 1 - 1e-9; None (not applicable) is left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from skill_rl.scoring.checks import is_estimate, run_checks, scoring
from skill_rl.scoring.rubric import combine, skill_checks
from skill_rl.skills import Skill, Task

# each check passes at least this share of the human answers it applies to
MIN_PASS = 0.97
# at most this share of the human answers score below LOW
LOW, MAX_LOW = 0.8, 0.03


@dataclass
class CheckRate:
    """One check on the human answers of one fixture."""

    name: str
    # fact or estimate
    kind: str
    passed: int = 0
    applied: int = 0
    # task ids, the first few
    failures: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.passed / self.applied if self.applied else 1.0


@dataclass
class Calibration:
    """The human answers of one fixture: how many keep the hard format, each check's pass rate, and the rewards."""

    # tasks with a reference
    tasks: int = 0
    # of those, references that keep the hard format (every gate passes)
    kept: int = 0
    checks: dict[str, CheckRate] = field(default_factory=dict)
    # checks-only reward of each kept reference
    rewards: list[float] = field(default_factory=list)

    @property
    def low(self) -> float:
        """Share of the kept references scoring below LOW."""
        return sum(r < LOW - 1e-9 for r in self.rewards) / len(self.rewards) if self.rewards else 0.0


def passes(value) -> bool:
    return value is True or (value is not None and value is not False and float(value) >= 1 - 1e-9)


def _hard_format(fns: list[Callable], results) -> bool:
    return all(passes(results.get(fn.__name__)) for fn in fns if fn.gate and results.get(fn.__name__) is not None)


def calibrate(skill: Skill, tasks: list[Task] | None = None, extra: list[Callable] = ()) -> Calibration:
    """Each check's pass rate on the references of `tasks` (default: the skill's) that keep the hard format, and
    their checks-only rewards. Scored within the skill's task set (its background, checks.py `task_inputs`).
    `extra`: checks the skill does not use (derived ones it opted out of), measured beside but not in the reward."""
    fns = skill_checks(skill)
    every = fns + [fn for fn in extra if fn.__name__ not in {f.__name__ for f in fns}]
    out = Calibration(checks={fn.__name__: CheckRate(fn.__name__, getattr(fn, "kind", "fact")) for fn in every})
    with scoring(skill):
        for task in tasks if tasks is not None else skill.tasks:
            if not task.reference:
                continue
            out.tasks += 1
            results = run_checks(every, task.reference, task)
            if not _hard_format(fns, results):
                continue
            out.kept += 1
            out.rewards.append(combine(skill, fns, results).reward)
            for fn in every:
                value, rate = results.get(fn.__name__), out.checks[fn.__name__]
                if value is None:
                    continue
                rate.applied += 1
                rate.passed += passes(value)
                if not passes(value) and len(rate.failures) < 5:
                    rate.failures.append(task.id)
    return out


def problems(cal: Calibration, label: str) -> list[str]:
    """One line per way `cal` misses the calibration bounds (module docstring)."""
    lines = [
        f"{label}: check {r.name} ({r.kind}) passes {r.passed}/{r.applied} = {r.rate:.1%} of the human answers "
        f"(< {MIN_PASS:.0%}), e.g. {', '.join(r.failures)}"
        for r in cal.checks.values()
        if r.rate < MIN_PASS
    ]
    if cal.low > MAX_LOW:
        lines.append(f"{label}: {cal.low:.1%} of the human answers score below {LOW} (> {MAX_LOW:.0%})")
    return lines


def estimates(fns: list[Callable]) -> list[str]:
    return [fn.__name__ for fn in fns if is_estimate(fn)]
