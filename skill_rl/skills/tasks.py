"""tasks.jsonl: one JSON object a line (read by skill_rl/files.py's strict JSONL reader), each a Task (with the
skill's `Expect` model for its `expect`), every problem collected and reported as file:line: field.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from skill_rl.files import MAX_LINE_BYTES, json_object, jsonl_lines
from skill_rl.skills.skill import Task, read_only
from skill_rl.text import display, problem, pydantic_problems, show
from skill_rl.tools.workspace import workspace_problem


def parse_task_line(path: Path, n: int, raw: bytes, expect_model, problems: list[str]) -> Task | None:
    """Parse one tasks.jsonl line (1-based `n`, read by skill_rl/files.py's strict reader, or made by the miner);
    append problems and return None when it is invalid."""
    if len(raw) > MAX_LINE_BYTES:
        problems.append(problem(path, n, f"line is longer than {MAX_LINE_BYTES:,} bytes"))
        return None
    obj = json_object(path, n, raw, problems)
    if obj is None:
        return None
    try:
        task = Task.model_validate({**obj, "line": n})
    except ValidationError as e:
        problems.extend(pydantic_problems(path, e, lambda loc: n))
        return None
    if task.workspace is not None and (why := workspace_problem(path.parent, task.workspace)):
        problems.append(problem(path, n, f"field 'workspace': {why}"))
        return None
    if task.expect is None:
        return task
    if expect_model is None:
        problems.append(
            problem(path, n, "field 'expect' is given but this skill has no checks.py defining an Expect schema")
        )
        return None
    try:
        return task.model_copy(update={"expect": read_only(expect_model.model_validate(task.expect))})
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(p) for p in ("expect", *err["loc"]))
            problems.append(
                problem(
                    path, n, f"field '{loc}': {err['msg'][0].lower()}{err['msg'][1:]}, got {show(err.get('input'))}"
                )
            )
        return None


def load_tasks(path: Path, expect_model, problems: list[str]) -> list[Task]:
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    # line by line: a 100,000-task file never sits in memory twice
    for n, raw in jsonl_lines(path, problems):
        task = parse_task_line(path, n, raw, expect_model, problems)
        if task is None:
            continue
        if task.id in seen:
            problems.append(problem(path, n, f"field 'id' {task.id!r} is already used on line {seen[task.id]}"))
            continue
        seen[task.id] = n
        tasks.append(task)
    if not tasks and not any(p.startswith(display(path)) for p in problems):
        problems.append(problem(path, None, "no tasks: add one JSON object per line"))
    return tasks
