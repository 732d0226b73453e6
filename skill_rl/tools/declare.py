"""`@tool` and the Tool record: a function of a skill's tools.py described for the policy (name, docstring, JSON
schema of its typed parameters), and the pydantic model that checks the policy's arguments against that schema.

This module imports nothing heavy at import time: a tool's child process (child.py) imports the user's tools.py,
which imports `tool` from here, and pays for pydantic only when a parent describes the tools.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

# what the OpenAI chat-completions API accepts as a function's name
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# the parameter types a tool may take: each has a JSON schema and comes back from JSON as itself
SCALARS = (str, int, float, bool)
SUPPORTED = "str, int, float, bool, Literal[...], list[str] (or of another scalar), X | None"


class ToolProblem(Exception):
    """A tool that cannot be described; `problems` holds one line per problem (file:line: ...)."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def tool(fn: Callable) -> Callable:
    """Mark a function of a skill's tools.py as a tool the policy may call:

        @tool
        def word_count(workspace: Path, path: str) -> str:
            "How many words a file of the workspace holds."
            return str(len(inside(workspace, path).read_text().split()))

    The first parameter is the workspace (a pathlib.Path, the episode's private copy); the others are typed (see
    SUPPORTED) and their JSON schema is what the policy sees; the docstring is the description; it returns text.
    """
    fn.skill_rl_tool = True
    return fn


def is_tool(value: Any) -> bool:
    return inspect.isfunction(value) and getattr(value, "skill_rl_tool", False) is True


@dataclass(frozen=True)
class Tool:
    """A tool as the policy sees it (`schema()`), and how it runs: `kind` 'python' (a function of tools.py),
    'bash' (allowed-tools' `Bash(<prefix>:*)` commands, `prefixes`) or 'read' (allowed-tools' `Read`)."""

    name: str
    description: str
    # the JSON schema of the arguments
    parameters: dict
    kind: Literal["python", "bash", "read"] = "python"
    # python: the tools.py and the function's name in it
    source: Path | None = None
    function: str | None = None
    # python: the line of tools.py that defines it
    line: int | None = None
    # bash: the argv prefixes allowed, e.g. (("git", "status"), ("git", "diff"))
    prefixes: tuple[tuple[str, ...], ...] = ()
    # the pydantic model that validates the arguments
    model: Any = field(default=None, repr=False, compare=False)

    def schema(self) -> dict:
        """The OpenAI chat-completions tool entry."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def _supported(annotation: Any) -> bool:
    """Whether a parameter's type is one a tool may take (SUPPORTED)."""
    if annotation in SCALARS:
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return bool(args) and all(type(a) in SCALARS for a in args)
    if origin is list:
        return len(args) == 1 and args[0] in SCALARS
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return len(rest) == 1 and len(args) == 2 and _supported(rest[0])
    return False


def _hints(fn: Callable) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:
        # a hint naming what tools.py never defined: reported as unsupported below
        return {}


def _signature_problem(fn: Callable) -> str | None:
    """Why `fn` cannot be a tool, judged from its signature and docstring; None when it can."""
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return "is async; a tool is a plain function returning text"
    if not NAME_RE.match(fn.__name__):
        return "has a name the OpenAI API refuses (letters, digits, '_' and '-', at most 64)"
    if not (fn.__doc__ or "").strip():
        return "has no docstring; the docstring is the tool's description for the policy"
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].name != "workspace":
        return "must take `workspace: Path` as its first parameter"
    hints = _hints(fn)
    for p in params[1:]:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            return f"parameter '{p.name}' is *args or **kwargs; a tool's parameters are named"
        if p.name not in hints:
            return f"parameter '{p.name}' has no type hint (supported: {SUPPORTED})"
        if not _supported(hints[p.name]):
            return (
                f"parameter '{p.name}' has a type with no JSON schema here: {hints[p.name]!r} (supported: {SUPPORTED})"
            )
    return None


def arguments_model(fn: Callable):
    """The pydantic model of `fn`'s parameters after `workspace`: strict, no extra keys."""
    from pydantic import ConfigDict, create_model

    hints = _hints(fn)
    fields = {
        p.name: (hints[p.name], ... if p.default is p.empty else p.default)
        for p in list(inspect.signature(fn).parameters.values())[1:]
    }
    config = ConfigDict(extra="forbid", strict=True)
    return create_model(f"{fn.__name__}_arguments", __config__=config, **fields)


def parameters_schema(model) -> dict:
    """The model's JSON schema without pydantic's titles (the policy sees names and descriptions)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def describe(path: Path, fn: Callable) -> Tool:
    """The Tool for a function of `path` (a tools.py) marked with @tool; ToolProblem naming the line if it cannot
    be described."""
    from skill_rl.text import problem

    line = fn.__code__.co_firstlineno
    why = _signature_problem(fn)
    if why is None:
        try:
            model = arguments_model(fn)
            schema = parameters_schema(model)
        except Exception as e:
            why = f"has parameters pydantic cannot describe: {type(e).__name__}"
    if why is not None:
        raise ToolProblem([problem(path, line, f"tool '{fn.__name__}' {why}")])
    doc = inspect.cleandoc(fn.__doc__)
    return Tool(fn.__name__, doc, schema, "python", source=path, function=fn.__name__, line=line, model=model)
