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
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skill_rl.skills.skill import MAX_LINE_CHARS, Task, problem, pydantic_problems, show
from skill_rl.skills.tasks import no_duplicate_keys

EVALS = Path("evals") / "evals.json"


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
        raw = path.read_bytes()
        text = raw.decode("utf-8-sig")
        data = json.loads(text, object_pairs_hook=no_duplicate_keys)
    except OSError as e:
        problems.append(problem(path, None, f"cannot read file: {e.strerror}"))
        return []
    except UnicodeDecodeError as e:
        problems.append(problem(path, None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})"))
        return []
    except ValueError as e:  # JSONDecodeError, or a key given twice
        line = getattr(e, "lineno", None)
        problems.append(problem(path, line, f"invalid JSON: {getattr(e, 'msg', None) or e}"))
        return []
    if not isinstance(data, dict) or not isinstance(data.get("evals"), list) or set(data) - {"skill_name", "evals"}:
        problems.append(problem(path, None, 'expected {"skill_name": ..., "evals": [...]}, with no other field'))
        return []
    if data.get("skill_name") not in (None, skill_name):
        problems.append(problem(path, None, f"field 'skill_name' must be this skill's name {skill_name!r}, "
                                            f"got {show(data['skill_name'])}"))
    lines = _lines(text)
    tasks, seen, n = [], {}, len(data["evals"])
    val_from = n - -(-n // 5) if n >= 2 else n  # the last fifth, rounded up
    for i, obj in enumerate(data["evals"]):
        line = lines[i] if i < len(lines) else None
        task = _task(folder, path, line, i, obj, "val" if i >= val_from else "train", problems)
        if task is None:
            continue
        if task.id in seen:
            problems.append(problem(path, line, f"evals[{i}]: field 'id' {task.id!r} is already used by evals[{seen[task.id]}]"))
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
        problems.extend(p.replace(f"{path.name}:{line}: field '", f"{path.name}:{line}: evals[{i}]: field '", 1)
                        for p in pydantic_problems(path, e, lambda loc: line))
        return None
    parts = [ev.prompt]
    for name in ev.files:
        content = _file(folder, name, path, line, i, problems)
        if content is None:
            return None
        parts.append(f"--- {name} ---\n{content}")
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
        data = target.read_bytes() if target.is_file() else None
    except OSError as e:
        problems.append(problem(path, line, f"{where} cannot be read: {e.strerror}"))
        return None
    if data is None:
        problems.append(problem(path, line, f"{where} is not a file in the skill folder"))
        return None
    if len(data) > MAX_LINE_CHARS:
        problems.append(problem(path, line, f"{where} is {len(data):,} bytes; the limit is {MAX_LINE_CHARS:,}"))
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        problems.append(problem(path, line, f"{where} is not UTF-8 text: the model is given text only (convert it, "
                                            "or leave it out)"))
        return None


def _lines(text: str) -> list[int]:
    """The line each eval object starts on (JSON is YAML, which keeps positions); [] when it cannot tell."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        evals = next(v for k, v in root.value if k.value == "evals")
        return [node.start_mark.line + 1 for node in evals.value]
    except (yaml.YAMLError, StopIteration, AttributeError, TypeError):  # JSON YAML reads otherwise (tabs): no lines
        return []
