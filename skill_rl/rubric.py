"""The rubric: deterministic checks, per-dimension scores and the weighted reward.

    reward = sum(w_d * s_d for scored d) / sum(w_d for scored d)      d in format, procedure, correctness

A dimension's score s_d is
  - checks only:   the mean of its applicable checks (True = 1, False = 0, floats as they are),
                   or 0 when one of its *gate* checks fails (e.g. "this is not a commit message");
  - judge only:    the RULER score, clamped into [0, 1];
  - both:          (checks + judge) / 2, and 0 when a gate fails (the judge cannot rescue it);
  - neither:       None, and the dimension drops out of the weighted mean (e.g. `--judge none`).

Checks live with their skill (skills/<name>/checks.py) and are declared with `@check`; more are
derived from the SKILL.md's own Output Format and Rules (derived.py).
This module imports nothing heavy: `--check` and `--score --judge none` stay fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping

from .skills import DIMENSIONS, Skill, Task

CheckResult = bool | float | None  # None: not applicable to this task


def check(dimension: str, *, gate: bool = False, key: bool = False):
    """Declare a pure function `(output: str, task: Task) -> bool | float | None` as a rubric check.

    gate: failing it zeroes its whole dimension. key: report its pass rate in `--eval` tables.
    """
    if dimension not in DIMENSIONS:
        raise ValueError(f"check dimension must be one of {DIMENSIONS}, got {dimension!r}")

    def mark(fn: Callable[[str, Task], CheckResult]):
        fn.dimension, fn.gate, fn.key = dimension, gate, key
        return fn

    return mark


def skill_checks(skill: Skill) -> list[Callable]:
    """The skill's checks: those of checks.py in the order it defines them, then those derived from its
    SKILL.md (skill_rl/derived.py) whose names no check of checks.py takes: a hand-written check wins."""
    from .derived import derived_checks  # derived.py builds its checks with `check` above

    own = []
    if skill.checks is not None:
        own = [v for v in vars(skill.checks).values() if callable(v) and getattr(v, "dimension", None) in DIMENSIONS]
        own.sort(key=lambda f: f.__code__.co_firstlineno)
    taken = {f.__name__ for f in own}
    return own + [f for f in derived_checks(skill) if f.__name__ not in taken]


@dataclass(frozen=True)
class Score:
    """The score of one output. Its numeric fields become trajectory metrics."""

    format: float | None
    procedure: float | None
    correctness: float | None
    reward: float
    checks: Mapping[str, CheckResult]
    judge: str | None = None  # the judge's explanation(s), None when not judged
    judged: bool = False  # False: offline / deterministic-only score
    by_checks: Mapping[str, float] = MappingProxyType({})  # per dimension: the checks' mean, where checks apply
    by_judge: Mapping[str, float] = MappingProxyType({})  # per dimension: the judge's score, where it scored
    gated: tuple[str, ...] = ()  # dimensions whose gate check failed

    def metrics(self) -> dict[str, float]:
        """Trajectory metrics. A dimension or check that was not scored is left out, so ART's
        per-key means (and ours) are taken over the outputs where it applies."""
        out = {"reward": self.reward, "judged": float(self.judged)}
        out.update({d: getattr(self, d) for d in DIMENSIONS if getattr(self, d) is not None})
        out.update({f"check/{k}": float(v) for k, v in self.checks.items() if v is not None})
        out.update({f"by_checks/{d}": v for d, v in self.by_checks.items()})
        out.update({f"by_judge/{d}": v for d, v in self.by_judge.items()})
        out["format_gate_failed"] = float("format" in self.gated)
        return out


def run_checks(fns: list[Callable], output: str, task: Task) -> dict[str, CheckResult]:
    results = {}
    for fn in fns:
        v = fn(output, task)
        results[fn.__name__] = v if v is None or isinstance(v, bool) else min(1.0, max(0.0, float(v)))
    return results


def dimension_scores(fns: list[Callable], results: Mapping[str, CheckResult]) -> dict[str, tuple[float | None, bool]]:
    """Per dimension: (mean of applicable checks or None, whether a gate failed)."""
    out = {}
    for d in DIMENSIONS:
        vals, gated = [], False
        for fn in fns:
            v = results.get(fn.__name__)
            if fn.dimension != d or v is None:
                continue
            vals.append(float(v))
            gated |= fn.gate and not v
        out[d] = (sum(vals) / len(vals) if vals else None, gated)
    return out


def clamp(x) -> float | None:
    """A judge score as a float in [0, 1]; None when it is not a finite number."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else min(1.0, max(0.0, x))


def combine(skill: Skill, fns: list[Callable], results: Mapping[str, CheckResult],
            judge_scores: Mapping[str, float] | None = None, explanation: str | None = None) -> Score:
    """Fold check results and (optional) judge scores into a Score, by the formula in the docstring."""
    judge_scores = judge_scores or {}
    dims: dict[str, float | None] = {}
    by_checks, gates = {}, []
    for d, (det, gated) in dimension_scores(fns, results).items():
        j = judge_scores.get(d)
        if det is not None:
            by_checks[d] = det
        if gated:
            dims[d] = 0.0
            gates.append(d)
        elif det is not None and j is not None:
            dims[d] = (det + j) / 2
        else:
            dims[d] = det if det is not None else j
    scored = [d for d in DIMENSIONS if dims[d] is not None and skill.weights[d] > 0]
    total = sum(skill.weights[d] for d in scored)
    reward = sum(skill.weights[d] * dims[d] for d in scored) / total if total else 0.0
    return Score(dims["format"], dims["procedure"], dims["correctness"], reward,
                 MappingProxyType(dict(results)), explanation, bool(judge_scores),
                 MappingProxyType(by_checks), MappingProxyType(dict(judge_scores)), tuple(gates))


def score_offline(skill: Skill, task: Task, outputs: list[str]) -> list[Score]:
    """Deterministic-only scores (the `--judge none` path, and the fallback when the judge fails)."""
    fns = skill_checks(skill)
    return [combine(skill, fns, run_checks(fns, o, task)) for o in outputs]
