"""Text repeated verbatim across different tasks of one step: paid for nowhere.

A policy that appends one paragraph to every answer, or answers every task with one message, repeats text
across tasks: text that fits every task says nothing about any. Checks see one output at a time, so this is
a step-level pass over everything scored together (a training step's groups, a `--score` file), applied to
the reward itself rather than only reported (monitor.py reports `monitor/collapse` besides):

    repeated = share of the output's characters, in lines of MIN_LINE or more characters, whose line is also
               in an output for a different task of the step (1 when the whole output is)
    reward  *= 1 - repeated

Outputs for the same task (a group's rollouts) never count against each other. Short lines (a heading, a
verdict, `## Features`) repeat by nature and are not counted.
"""

from __future__ import annotations

import dataclasses

MIN_LINE = 20  # characters: shorter lines are template, not content


def _lines(output: str) -> list[str]:
    return [line.strip() for line in output.split("\n") if len(line.strip()) >= MIN_LINE]


def shares(items: list[tuple[str, str]]) -> list[float]:
    """For (task key, output) pairs, each output's share of text repeated for another task (see module)."""
    whole: dict[str, set[str]] = {}
    where: dict[str, set[str]] = {}
    for task, output in items:
        whole.setdefault(output.strip(), set()).add(task)
        for line in set(_lines(output)):
            where.setdefault(line, set()).add(task)
    out = []
    for task, output in items:
        if output.strip() and len(whole[output.strip()]) > 1:
            out.append(1.0)
            continue
        lines = _lines(output)
        total = sum(map(len, lines))
        out.append(sum(len(line) for line in lines if len(where[line]) > 1) / total if total else 0.0)
    return out


def penalised(score, repeated: float):
    """The Score with its reward multiplied by 1 - repeated, and `repeated` recorded."""
    if not repeated:
        return score
    return dataclasses.replace(score, reward=score.reward * (1 - repeated), repeated=repeated)
