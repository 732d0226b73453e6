"""The turns of an episode with tools: the policy is asked with the tools, its tool calls are run and answered, and it
is asked again, until it answers without a tool call or `--max-turns` calls have been made.

Nothing here imports ART (the fast tier drives an episode over real HTTP with a plain OpenAI client); rollout.py
wraps the result in an `art.Trajectory`. The policy is untrusted: a call it names that is not among the tools, or
whose arguments are not a JSON object, is not run; it is answered with an error tool message and the episode goes
on. What a tool returns is untrusted too: every known key in it is masked (keys.redact) before the policy, the
trajectory or the episode's record sees it, and a result that holds what looks like any other secret
(keys.secret_in: a key format, a secret-named assignment, a random-looking token) is withheld, answered as an
error. A policy answer that quotes a key, in its text or in a call's arguments, drops the rollout (EchoedKey), as a
single-turn answer does.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

from skill_rl.endpoints import whole
from skill_rl.keys import EchoedKey, redact, secret_in
from skill_rl.tools.toolbox import answer


class CallRecordLike(Protocol):
    """What running one tool call gives back (the tools package's CallRecord is one)."""

    name: str
    arguments: str
    result: str
    error: str | None


@dataclass(frozen=True)
class Call:
    """One tool call of an episode as scoring sees it: what the policy asked, and what it got back (keys masked)."""

    name: str
    arguments: str
    result: str = ""
    error: str | None = None
    seconds: float = 0.0


@dataclass
class Turns:
    """An episode's history: the request messages and, in their place, the policy's Choices (kept whole, so that
    ART trains their tokens and logprobs), the calls in order, the policy calls made, and whether the last one
    still asked for tools when --max-turns was reached."""

    messages_and_choices: list[Any]
    calls: list[Call] = field(default_factory=list)
    turns: int = 0
    ran_out: bool = False

    @property
    def last(self):
        """The policy's last Choice."""
        return next(m for m in reversed(self.messages_and_choices) if not isinstance(m, dict))


# the calls of one answer that are run; the rest are answered with an error (each costs a tool's time limit)
MAX_CALLS = 16
# ask(messages, tools) -> a chat completion (its first choice is used)
Ask = Callable[[list[dict], list[dict]], Awaitable[Any]]
RunCall = Callable[[str, str], CallRecordLike]


def asker(client, model: str, *, temperature: float, max_tokens: int, timeout: float) -> Ask:
    """`ask` for an OpenAI client (ART's, or any): one completion with the tools, with logprobs (ART trains only
    those), whole within `timeout` (the client's own timeout is per read)."""

    async def ask(messages: list[dict], tools: list[dict]):
        request = client.chat.completions.create(
            model=model,
            messages=messages,
            # an empty list is refused by some servers: none is sent without tools
            **({"tools": tools} if tools else {}),
            temperature=temperature,
            max_tokens=max_tokens,
            logprobs=True,
            timeout=timeout,
        )
        return await whole(request, timeout)

    return ask


def tool_names(tools: list[dict]) -> set[str]:
    """The function names OpenAI tool schemas declare."""
    return {t["function"]["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)}


def assistant_message(message) -> dict:
    """A policy's message as the next request repeats it: its text and its tool calls."""
    out: dict = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": name, "arguments": arguments}}
            for i, name, arguments in calls_of(message)
        ]
    return out


def calls_of(message) -> list[tuple[str, str, str]]:
    """(id, name, arguments) of each tool call in a policy's message; a call of another kind than a function (a
    custom tool) has an empty name, and so is answered as a tool not offered."""
    out = []
    for call in message.tool_calls or ():
        function = getattr(call, "function", None)
        out.append((call.id, getattr(function, "name", "") or "", getattr(function, "arguments", "") or ""))
    return out


def refuse_echoed_keys(message) -> None:
    """EchoedKey when the policy's answer quotes a known key, in its text or in a tool call's name or arguments."""
    said = [message.content or ""] + [f"{name}\n{arguments}" for _, name, arguments in calls_of(message)]
    if any(redact(text) != text for text in said):
        raise EchoedKey(
            "the policy server's answer quotes an API key; this rollout is dropped (an endpoint echoing requests?)"
        )


def malformed(name: str, arguments: str, names: set[str]) -> str | None:
    """Why a call cannot be run (a tool not offered, arguments that are not a JSON object), or None."""
    if name not in names:
        offered = ", ".join(sorted(names)) or "none"
        return f"no tool named {name[:80]!r}; the tools are: {offered}"
    try:
        parsed = json.loads(arguments or "{}")
    except (ValueError, RecursionError) as e:
        return f"the arguments of {name} are not JSON ({str(e)[:120]})"
    if not isinstance(parsed, dict):
        return f"the arguments of {name} must be a JSON object, got {type(parsed).__name__}"
    return None


async def run_one(name: str, arguments: str, names: set[str], run_call: RunCall, nth: int) -> Call:
    """One tool call of the policy's, the answer's `nth`, run (in a thread: tools are synchronous) unless it is
    malformed or past MAX_CALLS; keys masked."""
    problem = malformed(name, arguments, names)
    if nth >= MAX_CALLS:
        problem = f"more than {MAX_CALLS} tool calls in one answer; this one was not run"
    if problem:
        return Call(name=name, arguments=arguments, error=problem)
    record = await asyncio.to_thread(run_call, name, arguments)
    result, error = redact(record.result or ""), redact(record.error) if record.error else None
    seconds = float(getattr(record, "seconds", 0.0) or 0.0)
    found = secret_in(result) or (secret_in(error) if error else None)
    if found:
        return Call(name, arguments, error=f"the result was withheld: it holds {found}", seconds=seconds)
    return Call(name, arguments, result, error, seconds)


def tool_message(call_id: str, call: Call) -> dict:
    """The answer to one call, as the policy reads it next."""
    return {"role": "tool", "tool_call_id": call_id, "content": answer(call.result, call.error)}


async def take_turns(ask: Ask, messages: list[dict], tools: list[dict], run_call: RunCall, max_turns: int) -> Turns:
    """Ask, run the calls, answer them, ask again: until an answer without tool calls or `max_turns` asks. The calls
    of the last answer are run even when it is the last ask (the policy acted; its effects are the episode's), and
    `ran_out` says the episode ended there."""
    history, sent = Turns(list(messages)), list(messages)
    names = tool_names(tools)
    while history.turns < max_turns:
        choice = (await ask(sent, tools)).choices[0]
        history.turns += 1
        refuse_echoed_keys(choice.message)
        history.messages_and_choices.append(choice)
        sent.append(assistant_message(choice.message))
        if not choice.message.tool_calls:
            return history
        for nth, (call_id, name, arguments) in enumerate(calls_of(choice.message)):
            call = await run_one(name, arguments, names, run_call, nth)
            history.calls.append(call)
            answer = tool_message(call_id, call)
            history.messages_and_choices.append(answer)
            sent.append(answer)
    history.ran_out = True
    return history
