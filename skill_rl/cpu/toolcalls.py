"""Tool calls on the CPU backend's server: what a request may carry (`tools`, assistant messages with `tool_calls`,
`tool` messages), how they reach the model, and how `<tool_call>` blocks in its answer become OpenAI `tool_calls`.

A chat template that takes `tools` (one that names them, as Qwen2.5's does) renders them itself: the messages go to
it as transformers expects (a call's arguments as an object). A template that does not (SmolLM2's) gets the Hermes
format ART's vLLM server parses (`--tool-call-parser hermes`) written into the messages: the system message gains a
`# Tools` section listing each tool's schema inside `<tools></tools>`, an assistant's calls are written after its text
as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, and a tool's result comes back as a user
message inside `<tool_response></tool_response>`. Either way the answer is read the same: each `<tool_call>` block
holding a JSON object with a string `name` (and an object `arguments`, or none) becomes a tool call; any other block
(prose, broken JSON) stays in the text. Pure: no model, no torch; the server and the Policy use it.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, model_validator

CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


class _Record(BaseModel):
    # what clients send besides (name, refusal, ...) is read past, not refused
    model_config = ConfigDict(strict=True, extra="ignore")


class Function(_Record):
    name: str
    arguments: str


class ToolCall(_Record):
    id: str
    type: Literal["function"] = "function"
    function: Function


class Message(_Record):
    role: str
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _has_content(self):
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content must be a string (it may be null only in an assistant message with tool_calls)")
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs the tool_call_id it answers")
        return self


class FunctionSchema(_Record):
    name: str
    description: str = ""
    parameters: dict = {}


class Tool(_Record):
    type: Literal["function"]
    function: FunctionSchema


MESSAGES, TOOLS = TypeAdapter(list[Message]), TypeAdapter(list[Tool])


def _first_error(e: ValidationError, what: str) -> str:
    err = e.errors()[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
    return f"{what}{where}: {err['msg']}"


def read_request(messages, tools) -> tuple[list[dict], list[dict] | None]:
    """A request's messages and tools, checked (ValueError saying which and why); each as a plain dict again."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {role, content} with string contents")
    try:
        read = [m.model_dump(exclude_none=True) for m in MESSAGES.validate_python(messages)]
    except ValidationError as e:
        raise ValueError(_first_error(e, "messages")) from None
    if tools is None:
        return read, None
    if not isinstance(tools, list):
        raise ValueError("tools must be a list of {type: function, function: {name, description, parameters}}")
    try:
        return read, [t.model_dump() for t in TOOLS.validate_python(tools)] or None
    except ValidationError as e:
        raise ValueError(_first_error(e, "tools")) from None


def template_takes_tools(template: str | None) -> bool:
    """Whether a chat template renders `tools` itself (names them); one that does not would drop them silently."""
    return bool(template) and re.search(r"\btools\b", template) is not None


def _arguments(text: str):
    """A call's arguments as a template takes them: the object the JSON holds, else the text as it is."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return value if isinstance(value, dict) else text


def for_template(messages: list[dict]) -> list[dict]:
    """Messages for a template that takes tools: each call's arguments as an object, a null content as ""."""
    out = []
    for m in messages:
        m = {**m, "content": m.get("content") or ""}
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": _arguments(c["function"]["arguments"])}}
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out


def tools_prompt(tools: list[dict]) -> str:
    """The `# Tools` section a system message gains for a template that does not take tools."""
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call functions to do the task. Their JSON schemas are inside <tools></tools>:\n"
        f"<tools>\n{listed}\n</tools>\n\n"
        "To call one, write a JSON object with its name and arguments inside <tool_call></tool_call> tags, one "
        'block per call:\n<tool_call>\n{"name": "<function name>", "arguments": {<its arguments>}}\n</tool_call>\n'
        "Each result comes back inside <tool_response></tool_response> tags. Answer without a call when you are done."
    )


def call_block(name: str, arguments: str) -> str:
    return (
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": _arguments(arguments)}, ensure_ascii=False)
        + ("\n</tool_call>")
    )


def hermes_messages(messages: list[dict], tools: list[dict] | None) -> list[dict]:
    """Messages for a template that does not take tools, in the Hermes format (see the module's docstring)."""
    out: list[dict] = []
    for m in messages:
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
            continue
        blocks = [call_block(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or ()]
        out.append({"role": m["role"], "content": "\n".join(filter(None, [m.get("content") or "", *blocks]))})
    if tools:
        if out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{tools_prompt(tools)}"}
        else:
            out.insert(0, {"role": "system", "content": tools_prompt(tools)})
    return out


def _parsed(body: str) -> tuple[str, str] | None:
    """(name, arguments as JSON text) of one block's body, or None when it is not a call."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get("arguments", {})
    if not isinstance(arguments, dict):
        return None
    return value["name"], json.dumps(arguments, ensure_ascii=False)


def parse_answer(text: str) -> tuple[str | None, list[dict]]:
    """(content, tool_calls) of a model's answer: each well-formed `<tool_call>` block taken out as an OpenAI tool
    call (a new id, the arguments as JSON text); the rest, malformed blocks included, is the content (None when
    nothing is left beside the calls)."""
    calls, kept, at = [], [], 0
    for m in CALL.finditer(text):
        call = _parsed(m[1])
        if call is None:
            continue
        kept.append(text[at : m.start()])
        at = m.end()
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call[0], "arguments": call[1]},
            }
        )
    if not calls:
        return text, []
    return ("".join(kept) + text[at:]).strip() or None, calls


def rendered(messages: list[dict], tools: list[dict] | None, template: str | None) -> tuple[list[dict], dict]:
    """(messages, extra apply_chat_template arguments) for a chat template: as they are when nothing in them is about
    tools; for a template that takes tools, the tools passed to it; else the Hermes format written into the text."""
    if not tools and not any(m["role"] == "tool" or m.get("tool_calls") for m in messages):
        return messages, {}
    if template_takes_tools(template):
        return for_template(messages), ({"tools": tools} if tools else {})
    return hermes_messages(messages, tools), {}


def prompt_ids(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """A prompt's tokens through `tokenizer`'s chat template, tools and tool messages rendered as `rendered` says."""
    messages, extra = rendered(messages, tools, getattr(tokenizer, "chat_template", None))
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False, **extra)
    return list(ids)
