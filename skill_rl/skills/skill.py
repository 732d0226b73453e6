"""A skill and its tasks as loaded (Skill, Task, Section), and SkillError: every problem found with them, each one
line naming the file, the line and the field (said with skill_rl/text.py's `problem`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from skill_rl.files import MAX_LINE_BYTES

if TYPE_CHECKING:
    from skill_rl.tools import Tool

DIMENSIONS = ("format", "procedure", "correctness")


DEFAULT_WEIGHTS = {"format": 0.3, "procedure": 0.4, "correctness": 0.3}


NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


# one task's input (a tasks.jsonl line, or evals.json's prompt with its files)
MAX_LINE_CHARS = MAX_LINE_BYTES


class SkillError(Exception):
    """A skill or its tasks failed validation; `problems` holds one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class Task(BaseModel):
    """One line of tasks.jsonl. `expect` is validated by the skill's own `Expect` model."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    id: str = Field(min_length=1, pattern=r"\S")
    input: str = Field(min_length=1, pattern=r"\S")
    split: Literal["train", "val"] = "train"
    expect: Any = None
    reference: str | None = None
    # statements the judge grades correctness against (evals.json's expectations)
    criteria: list[str] | None = None
    # a folder beside tasks.jsonl that every rollout of the task acts in, as a fresh copy (docs/tools.md)
    workspace: str | None = None
    # where it came from, for messages
    line: int = Field(0, exclude=True)


def _refuse(self, *args, **kwargs):
    raise TypeError("a task is read-only: checks may not change it")


class ReadOnlyList(list):
    """A list from a task's `expect`: reads like a list, refuses every change."""

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    # a copy is an ordinary list
    def __reduce_ex__(self, protocol):
        return list, (list(self),)


class ReadOnlyDict(dict):
    """A dict from a task's `expect`: reads like a dict, refuses every change."""

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __reduce_ex__(self, protocol):
        return dict, (dict(self),)


# a skill's pydantic model -> its frozen subclass
_FROZEN: dict[type, type] = {}


def read_only(value: Any) -> Any:
    """`value` (a validated `expect`) made deeply read-only, so that no check can change what the next check
    or the next output sees: pydantic models frozen, lists and dicts refusing changes, sets frozen."""
    if isinstance(value, BaseModel):
        for name, v in list(vars(value).items()):
            value.__dict__[name] = read_only(v)
        cls = type(value)
        if not cls.model_config.get("frozen"):
            if cls not in _FROZEN:
                _FROZEN[cls] = type(
                    cls.__name__,
                    (cls,),
                    {
                        "model_config": {**cls.model_config, "frozen": True},
                        "__module__": cls.__module__,
                        "__qualname__": cls.__qualname__,
                    },
                )
            object.__setattr__(value, "__class__", _FROZEN[cls])
        return value
    if isinstance(value, list):
        return ReadOnlyList(read_only(v) for v in value)
    if type(value) is tuple:
        return tuple(read_only(v) for v in value)
    if isinstance(value, dict):
        return ReadOnlyDict({k: read_only(v) for k, v in value.items()})
    if isinstance(value, set):
        return frozenset(value)
    return value


@dataclass(frozen=True)
class Section:
    title: str
    # markdown source of the section body, heading excluded
    text: str
    # line of the heading in SKILL.md
    line: int
    # line in SKILL.md where `text` starts
    text_line: int = 0


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    # the skill folder
    path: Path
    # the markdown after the frontmatter: the policy's system prompt
    body: str
    # lower-cased heading -> section
    sections: dict[str, Section]
    # the Procedure's ordered-list items
    steps: tuple[str, ...]
    # the Rules section's list items (may be empty)
    rules: tuple[str, ...]
    weights: dict[str, float]
    # dimensions RULER scores
    judged: tuple[str, ...]
    # the skill's checks.py, if any
    checks: ModuleType | None
    tasks: tuple[Task, ...] = field(default=())
    # derive format checks from SKILL.md's prose (metadata `derive-checks`)
    derive: bool = True
    # the skill's exploits.py, if any: degenerate policies (scoring/exploits.py)
    exploits: ModuleType | None = None
    # where the tasks came from: tasks.jsonl, else evals/evals.json (skills/evals.py)
    tasks_file: Path | None = None
    # SKILL.md's allowed-tools, and the tools it and tools.py give the policy (skill_rl/tools; empty: none)
    allowed_tools: str | None = None
    tools: tuple[Tool, ...] = ()

    def workspace_of(self, task: Task) -> Path | None:
        """The folder a task's rollouts act in (a fresh copy each: skill_rl/tools Workspace.fresh), if it names one."""
        return self.path / task.workspace if task.workspace else None

    @property
    def tasks_path(self) -> Path:
        return self.tasks_file or self.path / "tasks.jsonl"

    def split(self, name: str) -> list[Task]:
        return [t for t in self.tasks if t.split == name]

    def task(self, task_id: str) -> Task | None:
        return next((t for t in self.tasks if t.id == task_id), None)

    def prompt_tokens(self, task: Task) -> int:
        """A deliberately high estimate of the prompt's tokens: 3 characters a token (code and diffs
        tokenize denser than prose), plus a little for the chat template."""
        return (len(self.body) + len(task.input)) // 3 + 16

    def fitting(self, tasks: list[Task], context_tokens: int, max_tokens: int) -> tuple[list[Task], str | None]:
        """The tasks whose prompt leaves room for `max_tokens` in the context, and a note naming the others."""
        keep, skipped = [], []
        for t in tasks:
            (keep if self.prompt_tokens(t) <= context_tokens - max_tokens else skipped).append(t)
        if not skipped:
            return keep, None
        return keep, (
            f"skipping {len(skipped)} task(s) longer than --context-tokens {context_tokens} minus "
            f"--max-tokens {max_tokens} (estimated at 3 characters a token): {', '.join(t.id for t in skipped)}"
        )
