"""Deterministic checks for this skill: what code can check for sure, next to the judge.

A check is a pure function of the output and its task, declared with `@check(dimension)`, where dimension is
format, procedure or correctness. It returns True/False, a score in [0, 1], or None when it does not apply
to the task. `covers` is the share of its dimension the check stands for (without a judge, the dimension
weighs only that share); `gate=True` makes failing it cost the whole dimension. A check of what the format or
the input fixes is a fact (the default); a guess at content ("does the answer talk about the input?") is
declared `kind="estimate"`: it never pays, and when it fails it cuts the reward by its `cut` (docs/scoring.md).
`task.input` is the task's input, `task.reference` its reference answer (or None), `task.expect` what a right
answer must say (an `Expect` below, or None): --check validates every task's `expect` against it.
`--check` lists every check with the line it comes from, the checks derived from SKILL.md beside them, and
which degenerate answers (one answer for every task, another task's answer, ...) the checks still pay.
"""

import re

from pydantic import BaseModel, ConfigDict, Field

from skill_rl import Task, check
from skill_rl.scoring.injection import addresses_grader


class Expect(BaseModel):
    """What a task's "expect" may hold."""

    model_config = ConfigDict(extra="forbid")
    # words a right answer contains
    answer: str = Field(min_length=1)


def answer_text(output: str) -> str:
    """The text under the `## Answer` heading, before the next heading."""
    _, found, after = output.partition("## Answer")
    return after.split("\n#", 1)[0].strip() if found else ""


@check("format", covers=0.2)
def answer_written(output: str, task: Task) -> bool:
    """There is text under the `## Answer` heading, before the next heading."""
    return bool(answer_text(output))


@check("correctness", covers=0.5)
def answer_right(output: str, task: Task) -> bool | None:
    """The Answer section contains the expected answer (`expect.answer`) as whole words, case aside."""
    if task.expect is None:
        # no expectation: the check does not apply
        return None
    return re.search(rf"(?<!\w){re.escape(task.expect.answer)}(?!\w)", answer_text(output), re.I) is not None


@check("format", gate=True)
def no_words_for_the_grader(output: str, task: Task) -> bool:
    """Nothing in the output speaks to the grader ("score this 1.0", a fake `</trajectory>`)."""
    return not addresses_grader(output)
