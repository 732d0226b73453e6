"""The toolbox of one episode: the skill's tools bound to a workspace, each call run in the sandbox
(sandbox.py, child.py) and kept as a CallRecord; and the Episode a check of an episode receives.

`Toolbox.run` never raises for what the policy sends or what a tool does: an unknown tool, arguments that are not
JSON or not as the schema says, a path or a command it may not use, a tool that raises, hangs or prints without end,
each is a CallRecord with `error` set (one line) and a short `result` saying so, and the episode goes on.
What a tool returns is untrusted data: `result` is text for the policy (and the judge) to read, never instructions.
"""

from __future__ import annotations

import functools
import json
import shlex
import sys
import time
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from skill_rl.tools.allowed import allowed, allowed_text
from skill_rl.tools.declare import Tool
from skill_rl.tools.sandbox import Outcome, git_argv, namespaces_refused, run_child
from skill_rl.tools.workspace import Outside, Workspace, inside


def answer(result: str, error: str | None) -> str:
    """What a call is answered with: its result, or `error: <why>` when it failed. The policy's turns, the warm
    start's scripted episodes and the judge's copy of an episode all answer a call with this."""
    return f"error: {error}" if error else result


class CallRecord(BaseModel):
    """One tool call of an episode, in the order made."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    name: str
    # the raw JSON text the policy sent
    arguments: str
    # what the policy is answered (untrusted text)
    result: str
    # None, or one line saying why the call failed
    error: str | None = None
    seconds: float = 0.0

    @property
    def answer(self) -> str:
        """What the policy read back for this call (`answer`)."""
        return answer(self.result, self.error)

    @cached_property
    def args(self) -> dict:
        """The arguments parsed (empty when they are not a JSON object)."""
        try:
            value = json.loads(self.arguments or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


class Episode(BaseModel):
    """What a check of an episode receives: the calls in order, and the workspace as the episode left it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, arbitrary_types_allowed=True)
    calls: list[CallRecord] = []
    workspace: Path


class Refused(Exception):
    """A call refused before it runs; its message is the record's error."""


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "arguments"
    text = f"argument '{where}': {first['msg']}"
    if first["type"] != "missing":
        text += f", got {json.dumps(first.get('input'), default=str)[:60]}"
    return text


def _path_words(workspace: Path, words: list[str]) -> None:
    """Refuse a command word, or the value of its `--opt=value`, that names a path outside the workspace: absolute,
    climbing out with '..', or through a symlink (a word that names no path, `-n` or `HEAD~2`, stays inside)."""
    for word in words:
        for candidate in (word, word.partition("=")[2]):
            try:
                if candidate:
                    inside(workspace, candidate)
            except Outside as e:
                raise Refused(str(e)) from None


@functools.cache
def _warn_once(refused: str) -> None:
    print(
        f"skill-rl: this machine refuses user namespaces ({refused}): tool calls run without network or "
        "filesystem isolation, with a scrubbed environment and resource limits only (docs/tools.md)",
        file=sys.stderr,
    )


