"""Checks: the `@check` declaration, and running checks on an output, bounded and validated.

A check is user code (skills/<name>/checks.py) or derived from a SKILL.md (derived/). Each call is
bounded (CHECK_SECONDS, see watchdog.py) and its result validated. A check that raises, times out, or
returns anything but True/False, a number in [0, 1] or None, is scored as FAILING for that output (False;
a gate that fails this way zeroes its dimension) and the error is kept beside the results. Never as
passing, and never as "not applicable": either would let a policy raise its reward by making a check fail
to run. A check that timed out TIMEOUTS_BEFORE_SKIP times is not called again in this process (each later
output records it as failing), so a check that never returns costs seconds, not hours.

A check whose third parameter is named `episode` is a check of an episode (a tool-using rollout): it is called as
`check(output, task, episode)` with the episode's tool calls and workspace (skill_rl/tools `Episode`). Scored
without an episode (a single-turn answer) it fails, with the reason kept beside the results: never a crash.

How checks become a reward is rubric.py's business; this module imports nothing heavy.
"""

from __future__ import annotations

import inspect
import numbers
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from skill_rl.skills import DIMENSIONS, Skill, Task, takes_episode
from skill_rl.text import brief, display, show
from skill_rl.watchdog import Timeout, Watchdog

if TYPE_CHECKING:
    from skill_rl.tools import Episode

# None: not applicable to this task
CheckResult = bool | float | None
# one check on one output; checks are meant to take microseconds
CHECK_SECONDS = 1.0
TIMEOUTS_BEFORE_SKIP = 3
# check -> how often it timed out in this process
_timeouts: dict[Callable, int] = {}
# check -> whether it takes the episode (skill_rl/skills/usercode.py `takes_episode`), asked once
_EPISODIC: dict[Callable, bool] = {}
NO_EPISODE = "checks an episode (its tool calls and workspace), and this output came without one: scored as failing"


# of a judged dimension: what its applicable checks without `covers` cover together
DEFAULT_COVERS = 0.5
# of the reward: what an estimate without `cut` takes off when it fails outright
DEFAULT_CUT = 0.25
KINDS = ("fact", "estimate")


def check(
    dimension: str,
    *,
    gate: bool = False,
    key: bool = False,
    covers: float | None = None,
    kind: str = "fact",
    cut: float | None = None,
):
    """Declare a pure function `(output: str, task: Task) -> bool | float | None` as a rubric check.

    kind: "fact" (the default) for what the format's rules, `expect` or the input fix: it may pay fully, for the
    share of its dimension it covers. "estimate" for a guess at content (is the subject about this diff, does the
    body say something): it never pays. Passing is neutral; a result v < 1 multiplies the reward by
    1 - cut * (1 - v), so an empty or generic answer loses and no answer gains (rubric.py).
    gate: failing it zeroes its whole dimension (facts only). key: report its pass rate in `--eval` tables.
    covers: a fact's share of its dimension, in (0, 1] (see the module docstring); None: the facts without it
    share DEFAULT_COVERS of a judged dimension. cut: an estimate's largest cut of the reward, in (0, 1];
    None: DEFAULT_CUT.
    """
    if dimension not in DIMENSIONS:
        raise ValueError(f"check dimension must be one of {DIMENSIONS}, got {dimension!r}")
    if kind not in KINDS:
        raise ValueError(f"check kind must be one of {KINDS}, got {kind!r}")
    if covers is not None and not (isinstance(covers, numbers.Real) and 0 < covers <= 1):
        raise ValueError(f"check covers must be a number in (0, 1], got {covers!r}")
    if cut is not None and not (isinstance(cut, numbers.Real) and 0 < cut <= 1):
        raise ValueError(f"check cut must be a number in (0, 1], got {cut!r}")
    if kind == "estimate" and (gate or covers is not None):
        raise ValueError(
            "an estimate check covers nothing and gates nothing (it only cuts, by `cut`); "
            "declare it kind='fact' to cover or gate"
        )
    if kind == "fact" and cut is not None:
        raise ValueError("check cut is for kind='estimate'; a fact covers a share of its dimension (`covers`)")

    def mark(fn: Callable[[str, Task], CheckResult]):
        fn.dimension, fn.gate, fn.key, fn.covers, fn.kind = dimension, gate, key, covers, kind
        fn.cut = (DEFAULT_CUT if cut is None else float(cut)) if kind == "estimate" else 0.0
        return fn

    return mark


def is_estimate(fn: Callable) -> bool:
    """Whether a check is a content estimate (it only cuts); a check marked before kinds existed is a fact."""
    return getattr(fn, "kind", "fact") == "estimate"


_TASK_INPUTS: ContextVar[tuple[str, ...]] = ContextVar("task_inputs", default=())


def task_inputs() -> tuple[str, ...]:
    """The inputs of every task of the skill being scored, for checks that contrast this task with the others
    (what every diff says is not specific to one: skill_rl/scoring/diffs.py `specificity`). Empty outside scoring."""
    return _TASK_INPUTS.get()


