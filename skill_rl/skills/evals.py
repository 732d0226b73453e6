"""evals/evals.json, the test cases Anthropic's skill-creator keeps in a skill folder, read as tasks when the
folder has no tasks.jsonl.

    {"skill_name": "meeting-notes",
     "evals": [{"id": 1, "prompt": "...", "expected_output": "...", "files": ["evals/files/a.txt"],
                "expectations": ["The output lists every decision", ...]}]}

Each eval becomes a Task: `prompt` is its input, followed by each of `files` (text, inside the skill folder)
under a `--- path ---` line; `expected_output` and `expectations` become its `criteria`, which the judge
grades correctness against (scoring/reward.py). There is no split in the format: the last fifth of the evals
(rounded up, once there are two) are val, the rest train. Every problem is reported as file:line: field.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skill_rl.files import no_duplicate_keys
from skill_rl.skills.skill import MAX_LINE_CHARS, Task
from skill_rl.text import problem, pydantic_problems, show

EVALS = Path("evals") / "evals.json"
# the evals themselves; their files are bounded one by one and per task
MAX_EVALS_BYTES = 16 * 1024 * 1024


class Eval(BaseModel):
    """One of skill-creator's evals."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: int | str
    prompt: str = Field(min_length=1, pattern=r"\S")
    expected_output: str | None = None
    files: list[str] = []
    expectations: list[str] = []


def load_evals(folder: Path, skill_name: str | None, problems: list[str]) -> list[Task]:
    path = folder / EVALS
    try:
        raw = _read(path, MAX_EVALS_BYTES)
        text = raw.decode("utf-8-sig")
        data = json.loads(text, object_pairs_hook=no_duplicate_keys)
    except OSError as e:
        problems.append(problem(path, None, f"cannot read file: {e.strerror}"))
        return []
    except TooLarge as e:
        problems.append(problem(path, None, str(e)))
        return []
    except RecursionError:
        problems.append(problem(path, None, "invalid JSON: nested too deeply"))
        return []
    except UnicodeDecodeError as e:
        problems.append(problem(path, None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})"))
        return []
    # JSONDecodeError, or a key given twice
    except ValueError as e:
        line = getattr(e, "lineno", None)
        problems.append(problem(path, line, f"invalid JSON: {getattr(e, 'msg', None) or e}"))
        return []
    if not isinstance(data, dict) or not isinstance(data.get("evals"), list) or set(data) - {"skill_name", "evals"}:
        problems.append(problem(path, None, 'expected {"skill_name": ..., "evals": [...]}, with no other field'))
        return []
    if data.get("skill_name") not in (None, skill_name):
        problems.append(
            problem(
                path,
                None,
                f"field 'skill_name' must be this skill's name {skill_name!r}, got {show(data['skill_name'])}",
            )
        )
    lines = _lines(text)
    tasks, seen, n = [], {}, len(data["evals"])
    # the last fifth, rounded up
    val_from = n - -(-n // 5) if n >= 2 else n
    for i, obj in enumerate(data["evals"]):
        line = lines[i] if i < len(lines) else None
        task = _task(folder, path, line, i, obj, "val" if i >= val_from else "train", problems)
        if task is None:
            continue
        if task.id in seen:
            problems.append(
                problem(path, line, f"evals[{i}]: field 'id' {task.id!r} is already used by evals[{seen[task.id]}]")
            )
            continue
        seen[task.id] = i
        tasks.append(task)
    if not data["evals"]:
        problems.append(problem(path, None, "no evals: add one to the 'evals' list"))
    return tasks


def _task(folder: Path, path: Path, line: int | None, i: int, obj, split: str, problems: list[str]) -> Task | None:
    if not isinstance(obj, dict):
        problems.append(problem(path, line, f"evals[{i}] must be a JSON object, got {type(obj).__name__}"))
        return None
    try:
        ev = Eval.model_validate(obj)
    except ValidationError as e:
        problems.extend(
            p.replace(f"{path.name}:{line}: field '", f"{path.name}:{line}: evals[{i}]: field '", 1)
            for p in pydantic_problems(path, e, lambda loc: line)
        )
        return None
    parts = [ev.prompt]
    if len(set(ev.files)) < len(ev.files):
        dup = next(f for f in ev.files if ev.files.count(f) > 1)
        problems.append(problem(path, line, f"evals[{i}]: field 'files' lists {show(dup)} more than once"))
        return None
    for name in ev.files:
        content = _file(folder, name, path, line, i, problems)
        if content is None:
            return None
        parts.append(f"--- {name} ---\n{content}")
        # one task's input, as a tasks.jsonl line is bounded
        if sum(map(len, parts)) > MAX_LINE_CHARS:
            problems.append(
                problem(
                    path,
                    line,
                    f"evals[{i}]: the prompt with its files is over {MAX_LINE_CHARS:,} "
                    "characters; list fewer or smaller files",
                )
            )
            return None
    criteria = ([f"The expected output: {ev.expected_output}"] if ev.expected_output else []) + ev.expectations
    return Task(id=str(ev.id), input="\n\n".join(parts), split=split, criteria=criteria or None, line=line or 0)


def _file(folder: Path, name: str, path: Path, line: int | None, i: int, problems: list[str]) -> str | None:
    """A listed file's text; it must lie inside the skill folder (links followed) and be UTF-8 text."""
    where = f"evals[{i}]: file {show(name)}"
    target = (folder / name).resolve()
    if Path(name).is_absolute() or not target.is_relative_to(folder.resolve()):
        problems.append(problem(path, line, f"{where} is outside the skill folder; list files inside it"))
        return None
    try:
        data = _read(target, MAX_LINE_CHARS) if target.is_file() else None
    except OSError as e:
        problems.append(problem(path, line, f"{where} cannot be read: {e.strerror}"))
        return None
    except TooLarge as e:
        problems.append(problem(path, line, f"{where} {e}"))
        return None
    if data is None:
        problems.append(problem(path, line, f"{where} is not a file in the skill folder"))
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        problems.append(
            problem(
                path, line, f"{where} is not UTF-8 text: the model is given text only (convert it, or leave it out)"
            )
        )
        return None


class TooLarge(ValueError):
    """A file over its limit, found from its size before it is read."""


def _read(path: Path, limit: int) -> bytes:
    """A regular file's bytes, its size checked before it is read; TooLarge for a file past `limit`, or for a FIFO or
    device (opened without blocking, never read: it has no size to trust)."""
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise TooLarge("is not a regular file")
        if info.st_size > limit:
            raise TooLarge(f"is {info.st_size:,} bytes; the limit is {limit:,}")
        data = f.read(limit + 1)
    # grew while being read
    if len(data) > limit:
        raise TooLarge(f"is over {limit:,} bytes, the limit")
    return data


def _lines(text: str) -> list[int]:
    """The line each eval object starts on (JSON is YAML, which keeps positions); [] when it cannot tell."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        evals = next(v for k, v in root.value if k.value == "evals")
        return [node.start_mark.line + 1 for node in evals.value]
    # JSON YAML reads otherwise (tabs): no lines
    except (yaml.YAMLError, StopIteration, AttributeError, TypeError, RecursionError):
        return []