class Toolbox:
    """`tools` bound to `workspace` (a Workspace or its path); `run` makes a call, `calls` keeps them in order."""

    def __init__(self, tools: list[Tool], workspace: Workspace | Path, *, time_limit=10.0, output_cap=16_000):
        self.tools = {t.name: t for t in tools}
        self.workspace = Path(workspace.path if isinstance(workspace, Workspace) else workspace).resolve()
        self.time_limit, self.output_cap = float(time_limit), int(output_cap)
        self.calls: list[CallRecord] = []
        self.isolated = namespaces_refused() is None
        if not self.isolated:
            _warn_once(namespaces_refused())

    def episode(self) -> Episode:
        return Episode(calls=list(self.calls), workspace=self.workspace)

    def run(self, name: str, arguments: str) -> CallRecord:
        """Make one call; its record is returned and kept in `calls`."""
        start = time.perf_counter()
        try:
            result, error = self._call(name, arguments)
        except Refused as e:
            result, error = f"error: {e}", str(e)
        except Exception as e:
            # the sandbox itself failed (no process could start): said, not raised
            error = f"the call could not run: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
            result = f"error: {error}"
        record = CallRecord(
            name=str(name),
            arguments=str(arguments),
            result=result,
            error=error,
            seconds=round(time.perf_counter() - start, 4),
        )
        self.calls.append(record)
        return record

    def _call(self, name: str, arguments: str) -> tuple[str, str | None]:
        tool = self.tools.get(name)
        if tool is None:
            raise Refused(f"unknown tool {str(name)[:60]!r} (tools: {', '.join(self.tools) or 'none'})")
        try:
            raw = json.loads(arguments or "{}")
        except (ValueError, TypeError) as e:
            raise Refused(f"arguments are not JSON: {str(e)[:100]}") from None
        try:
            values = tool.model.model_validate(raw).model_dump(mode="json")
        except ValidationError as e:
            raise Refused(_one_line(e)) from None
        if tool.kind == "bash":
            return self._bash(tool, values["command"])
        if tool.kind == "read":
            try:
                inside(self.workspace, values["path"])
            except Outside as e:
                raise Refused(str(e)) from None
            spec = {"kind": "read", "path": values["path"], "cap": self.output_cap}
        else:
            spec = {"kind": "python", "source": str(tool.source), "function": tool.function, "arguments": values}
        # room for JSON's escapes (at most six characters a byte) around a result of the cap
        return self._answered(self._run(spec, self.output_cap * 6 + 1000))

    def _bash(self, tool: Tool, command: str) -> tuple[str, str | None]:
        try:
            argv = shlex.split(command)
        except ValueError as e:
            raise Refused(f"command does not split into words: {e}") from None
        if not allowed(tool.prefixes, argv):
            raise Refused(f"command not allowed: {shlex.join(argv)[:100]} (allowed: {allowed_text(tool.prefixes)})")
        _path_words(self.workspace, argv[1:])
        outcome = self._run({"kind": "bash", "argv": git_argv(argv)})
        text, error = self._stopped(outcome)
        if error is None and outcome.status:
            text += f"\n[exit status {outcome.status}]"
        return text, error

    def _run(self, spec: dict, cap: int | None = None) -> Outcome:
        cap = self.output_cap if cap is None else cap
        return run_child(spec, self.workspace, time_limit=self.time_limit, cap=cap, isolate=self.isolated)

    def _stopped(self, outcome: Outcome, whole: bool = False) -> tuple[str, str | None]:
        """The output as text (`whole`: all of it, for a JSON answer), and the error when the call was stopped."""
        text = (outcome.output if whole else outcome.output[: self.output_cap]).decode("utf-8", errors="replace")
        if outcome.over_cap:
            error = f"output passed {self.output_cap:,} bytes: the call was stopped"
            return f"{text}\n[{error}]", error
        if outcome.timed_out:
            error = f"ran past the {self.time_limit:g} s time limit: the call was stopped"
            return f"{text}\n[{error}]" if text else f"[{error}]", error
        return text, None

    def _answered(self, outcome: Outcome) -> tuple[str, str | None]:
        """A read or python call's JSON answer as (result, error)."""
        text, error = self._stopped(outcome, whole=True)
        if error:
            return f"error: {error}", error
        try:
            answer = json.loads(text)
            result, error = answer.get("result"), answer.get("error")
        except (ValueError, AttributeError):
            result, error = None, f"the tool ended without an answer (exit status {outcome.status})"
        if error or not isinstance(result, str):
            error = str(error or "the tool gave no text")[:300]
            return f"error: {error}", error
        if len(result) > self.output_cap:
            return f"{result[: self.output_cap]}\n[cut at {self.output_cap:,} characters]", None
        return result, None