# id(skill.tasks) -> (skill.tasks, their inputs): one tuple object per task set
_INPUTS: dict[int, tuple] = {}


def _inputs_of(tasks: tuple[Task, ...]) -> tuple[str, ...]:
    entry = _INPUTS.get(id(tasks))
    if entry is None or entry[0] is not tasks:
        if len(_INPUTS) >= 8:
            _INPUTS.pop(next(iter(_INPUTS)))
        entry = _INPUTS[id(tasks)] = (tasks, tuple(t.input for t in tasks))
    return entry[1]


@contextmanager
def scoring(skill: Skill):
    """Within it, `task_inputs()` is the skill's task inputs (score_offline and the Scorer score inside it)."""
    token = _TASK_INPUTS.set(_inputs_of(skill.tasks))
    try:
        yield
    finally:
        _TASK_INPUTS.reset(token)


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
        # never awaited, and never warned about
        thing.close()
        return "returned a coroutine: checks are plain functions, not async ones"
    return f"returned {show(thing, 60)}, not True/False, a number in [0, 1] or None"


def _valid(value) -> CheckResult:
    """The check's return value as a result, or ValueError."""
    if value is None or value is True or value is False:
        return value
    if isinstance(value, numbers.Real):
        # OverflowError for a huge int: reported like any other error
        x = float(value)
        # NaN fails both comparisons
        if -1e-9 <= x <= 1 + 1e-9:
            return min(1.0, max(0.0, x))
    raise ValueError(value)


def _settle(fn: Callable, value, error: BaseException | None, dog: Watchdog) -> tuple[CheckResult, str | None]:
    """A check's call that was not plainly True/False/None/a fraction: (its result, None), or (False, why)."""
    if error is None:
        # user types may run user code
        result, invalid = dog.call(_valid, value)
        if invalid is None:
            return result, None
        error = invalid if isinstance(invalid, Timeout) else None
    if isinstance(error, Timeout):
        _timeouts[fn] = _timeouts.get(fn, 0) + 1
    thing = value if error is None else error
    text, broken = dog.call(_describe, thing)
    return False, text if broken is None else f"{type(thing).__name__} (which cannot be shown)"


def _episodic(fn: Callable) -> bool:
    known = _EPISODIC.get(fn)
    if known is None:
        known = _EPISODIC[fn] = takes_episode(fn)
    return known


def _run(fns: list[Callable], output: str, task: Task, dog: Watchdog, episode: Episode | None = None) -> CheckResults:
    results = CheckResults()
    for fn in fns:
        if fn in _timeouts and _timeouts[fn] >= TIMEOUTS_BEFORE_SKIP:
            results[fn.__name__], results.errors[fn.__name__] = (
                False,
                f"not run: timed out {TIMEOUTS_BEFORE_SKIP} times already",
            )
            continue
        if not _episodic(fn):
            value, error = dog.call(fn, output, task)
        elif episode is None:
            results[fn.__name__], results.errors[fn.__name__] = False, NO_EPISODE
            continue
        else:
            value, error = dog.call(fn, output, task, episode)
        if error is None and (
            value is None or value is True or value is False or (type(value) is float and 0.0 <= value <= 1.0)
        ):
            # the common case, in this loop: scoring speed is the loop's speed
            results[fn.__name__] = value
            continue
        value, error = _settle(fn, value, error, dog)
        results[fn.__name__] = value
        if error is not None:
            results.errors[fn.__name__] = error
    return results


def run_checks(fns: list[Callable], output: str, task: Task, episode: Episode | None = None) -> CheckResults:
    """Every check on one output (and its episode, for the checks of an episode), each bounded in time and
    validated (see the module docstring)."""
    _prepare([output])
    with Watchdog(CHECK_SECONDS) as dog:
        return _run(fns, output, task, dog, episode)


def run_checks_group(
    fns: list[Callable], outputs: list[str], task: Task, episodes: list[Episode | None] | None = None
) -> list[CheckResults]:
    """run_checks for every output of a group (`episodes`: each output's episode, in order), with one timer."""
    _prepare(outputs)
    episodes = episodes or [None] * len(outputs)
    with Watchdog(CHECK_SECONDS) as dog:
        return [_run(fns, o, task, dog, e) for o, e in zip(outputs, episodes)]


def _prepare(outputs: list[str]) -> None:
    """What a check may load once, loaded before the timer starts: for text beyond ASCII, injection detection's
    table of look-alike letters (a fifth of a second), which would otherwise count against the first check."""
    if not all(o.isascii() for o in outputs if isinstance(o, str)):
        from skill_rl.scoring.injection import prepare

        prepare()


def where(fn: Callable) -> str:
    """file:line of a check's definition (checks.py, or derived/checks.py for a check derived from SKILL.md)."""
    return f"{display(Path(fn.__code__.co_filename))}:{fn.__code__.co_firstlineno}"
