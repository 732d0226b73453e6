"""Scripted episodes: a fixed list of tool calls played for real, through the Toolbox, in a fresh copy of a task's
workspace, as the chat a policy would have had (docs/tools.md, "Scripted episodes").

A skill with tools gives its scripts in checks.py:

    def reference_episode(task) -> list[tuple[str, dict]] | None    the calls, in order: (tool name, arguments)
    def final_answer(task) -> str                                    the answer that closes the episode

The warm start fine-tunes on the reference episodes (their tool messages carry the real results), and `--check`
scores them with the skill's checks of an episode; an exploits.py may name scripts of the same form in `EPISODES`
(what a degenerate policy does, each of which must score below the reference).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

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
    workspace: Workspace = field(repr=False)

    def close(self) -> None:
        self.workspace.close()


def has_script(skill) -> bool:
    """Whether the skill has tools and its checks.py scripts a reference episode."""
    return bool(skill.tools) and callable(getattr(skill.checks, SCRIPT, None))


def play(skill, task, calls: list[tuple[str, dict]], answer: str) -> Played:
    """Run `calls` in a fresh copy of the task's workspace, one assistant message per call, each answered by a tool
    message with the call's real result (or `error: ...`), then `answer` as the last assistant message."""
    workspace = Workspace.fresh(skill.workspace_of(task))
    try:
        box, messages = Toolbox(skill.tools, workspace), []
        for i, (name, arguments) in enumerate(calls):
            text = json.dumps(arguments, ensure_ascii=False)
            record = box.run(name, text)
            call_id = f"call_{i}"
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": record.result})
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


@dataclass
class Measured:
    """What `measure` found: per task, the reference episode's reward and the checks it fails (a result of False,
    or below 1; None, a check that does not apply, passes); per exploit script, on how many tasks it scored below."""

    tasks: int = 0
    rewards: list[float] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=dict)
    # exploit name -> (tasks where it scored below the reference, tasks tried)
    exploits: dict[str, list[int]] = field(default_factory=dict)


def _scored(skill, task, played: Played):
    from skill_rl.scoring.checks import run_checks
    from skill_rl.scoring.rubric import score_offline, skill_checks

    results = run_checks(skill_checks(skill), played.output, task, played.episode)
    return score_offline(skill, task, [played.output], [played.episode])[0].reward, results


def measure(skill, tasks: list) -> Measured:
    """Play the reference episode of each task and every script of exploits.py's EPISODES, scored by the checks."""
    found = Measured()
    scripts = getattr(skill.exploits, "EPISODES", None) or {}
    for task in tasks:
        played = reference(skill, task)
        if played is None:
            continue
        try:
            best, results = _scored(skill, task, played)
        finally:
            played.close()
        found.tasks += 1
        found.rewards.append(best)
        for name, value in results.items():
            if value is False or (value is not None and value is not True and value < 1):
                found.failed[name] = found.failed.get(name, 0) + 1
        for name, script in scripts.items():
            calls, answer = script(task)
            bad = play(skill, task, calls, answer)
            try:
                reward, _ = _scored(skill, task, bad)
            finally:
                bad.close()
            tally = found.exploits.setdefault(name, [0, 0])
            tally[0] += reward < best
            tally[1] += 1
    return found
