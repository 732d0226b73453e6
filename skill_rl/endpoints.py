"""Model endpoints: an OpenAI-compatible model to ask (`--model`, `--teacher`), and asking it.

Training's rollouts, `--eval` and the warm start's teacher all ask a model through these, with the same
bounds: each request whole within its timeout, retries included, and keys never kept in an output.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field, replace

from skill_rl import prompts
from skill_rl.keys import MASK, URL_USERINFO, redact
from skill_rl.skills import Skill, Task

SPEC = re.compile(r"^(?:(?P<label>[^=@]+)=)?(?P<id>.+?)(?:@(?P<url>https?://\S+))?$")


@dataclass(frozen=True)
class Endpoint:
    label: str
    model: str
    base_url: str | None
    api_key: str = field(repr=False, default="none")
    # False: the --baseline arm, prompted without SKILL.md
    with_skill: bool = True
    # what stands in for SKILL.md in that arm (--without-skill; prompts.WITHOUT)
    without: str = "description"


def with_baselines(endpoints: list[Endpoint], without: str = "description") -> list[Endpoint]:
    """Each endpoint followed by its no-skill arm."""
    return [
        arm
        for ep in endpoints
        for arm in (ep, replace(ep, label=f"{ep.label} (no skill)", with_skill=False, without=without))
    ]


def parse_spec(spec: str, base_url: str | None, api_key: str | None) -> Endpoint:
    m = SPEC.match(spec.strip())
    if not m or not m["id"]:
        raise ValueError(f"--model {spec!r}: expected ID or label=ID@URL")
    return Endpoint(m["label"] or m["id"], m["id"], m["url"] or base_url, api_key or "none")


async def whole(request, seconds: float):
    """The answer to `request` (a completion call, retries included) within `seconds` in all, or TimeoutError."""
    try:
        return await asyncio.wait_for(request, seconds)
    except TimeoutError:
        raise TimeoutError(f"no whole answer within {seconds:g} s (--request-timeout)") from None


def client(ep: Endpoint, timeout: float):
    """An OpenAI client for one endpoint; it retries 429, 5xx, timeouts and dropped connections twice, and
    `generate` bounds each request, retries included, by `timeout` in all."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key, max_retries=2, timeout=timeout)


async def generate(
    client,
    ep: Endpoint,
    skill: Skill,
    task: Task,
    samples: int,
    temperature: float,
    max_tokens: int,
    gate: asyncio.Semaphore,
    prompt_tokens: list | None = None,
) -> list[tuple[str, str | None]]:
    """`samples` (output, finish_reason) pairs from one endpoint for one task, SKILL.md as the system message
    (what --without-skill names for a --baseline arm). `prompt_tokens`, if given, gets the prompt's tokens as the
    server counted them (usage), else as estimated (a negative number: prompts.estimated_tokens, negated)."""
    messages = prompts.messages(skill, task, ep.with_skill, ep.without)
    # the client's own timeout is per read: a server trickling bytes never trips it
    total = float(client.timeout)
    async with gate:
        completion = await whole(
            client.chat.completions.create(
                model=ep.model,
                n=samples if samples > 1 else None,
                temperature=temperature,
                max_tokens=max_tokens,
                messages=messages,
            ),
            total,
        )
    # servers echo keys
    outs = [(redact(c.message.content or ""), c.finish_reason) for c in completion.choices]
    if prompt_tokens is not None:
        tokens, estimated = prompts.prompt_tokens(completion, messages)
        prompt_tokens.append(-tokens if estimated else tokens)
    # servers that ignore `n`
    while len(outs) < samples:
        async with gate:
            more = await whole(
                client.chat.completions.create(
                    model=ep.model, temperature=temperature, max_tokens=max_tokens, messages=messages
                ),
                total,
            )
        outs.append((redact(more.choices[0].message.content or ""), more.choices[0].finish_reason))
    return outs[:samples]


def spec_of(ep: Endpoint) -> str:
    """What a record says its model was: the id and the endpoint (never the key, nor the URL's password: the same
    spec as records are written, masked, so that --resume finds its own)."""
    # a --baseline record of before stays its own
    without = "" if ep.without == "description" else f" ({ep.without})"
    where = URL_USERINFO.sub(lambda m: m[1] + MASK, ep.base_url or "default")
    return f"{ep.model}@{where}" + ("" if ep.with_skill else f" without the skill{without}")
