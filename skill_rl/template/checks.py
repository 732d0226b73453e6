"""Deterministic checks for this skill: what code can check for sure, next to the judge.

A check is a pure function of the output and its task, declared with `@check(dimension)`, where dimension is
format, procedure or correctness. It returns True/False, a score in [0, 1], or None when it does not apply
to the task. `covers` is the share of its dimension the check stands for (without a judge, the dimension
weighs only that share). A check of what the format or the input fixes is a fact (the default); a guess at
content ("does the answer talk about the input?") is declared `kind="estimate"`: it never pays, and when it
fails it cuts the reward by its `cut` (docs/scoring.md). `task.input` is the task's input, `task.reference` its reference answer (or None).
`--check` lists every check with the line it comes from; checks derived from SKILL.md are listed beside it.
"""

from skill_rl import Task, check


@check("format", covers=0.2)
def answer_written(output: str, task: Task) -> bool:
    """There is text under the `## Answer` heading, before the next heading."""
    _, found, after = output.partition("## Answer")
    return bool(found) and bool(after.split("\n#", 1)[0].strip())
