"""Scripted episodes: a fixed list of tool calls played for real, through the Toolbox, in a fresh copy of a task's
workspace, as the chat a policy would have had (docs/tools.md, "Scripted episodes").

A skill with tools gives its scripts in checks.py:

    def reference_episode(task) -> list | None    the calls, in order: (tool name, arguments), or a list of
                                                    such calls made together in one message
    def final_answer(task) -> str                  the answer that closes the episode

The warm start fine-tunes on the reference episodes (their tool messages carry the real results), and `--check`
scores them with the skill's checks of an episode; an exploits.py may name scripts of the same form in `EPISODES`
(what a degenerate policy does, each of which must score below the reference).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from skill_rl.tools.toolbox import Episode, Toolbox
from skill_rl.tools.workspace import Workspace

SCRIPT = "reference_episode"
ANSWER = "final_answer"


@dataclass
class Played:
    """One scripted episode: the messages after the system prompt and the task (assistant calls, tool results, the
    final answer), the answer, and the Episode a check reads; `close()` deletes its workspace."""

    messages: list[dict]
    output: str
    episode: Episode
    workspace: Workspace

    def close(self) -> None:
        self.workspace.close()


def has_script(skill) -> bool:
    """Whether the skill has tools and its checks.py scripts a reference episode."""
    return bool(skill.tools) and callable(getattr(skill.checks, SCRIPT, None))


def play(skill, task, calls: list, answer: str) -> Played:
    """Run `calls` in a fresh copy of the task's workspace, one assistant message per entry (a call, or a list of calls
    made together), each call answered by a tool message as a policy's would be (its real result, or `error: ...`), in order; then
    `answer` as the last assistant message."""
    workspace = Workspace.fresh(skill.workspace_of(task))
    try:
        box, messages = Toolbox(skill.tools, workspace), []
        for i, entry in enumerate(calls):
            together = entry if isinstance(entry, list) else [entry]
            asked, answered = [], []
            for j, (name, arguments) in enumerate(together):
                text = json.dumps(arguments, ensure_ascii=False)
                record = box.run(name, text)
                call_id = f"call_{i}_{j}" if isinstance(entry, list) else f"call_{i}"
                asked.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": text}})
                answered.append({"role": "tool", "tool_call_id": call_id, "content": record.answer})
            messages += [{"role": "assistant", "content": "", "tool_calls": asked}, *answered]
        messages.append({"role": "assistant", "content": answer})
        return Played(messages, answer, box.episode(), workspace)
    except BaseException:
        workspace.close()
        raise


def reference(skill, task) -> Played | None:
    """The task's reference episode as the skill scripts it (None: the skill scripts none for this task)."""
    if not has_script(skill):
        return None
    calls = getattr(skill.checks, SCRIPT)(task)
    if not calls:
        return None
    return play(skill, task, calls, getattr(skill.checks, ANSWER, lambda t: t.reference or "done")(task))
