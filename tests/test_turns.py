"""An episode with tools over real HTTP: the policy (tests/openai_server.py, scripted) asks for tool calls, they are
run and answered, and it is asked again until a final answer or --max-turns (skill_rl/training/turns.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from openai import AsyncOpenAI
from openai_server import FakeOpenAI

from skill_rl import keys
from skill_rl.training import turns
from skill_rl.training.trajectories import output_of

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "The text of a file in the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {"name": "list_files", "description": "The workspace's files.", "parameters": {"type": "object"}},
    },
]
KEY = "sk-proj-" + "Q7" * 16


class Workspace:
    """run_call over a real folder: the two tools above, and every call it was asked to run."""

    def __init__(self, root: Path):
        self.root, self.ran = root, []

    def run_call(self, name: str, arguments: str) -> turns.Call:
        self.ran.append((name, arguments))
        if name == "list_files":
            return turns.Call(name, arguments, "\n".join(sorted(p.name for p in self.root.iterdir())))
        path = self.root / json.loads(arguments)["path"]
        if not path.is_file():
            return turns.Call(name, arguments, error=f"no file {path.name}")
        return turns.Call(name, arguments, path.read_text())


def call(name: str, arguments) -> dict:
    return {"name": name, "arguments": arguments}


def episode(server: FakeOpenAI, workspace: Workspace, max_turns: int = 6) -> turns.Turns:
    async def run():
        async with AsyncOpenAI(base_url=server.url, api_key="none", max_retries=0) as client:
            ask = turns.asker(client, "policy", temperature=1.0, max_tokens=64, timeout=30)
            messages = [{"role": "system", "content": "You commit."}, {"role": "user", "content": "commit it"}]
            return await turns.take_turns(ask, messages, TOOLS, workspace.run_call, max_turns)

    return asyncio.run(run())


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "NOTES.md").write_text("the limit is now 2\n")
    (tmp_path / "app.py").write_text("LIMIT = 2\n")
    return Workspace(tmp_path)


def test_an_episode_runs_each_call_answers_it_and_asks_again_until_a_final_answer(workspace):
    with FakeOpenAI() as server:
        server.policy_answers.extend(
            [
                {"content": "Let me look.", "tool_calls": [call("list_files", {})]},
                {"tool_calls": [call("read_file", {"path": "NOTES.md"})]},
                "fix: raise the limit to 2",
            ]
        )
        history = episode(server, workspace)
    assert (history.turns, history.ran_out) == (3, False)
    assert [(c.name, c.result, c.error) for c in history.calls] == [
        ("list_files", "NOTES.md\napp.py", None),
        ("read_file", "the limit is now 2\n", None),
    ]
    first, tool1, second, tool2, final = history.messages_and_choices[2:]
    # the policy's Choices kept whole, with their logprobs, for ART to train
    assert [c.finish_reason for c in (first, second, final)] == ["tool_calls", "tool_calls", "stop"]
    assert all(c.logprobs is not None and c.logprobs.content for c in (first, second, final))
    assert tool1 == {"role": "tool", "tool_call_id": first.message.tool_calls[0].id, "content": "NOTES.md\napp.py"}
    assert tool2["tool_call_id"] == second.message.tool_calls[0].id != tool1["tool_call_id"]
    assert final.message.content == "fix: raise the limit to 2"
    # what the server received: the tools every time, and each answer and its tool message in the next request
    assert len(server.requests) == 3 and all(r["tools"] == TOOLS for r in server.requests)
    last = server.requests[2]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert last[2]["tool_calls"][0]["function"] == {"name": "list_files", "arguments": "{}"}
    assert last[2]["content"] == "Let me look."
    assert last[5] == {"role": "tool", "tool_call_id": tool2["tool_call_id"], "content": "the limit is now 2\n"}


def test_max_turns_ends_an_episode_that_keeps_calling_and_says_it_ran_out(workspace):
    looking = {"content": "still looking", "tool_calls": [call("list_files", {})]}
    with FakeOpenAI(policy_fn=lambda request: looking) as server:
        history = episode(server, workspace, max_turns=2)
        asked = len(server.requests)
    assert (history.turns, history.ran_out, asked) == (2, True, 2)
    # the last answer's call was run: the policy acted, and the episode's record says so
    assert len(history.calls) == len(workspace.ran) == 2
    assert history.last is history.messages_and_choices[-2]
    # the episode's output is the policy's last answer, never the tool result after it
    assert output_of(SimpleNamespace(messages_and_choices=history.messages_and_choices)) == "still looking"


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (call("read_file", '{"path": "NOTES.md"'), "the arguments of read_file are not JSON"),
        (call("read_file", '["NOTES.md"]'), "the arguments of read_file must be a JSON object, got list"),
        (call("rm_rf", "{}"), "no tool named 'rm_rf'; the tools are: list_files, read_file"),
    ],
)
def test_a_malformed_call_is_answered_with_an_error_and_the_episode_goes_on(workspace, bad, error):
    with FakeOpenAI() as server:
        server.policy_answers.extend([{"tool_calls": [bad, call("list_files", {})]}, "fix: done"])
        history = episode(server, workspace)
        sent = server.requests[1]["messages"]
    # the malformed call was never run; the good one beside it was
    assert workspace.ran == [("list_files", "{}")]
    assert history.calls[0].error.startswith(error) and history.calls[1].error is None
    assert sent[3]["content"].startswith(f"error: {error}") and sent[3]["role"] == "tool"
    assert (history.turns, history.ran_out, history.last.message.content) == (2, False, "fix: done")


def read_back(workspace: Workspace, file: str, text: str, secret: str) -> turns.Call:
    """An episode that reads `file` (holding `text`) and answers; asserts `secret` reached neither the server, the
    trajectory nor the record, and returns the call's record."""
    (workspace.root / file).write_text(text)
    with FakeOpenAI() as server:
        server.policy_answers.extend([{"tool_calls": [call("read_file", {"path": file})]}, "chore: done"])
        history = episode(server, workspace)
        sent = json.dumps(server.requests)
    assert secret not in sent and secret not in repr(history.messages_and_choices) and secret not in repr(history.calls)
    return history.calls[0]


