"""The rubric: deterministic checks, per-dimension scores and the weighted reward.

    reward = sum(w_d * s_d for scored d) / sum(w_d for scored d)      d in format, procedure, correctness

A dimension's score s_d is
  - checks only:   the mean of its applicable checks (True = 1, False = 0, floats as they are),
                   or 0 when one of its *gate* checks fails (e.g. "this is not a commit message");
  - judge only:    the RULER score, clamped into [0, 1];
  - both:          (checks + judge) / 2, and 0 when a gate fails (the judge cannot rescue it);
  - neither:       None, and the dimension drops out of the weighted mean (e.g. `--judge none`).

Checks live with their skill (skills/<name>/checks.py) and are declared with `@check`; more are
derived from the SKILL.md's own Output Format and Rules (derived.py). They are user
code, so a check's call is bounded (CHECK_SECONDS, see watchdog.py) and its result validated. A check
that raises, times out, or returns anything but True/False, a number in [0, 1] or None, is scored as
FAILING for that output (False; a gate that fails this way zeroes its dimension) and the error is
kept beside the results. Never as passing, and never as "not applicable": either would let a policy
raise its reward by making a check fail to run. A check that timed out TIMEOUTS_BEFORE_SKIP times is
not called again in this process (each later output records it as failing), so a check that never
returns costs seconds, not hours.

This module imports nothing heavy: `--check` and `--score --judge none` stay fast.
"""

from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from .skills import DIMENSIONS, Skill, Task, brief, display, show
from .watchdog import Timeout, Watchdog

CheckResult = bool | float | None  # None: not applicable to this task
CHECK_SECONDS = 1.0  # one check on one output; checks are meant to take microseconds
TIMEOUTS_BEFORE_SKIP = 3
_timeouts: dict[Callable, int] = {}  # check -> how often it timed out in this process


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
    check_errors: Mapping[str, str] = MappingProxyType({})  # checks that gave no valid result: scored as failing

    def metrics(self) -> dict[str, float]:
        """Trajectory metrics. A dimension or check that was not scored is left out, so ART's
        per-key means (and ours) are taken over the outputs where it applies."""
        out = {"reward": self.reward, "judged": float(self.judged), "check_errors": float(len(self.check_errors))}
        out.update({d: getattr(self, d) for d in DIMENSIONS if getattr(self, d) is not None})
        out.update({f"check/{k}": float(v) for k, v in self.checks.items() if v is not None})
        out.update({f"by_checks/{d}": v for d, v in self.by_checks.items()})
        out.update({f"by_judge/{d}": v for d, v in self.by_judge.items()})
        out["format_gate_failed"] = float("format" in self.gated)
        return out


class CheckResults(dict):
    """Check name -> result for one output. `errors` holds name -> what went wrong, for the checks that gave
    no valid result (raised, timed out, returned something else); their result here is False: failing."""

    __slots__ = ("errors",)

    def __init__(self):
        super().__init__()
        self.errors: dict[str, str] = {}


def _describe(thing) -> str:
    if isinstance(thing, Timeout):
        return f"timed out after {CHECK_SECONDS:g} s"
    if isinstance(thing, BaseException):
        return brief(thing)
    if inspect.iscoroutine(thing) or inspect.isgenerator(thing):
        thing.close()  # never awaited, and never warned about
        return "returned a coroutine: checks are plain functions, not async ones"
    return f"returned {show(thing, 60)}, not True/False, a number in [0, 1] or None"


def _valid(value) -> CheckResult:
    """The check's return value as a result, or ValueError."""
    if value is None or value is True or value is False:
        return value
    if isinstance(value, numbers.Real):
        x = float(value)  # OverflowError for a huge int: reported like any other error
        if -1e-9 <= x <= 1 + 1e-9:  # NaN fails both comparisons
            return min(1.0, max(0.0, x))
    raise ValueError(value)


def _settle(fn: Callable, value, error: BaseException | None, dog: Watchdog) -> tuple[CheckResult, str | None]:
    """A check's call that was not plainly True/False/None/a fraction: (its result, None), or (False, why)."""
    if error is None:
        result, invalid = dog.call(_valid, value)  # user types may run user code
        if invalid is None:
            return result, None
        error = invalid if isinstance(invalid, Timeout) else None
    if isinstance(error, Timeout):
        _timeouts[fn] = _timeouts.get(fn, 0) + 1
    thing = value if error is None else error
    text, broken = dog.call(_describe, thing)
    return False, text if broken is None else f"{type(thing).__name__} (which cannot be shown)"


def _run(fns: list[Callable], output: str, task: Task, dog: Watchdog) -> CheckResults:
    results = CheckResults()
    for fn in fns:
        if fn in _timeouts and _timeouts[fn] >= TIMEOUTS_BEFORE_SKIP:
            results[fn.__name__], results.errors[fn.__name__] = False, f"not run: timed out {TIMEOUTS_BEFORE_SKIP} times already"
            continue
        value, error = dog.call(fn, output, task)
        if error is None and (value is None or value is True or value is False or (type(value) is float and 0.0 <= value <= 1.0)):
            results[fn.__name__] = value  # the common case, in this loop: scoring speed is the loop's speed
            continue
        value, error = _settle(fn, value, error, dog)
        results[fn.__name__] = value
        if error is not None:
            results.errors[fn.__name__] = error
    return results


def run_checks(fns: list[Callable], output: str, task: Task) -> CheckResults:
    """Every check on one output, each bounded in time and validated (see the module docstring)."""
    with Watchdog(CHECK_SECONDS) as dog:
        return _run(fns, output, task, dog)


def run_checks_group(fns: list[Callable], outputs: list[str], task: Task) -> list[CheckResults]:
    """run_checks for every output of a group, with one timer for the group."""
    with Watchdog(CHECK_SECONDS) as dog:
        return [_run(fns, o, task, dog) for o in outputs]


def where(fn: Callable) -> str:
    """file:line of a check's definition (checks.py, or derived.py for a check derived from SKILL.md)."""
    return f"{display(Path(fn.__code__.co_filename))}:{fn.__code__.co_firstlineno}"


def reference_problems(skill: Skill) -> list[str]:
    """Run every check once on each task's reference: one line per check that fails to run on one."""
    fns = skill_checks(skill)
    first: dict[str, tuple[Task, str]] = {}
    counts: dict[str, int] = {}
    with_refs = [t for t in skill.tasks if t.reference is not None]
    for task in with_refs:
        for name, error in run_checks(fns, task.reference, task).errors.items():
            first.setdefault(name, (task, error))
            counts[name] = counts.get(name, 0) + 1
    lines = []
    for fn in fns:
        if fn.__name__ in first:
            task, error = first[fn.__name__]
            more = counts[fn.__name__] - 1
            lines.append(f"{where(fn)}: check '{fn.__name__}' failed on the "
                         f"reference of task '{task.id}' ({display(skill.path / 'tasks.jsonl')}:{task.line}): {error}"
                         + (f" (and on {more} more reference(s))" if more else ""))
    return lines


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
                 MappingProxyType(by_checks), MappingProxyType(dict(judge_scores)), tuple(gates),
                 MappingProxyType(dict(getattr(results, "errors", {}))))


def score_offline(skill: Skill, task: Task, outputs: list[str]) -> list[Score]:
    """Deterministic-only scores (the `--judge none` path, and the fallback when the judge fails)."""
    fns = skill_checks(skill)
    return [combine(skill, fns, r) for r in run_checks_group(fns, outputs, task)]
