"""The rubric: deterministic checks, per-dimension scores and the weighted reward.

Each check covers a share of its dimension (`covers`). For one output, a dimension's checks score the
covers-weighted mean of its applicable checks, and together cover c_d = min(1, sum of their covers):

    s_d    = c_d * checks + (1 - c_d) * judge          when the judge scored d
    s_d    = checks, entering the reward with weight w_d * c_d       when it did not (`--judge none`)
    reward = sum(weight_d * s_d) / sum(weight_d)       d in format, procedure, correctness

so a judge-intended part of a dimension is never silently replaced by whichever check happens to apply:
a check that covers a tenth of procedure buys a tenth of procedure's weight. A dimension the skill does
not judge (SKILL.md `metadata.judge`) is covered whole by its checks (c_d = 1 when any applies). A check
declared without `covers` (derived checks, markdown-only and older user skills) shares DEFAULT_COVERS of a
judged dimension with the other such checks that apply: checks and judge half and half, as before.
A failing *gate* check zeroes its dimension at the dimension's full weight (the judge cannot rescue it);
a dimension nothing scored drops out.

All of the above is about *facts* (`@check(kind="fact")`, the default): what the format's rules, `expect` or the
input fix. A content *estimate* (`kind="estimate"`: is the subject about this diff, does the body say
something) covers nothing and is not in any mean, so its share of the dimension is the judge's (or drops
out under `--judge none`). It can only cut: each applicable estimate with result v multiplies the reward by
1 - cut * (1 - v), estimates of a dimension the skill weighs 0 excepted. Passing is neutral, so an estimate
never pays an answer more than a human answer that passes it earns; calibrated on human answers
(bench/calibration.py), a shipped estimate passes nearly all of them.

Checks live with their skill (skills/<name>/checks.py) and are declared with `@check` (checks.py, which
also runs them, bounded and validated); more are derived from the SKILL.md's own Output Format and Rules
(derived/).

This module imports nothing heavy: `--check` and `--score --judge none` stay fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping

from skill_rl.scoring.checks import (
    DEFAULT_COVERS,
    NO_EPISODE,
    CheckResult,
    is_estimate,
    run_checks,
    run_checks_group,
    scoring,
    where,
)
from skill_rl.scoring.derived import derived_checks
from skill_rl.skills import DIMENSIONS, Skill, Task
from skill_rl.text import display


def skill_checks(skill: Skill) -> list[Callable]:
    """The skill's checks: those of checks.py in the order it defines them, then those derived from its
    SKILL.md (skill_rl/scoring/derived/) whose names no check of checks.py takes: a hand-written check wins."""
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
    # the judge's explanation(s), None when not judged
    judge: str | None = None
    # False: offline / deterministic-only score
    judged: bool = False
    # per dimension: the checks' mean, where checks apply
    by_checks: Mapping[str, float] = MappingProxyType({})
    # per dimension: the judge's score, where it scored
    by_judge: Mapping[str, float] = MappingProxyType({})
    # dimensions whose gate check failed
    gated: tuple[str, ...] = ()
    # checks that gave no valid result: scored as failing
    check_errors: Mapping[str, str] = MappingProxyType({})
    # per dimension: c_d, the share its applicable checks cover
    covers: Mapping[str, float] = MappingProxyType({})
    # the step pass's penalty for text repeated across tasks (repeats.py); taken off
    repeated: float = 0.0
    # share of the reward the failing estimates took off (module docstring); 0: none failed
    cut: float = 0.0

    def metrics(self) -> dict[str, float]:
        """Trajectory metrics. A dimension or check that was not scored is left out, so ART's
        per-key means (and ours) are taken over the outputs where it applies."""
        out = {"reward": self.reward, "judged": float(self.judged), "check_errors": float(len(self.check_errors))}
        out.update({d: getattr(self, d) for d in DIMENSIONS if getattr(self, d) is not None})
        out.update({f"check/{k}": float(v) for k, v in self.checks.items() if v is not None})
        out.update({f"by_checks/{d}": v for d, v in self.by_checks.items()})
        out.update({f"by_judge/{d}": v for d, v in self.by_judge.items()})
        out.update({f"covers/{d}": v for d, v in self.covers.items()})
        out["repeated"] = self.repeated
        out["cut"] = self.cut
        out["format_gate_failed"] = float("format" in self.gated)
        return out


def reference_problems(skill: Skill) -> list[str]:
    """Run every check once on each task's reference: one line per check that fails to run on one."""
    fns = skill_checks(skill)
    first: dict[str, tuple[Task, str]] = {}
    counts: dict[str, int] = {}
    with_refs = [t for t in skill.tasks if t.reference is not None]
    for task in with_refs:
        for name, error in run_checks(fns, task.reference, task).errors.items():
            # a check of an episode cannot run on a reference text alone: not a broken check
            if error == NO_EPISODE:
                continue
            first.setdefault(name, (task, error))
            counts[name] = counts.get(name, 0) + 1
    lines = []
    for fn in fns:
        if fn.__name__ in first:
            task, error = first[fn.__name__]
            more = counts[fn.__name__] - 1
            lines.append(
                f"{where(fn)}: check '{fn.__name__}' failed on the "
                f"reference of task '{task.id}' ({display(skill.tasks_path)}:{task.line}): {error}"
                + (f" (and on {more} more reference(s))" if more else "")
            )
    return lines