def test_a_key_in_a_tool_result_never_reaches_the_policy_the_trajectory_or_the_record(workspace, monkeypatch):
    monkeypatch.setattr(keys, "_known", (KEY,))
    assert read_back(workspace, ".env", f"OPENAI_API_KEY={KEY}\n", KEY).result == "OPENAI_API_KEY=***\n"


def test_a_tool_result_holding_an_unknown_secret_is_withheld_and_answered_as_an_error(workspace):
    aws = "AKIA" + "Z3" * 8
    record = read_back(workspace, "deploy.sh", f"export AWS_ACCESS_KEY_ID={aws}\n", aws)
    assert (record.error, record.result) == ("the result was withheld: it holds a key format", "")


@pytest.mark.parametrize(
    "answer",
    [{"tool_calls": [call("read_file", {"path": KEY})]}, {"content": f"my key: {KEY}", "tool_calls": []}],
    ids=["in-arguments", "in-text"],
)
def test_a_policy_answer_quoting_a_key_drops_the_rollout(workspace, monkeypatch, answer):
    monkeypatch.setattr(keys, "_known", (KEY,))
    with FakeOpenAI() as server:
        server.policy_answers.append(answer)
        with pytest.raises(keys.EchoedKey):
            episode(server, workspace)
    assert workspace.ran == []


def test_calls_past_the_cap_in_one_answer_are_answered_with_an_error_and_not_run(workspace):
    many = [call("list_files", {}) for _ in range(turns.MAX_CALLS + 2)]
    with FakeOpenAI() as server:
        server.policy_answers.extend([{"tool_calls": many}, "done"])
        history = episode(server, workspace)
    assert len(workspace.ran) == turns.MAX_CALLS
    assert [c.error is not None for c in history.calls] == [False] * turns.MAX_CALLS + [True, True]
