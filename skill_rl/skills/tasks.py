"""tasks.jsonl: one JSON object a line, each a Task (with the skill's `Expect` model for its `expect`),
every problem collected and reported as file:line: field.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from skill_rl.skills.skill import MAX_LINE_CHARS, Task, display, problem, pydantic_problems, read_only, show


def no_duplicate_keys(pairs):
    """json.loads hook: a key given twice in one object is an error (JSON would keep the last silently)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"field '{dup}' is given twice")
    return out


def parse_task_line(path: Path, n: int, raw: bytes, expect_model, problems: list[str]) -> Task | None:
    """Parse one tasks.jsonl line (1-based `n`); append problems and return None when it is invalid."""
    if len(raw) > MAX_LINE_CHARS:
        problems.append(problem(path, n, f"line is {len(raw):,} bytes; the limit is {MAX_LINE_CHARS:,}"))
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        problems.append(problem(path, n, f"line is not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"))
        return None
    try:
        obj = json.loads(text, object_pairs_hook=no_duplicate_keys)
    except ValueError as e:  # JSONDecodeError is a ValueError; so is a duplicate key
        msg = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        col = f" at column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        problems.append(problem(path, n, f"invalid JSON{col}: {msg}"))
        return None
    except RecursionError:
        problems.append(problem(path, n, "invalid JSON: nested too deeply"))
        return None
    if not isinstance(obj, dict):
        problems.append(problem(path, n, f"each line must be a JSON object, got {type(obj).__name__}"))
        return None
    try:
        task = Task.model_validate({**obj, "line": n})
    except ValidationError as e:
        problems.extend(pydantic_problems(path, e, lambda loc: n))
        return None
    if task.expect is None:
        return task
    if expect_model is None:
        problems.append(problem(path, n, "field 'expect' is given but this skill has no checks.py defining an Expect schema"))
        return None
    try:
        return task.model_copy(update={"expect": read_only(expect_model.model_validate(task.expect))})
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(p) for p in ("expect", *err["loc"]))
            problems.append(problem(path, n, f"field '{loc}': {err['msg'][0].lower()}{err['msg'][1:]}, got {show(err.get('input'))}"))
        return None


def load_tasks(path: Path, expect_model, problems: list[str]) -> list[Task]:
    try:
        f = path.open("rb")
    except OSError as e:
        problems.append(problem(path, None, f"cannot read file: {e.strerror}"))
        return []
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    with f:  # line by line: a 100,000-task file never sits in memory twice
        for n, raw in enumerate(f, start=1):
            raw = raw.rstrip(b"\r\n")
            if n == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM, as some editors write
            if not raw.strip():
                continue
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


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSONL file another run was appending to; a line cut short by a crash is dropped."""
    out = []
    for raw in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue
    return out