@dataclass(frozen=True)
class Dimension:
    """What the checks say about one dimension of one output."""

    # covers-weighted mean of the applicable checks; None when none applies
    checks: float | None
    # c_d: the share of the dimension they cover, in [0, 1]
    covers: float
    # a gate check failed
    gated: bool


def coverage(
    fns: list[Callable], results: Mapping[str, CheckResult], judged: tuple[str, ...] = DIMENSIONS
) -> dict[str, Dimension]:
    """Per dimension, the checks' score and coverage for one output (the module docstring's c_d). `judged`: the
    dimensions the skill means a judge to score; any other is covered whole by the checks that apply."""
    out = {}
    for d in DIMENSIONS:
        applicable = [
            (fn, float(results[fn.__name__]))
            for fn in fns
            if fn.dimension == d and results.get(fn.__name__) is not None and not is_estimate(fn)
        ]
        gated = any(fn.gate and not v for fn, v in applicable)
        unlabelled = sum(getattr(fn, "covers", None) is None for fn, _ in applicable)
        weights = [getattr(fn, "covers", None) or DEFAULT_COVERS / unlabelled for fn, _ in applicable]
        total = sum(weights)
        if not total:
            out[d] = Dimension(None, 0.0, gated)
            continue
        score = sum(w * v for w, (_, v) in zip(weights, applicable)) / total
        out[d] = Dimension(score, min(1.0, total) if d in judged else 1.0, gated)
    return out


def estimate_factor(fns: list[Callable], results: Mapping[str, CheckResult], weights: Mapping[str, float]) -> float:
    """What the estimates leave of the reward: the product of 1 - cut * (1 - v) over the applicable estimates
    (module docstring); 1 when every one passed or none applied."""
    factor = 1.0
    for fn in fns:
        v = results.get(fn.__name__)
        if v is not None and is_estimate(fn) and weights[fn.dimension] > 0:
            factor *= 1.0 - fn.cut * (1.0 - float(v))
    return factor


def dimension_scores(fns: list[Callable], results: Mapping[str, CheckResult]) -> dict[str, tuple[float | None, bool]]:
    """Per dimension: (covers-weighted mean of applicable checks or None, whether a gate failed)."""
    return {d: (x.checks, x.gated) for d, x in coverage(fns, results).items()}


