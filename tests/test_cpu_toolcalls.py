"""Tool calls on the CPU backend's server (skill_rl/cpu/toolcalls.py): the Hermes format a template without tools gets,
what a request may carry, `<tool_call>` blocks read out of an answer, and the server over real HTTP with the
stand-in model of tests/test_cpu_server.py (an answer repeats the prompt's last characters)."""

from __future__ import annotations

import json

import pytest

# the stand-in model and its server's fixtures
from test_cpu_server import chat, decoder, post, server  # noqa: F401

from skill_rl.cpu import toolcalls

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "git_log",
            "description": "The last commits.",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    }
]


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def calls_of(text: str) -> tuple[str | None, list[tuple[str, dict]]]:
    content, calls = toolcalls.parse_answer(text)
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


PARSED = [
    # (answer, content, calls, reason)
    (block('{"name": "git_log", "arguments": {"n": 3}}'), None, [("git_log", {"n": 3})], "one call, nothing else"),
    (
        "Let me look. " + block('{"name": "git_log", "arguments": {}}') + block('{"name": "git_diff"}') + " then",
        "Let me look.  then",
        [("git_log", {}), ("git_diff", {})],
        "several calls between prose; no arguments is {}",
    ),
    (
        block('{"name": "git_log", "arguments": {"n": 3}') + " ok",
        block('{"name": "git_log", "arguments": {"n": 3}') + " ok",
        [],
        "broken JSON stays text",
    ),
    (
        "I would write <tool_call>git log</tool_call> here",
        "I would write <tool_call>git log</tool_call> here",
        [],
        "prose in the tags is not a call",
    ),
    (block('{"name": "", "arguments": {}}'), block('{"name": "", "arguments": {}}'), [], "an empty name"),
    (block('{"name": "git_log", "arguments": "n=3"}'), block('{"name": "git_log", "arguments": "n=3"}'), [], "args"),
    (block('["git_log"]'), block('["git_log"]'), [], "JSON that is not an object"),
    (
        block("nope") + block('{"name": "git_log"}'),
        block("nope"),
        [("git_log", {})],
        "a malformed block stays, a good one beside it is a call",
    ),
    ("<tool_call>" + '{"name": "git_log"}', "<tool_call>" + '{"name": "git_log"}', [], "an unclosed block"),
]


@pytest.mark.parametrize("answer,content,calls,reason", PARSED, ids=[r[3] for r in PARSED])
def test_an_answers_tool_call_blocks_become_tool_calls_and_the_rest_stays_text(answer, content, calls, reason):
    assert calls_of(answer) == (content, calls), reason


def test_each_parsed_call_has_its_own_id_and_json_text_arguments():
    _, calls = toolcalls.parse_answer(block('{"name": "a", "arguments": {"x": [1]}}') * 2)
    assert len({c["id"] for c in calls}) == 2 and all(c["type"] == "function" for c in calls)
    assert calls[0]["function"]["arguments"] == '{"x": [1]}'


EPISODE = [
    {"role": "system", "content": "Commit the change."},
    {"role": "user", "content": "staged: app.py"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "git_log", "arguments": '{"n": 2}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "fix(app): one\nfeat: two"},
]


def test_a_template_without_tools_gets_the_hermes_format_in_the_messages():
    messages, extra = toolcalls.rendered(EPISODE, TOOLS, "{{ messages }}")
    assert extra == {}
    system, user, assistant, result = messages
    assert system["content"].startswith("Commit the change.\n\n# Tools\n")
    assert f"<tools>\n{json.dumps(TOOLS[0])}\n</tools>" in system["content"]
    assert user == EPISODE[1]
    assert assistant == {"role": "assistant", "content": block('{"name": "git_log", "arguments": {"n": 2}}')}
    assert result == {"role": "user", "content": "<tool_response>\nfix(app): one\nfeat: two\n</tool_response>"}
    # what the model would write back for that call is read as that call
    assert calls_of(assistant["content"]) == (None, [("git_log", {"n": 2})])


def test_without_a_system_message_the_tools_get_one_of_their_own():
    messages, _ = toolcalls.rendered(EPISODE[1:2], TOOLS, None)
    assert [m["role"] for m in messages] == ["system", "user"] and messages[0]["content"].startswith("# Tools")


def test_a_template_that_takes_tools_gets_them_and_each_calls_arguments_as_an_object():
    template = "{% for t in tools %}{{ t }}{% endfor %}"
    messages, extra = toolcalls.rendered(EPISODE, TOOLS, template)
    assert extra == {"tools": TOOLS}
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == {"n": 2} and messages[2]["content"] == ""
    assert messages[3] == EPISODE[3]


def test_messages_without_tools_reach_the_template_as_they_are():
    assert toolcalls.rendered(EPISODE[:2], None, None) == (EPISODE[:2], {})


BAD = [
    ([{"role": "user", "content": None}], None, "messages[0]: Value error, content must be a string"),
    ([{"role": "tool", "content": "x"}], None, "messages[0]: Value error, a tool message needs the tool_call_id"),
    (
        [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "f"}}]}],
        None,
        "messages[0].tool_calls[0].function.arguments: Field required",
    ),
    (EPISODE[:2], {"type": "function"}, "tools must be a list"),
    (EPISODE[:2], [{"type": "function", "function": {"description": "x"}}], "tools[0].function.name: Field required"),
    (EPISODE[:2], [{"type": "code", "function": {"name": "f"}}], "tools[0].type: Input should be 'function'"),
]


@pytest.mark.parametrize("messages,tools,said", BAD, ids=[r[2][:40] for r in BAD])
def test_a_request_with_malformed_tool_parts_is_refused_saying_where(messages, tools, said):
    with pytest.raises(ValueError) as e:
        toolcalls.read_request(messages, tools)
    assert str(e.value).startswith(said), str(e.value)


# ------------------------------------------------------------------ over HTTP
CALL = block('{"name": "git_log", "arguments": {"n": 2}}')


def test_the_server_answers_a_request_with_tools_with_tool_calls(server, decoder):
    # the stand-in repeats the prompt's tail: the user's text ends with what the model "writes"
    status, payload = post(server, chat("go " + CALL, tools=TOOLS, max_tokens=len(CALL)))
    assert status == 200, payload
    choice = payload["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "git_log", "arguments": '{"n": 2}'} and call["id"].startswith("call_")
    # what the model saw: the Hermes tools section
    assert "<tools>" in "".join(map(chr, payload["prompt_token_ids"]))


def test_without_tools_a_tool_call_block_is_plain_text(server):
    status, payload = post(server, chat("go " + CALL, max_tokens=len(CALL)))
    assert status == 200 and payload["choices"][0]["message"] == {"role": "assistant", "content": CALL}
    assert payload["choices"][0]["finish_reason"] == "stop"


def test_the_server_takes_an_episodes_assistant_calls_and_tool_results(server):
    status, payload = post(server, {"model": "trained", "messages": EPISODE, "tools": TOOLS, "max_tokens": 9})
    assert status == 200, payload
    seen = "".join(map(chr, payload["prompt_token_ids"]))
    assert "<tool_response>\nfix(app): one\nfeat: two\n</tool_response>" in seen and '"arguments": {"n": 2}' in seen


def test_a_tool_message_without_its_call_id_is_answered_400(server, decoder):
    bad = [*EPISODE[:3], {"role": "tool", "content": "x"}]
    status, payload = post(server, {"model": "trained", "messages": bad, "max_tokens": 3})
    assert status == 400 and "tool_call_id" in payload["error"]["message"] and not decoder.calls