def clamp(x) -> float | None:
    """A judge score as a float in [0, 1]; None when it is not a finite number."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else min(1.0, max(0.0, x))


def combine(
    skill: Skill,
    fns: list[Callable],
    results: Mapping[str, CheckResult],
    judge_scores: Mapping[str, float] | None = None,
    explanation: str | None = None,
) -> Score:
    """Fold check results and (optional) judge scores into a Score, by the formula in the docstring."""
    judge_scores = judge_scores or {}
    dims: dict[str, float | None] = {}
    weight: dict[str, float] = {}
    by_checks, gates, covered = {}, [], {}
    for d, x in coverage(fns, results, skill.judged).items():
        j = judge_scores.get(d)
        if x.checks is not None:
            by_checks[d], covered[d] = x.checks, x.covers
        if x.gated:
            dims[d], weight[d] = 0.0, 1.0
            gates.append(d)
        elif j is not None:
            dims[d], weight[d] = (j if x.checks is None else x.covers * x.checks + (1 - x.covers) * j), 1.0
        elif x.checks is not None:
            dims[d], weight[d] = x.checks, x.covers
        else:
            dims[d] = None
    scored = [d for d in DIMENSIONS if dims[d] is not None and skill.weights[d] * weight[d] > 0]
    total = sum(skill.weights[d] * weight[d] for d in scored)
    reward = sum(skill.weights[d] * weight[d] * dims[d] for d in scored) / total if total else 0.0
    factor = estimate_factor(fns, results, skill.weights)
    return Score(
        dims["format"],
        dims["procedure"],
        dims["correctness"],
        reward * factor,
        MappingProxyType(dict(results)),
        explanation,
        bool(judge_scores),
        MappingProxyType(by_checks),
        MappingProxyType(dict(judge_scores)),
        tuple(gates),
        MappingProxyType(dict(getattr(results, "errors", {}))),
        MappingProxyType(covered),
        cut=1.0 - factor,
    )


def score_offline(skill: Skill, task: Task, outputs: list[str], episodes: list | None = None) -> list[Score]:
    """Deterministic-only scores (the `--judge none` path, and the fallback when the judge fails); `episodes`, each
    output's episode (skill_rl/tools Episode) for the checks of an episode."""
    fns = skill_checks(skill)
    with scoring(skill):
        return [combine(skill, fns, r) for r in run_checks_group(fns, outputs, task, episodes)]


# ------------------------------------------------------------------ what a checks-only reward pays for

# `--judge none` training needs the checks to cover this much of correctness
MIN_CORRECTNESS_COVER = 0.5


def checks_cover(skill: Skill, tasks: list[Task]) -> dict[str, float]:
    """Per dimension, the mean share the checks cover on these tasks (c_d, module docstring), taken on each task's
    reference (an empty answer where it has none): what a `--judge none` reward can see."""
    fns = skill_checks(skill)
    totals = dict.fromkeys(DIMENSIONS, 0.0)
    # an even sample is enough to say how much is covered
    tasks = tasks[:: max(1, len(tasks) // 200)]
    with scoring(skill):
        for task in tasks:
            results = run_checks(fns, task.reference or "", task)
            for d, x in coverage(fns, results, skill.judged).items():
                totals[d] += x.covers if skill.weights[d] > 0 else 0.0
    return {d: totals[d] / len(tasks) if tasks else 0.0 for d in DIMENSIONS}


def checks_only_problem(skill: Skill, tasks: list[Task]) -> str | None:
    """One line when a checks-only reward on these tasks would say little about correctness (raw tasks without
    `expect`, a markdown-only skill): what it would and would not pay. None when the checks cover enough."""
    if skill.weights["correctness"] == 0:
        return None
    cover = checks_cover(skill, tasks)
    if cover["correctness"] >= MIN_CORRECTNESS_COVER:
        return None
    paid = ", ".join(f"{d} {cover[d]:.0%}" for d in DIMENSIONS if skill.weights[d] > 0)
    return (
        f"--judge none: on these {len(tasks)} tasks the checks cover {paid} of each dimension, so a checks-only "
        f"reward would pay mostly for form and not for a right answer (correctness under "
        f"{MIN_CORRECTNESS_COVER:.0%}: no `expect`, or no checks for it), which RL learns to exploit; use a "
        "judge, add `expect` to the tasks, or pass --format-only-reward to train on that reward anyway"
    )
