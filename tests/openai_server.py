"""A small OpenAI-compatible HTTP server on 127.0.0.1 for offline tests and the benchmark.

It answers `POST /v1/chat/completions` for two kinds of caller:
  - the judge (RULER's prompt, recognised by "Grading standards"): it reads the candidates out of
    the `<trajectory id="k">` blocks, exactly as a real judge would receive them, and scores them
    with `judge_fn(texts) -> scores` (or `judge_fn(texts, prompt)`, for a judge that reads the task too);
  - the policy (anything else): `policy_fn(request) -> answer`, where request is the JSON body; with
    per-token logprobs when the request asks for them, as vLLM and OpenAI answer. An answer is its text, or
    `{"content": text, "tool_calls": [{"name": ..., "arguments": a dict, or a string sent as it is}]}`: the
    calls come back as OpenAI `tool_calls` (ids `call_<n>`, finish_reason "tool_calls"), their logprobs over the
    Hermes text a model would have generated for them. Answers put in `policy_answers` are given first, one per
    policy request, in order (a scripted episode); `requests` keeps every request body (its tools and messages).
Faults can be queued per caller to make the next calls misbehave (see FAULTS). Every answer reports
`usage`: the prompt's tokens counted by LiteLLM with tiktoken's encoding for the requested model, as
OpenAI counts a chat prompt; the completion's counted the same way, except for an answer with logprobs,
whose count is its logprobs' (as ART checks). The server keeps what it reported in `usage_reported`.
"""

from __future__ import annotations

import html
import inspect
import json
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

FAULTS = (
    "500",
    "429",
    "429-retry-after",
    "timeout",
    "truncated",
    "non-json",
    "fenced",
    "wrong-count",
    "out-of-range",
    "string-scores",
    "empty",
    "length",
    "refused",
    # 401 quoting the caller's key in the body and in a header, as some providers do
    "401-echo",
    # a normal answer that quotes the caller's key in its text and in a header
    "echo",
    # a normal answer sent one byte every `trickle_delay` seconds
    "trickle",
    # 307 to /v1/redirected/..., which answers normally
    "redirect",
)
# this server's tokens: words with the spaces before them
TOKEN = re.compile(r"\s*\S+|\s+")
CONTEXT = re.compile(r"<context>\n(.*?)\n</context>", re.S)
TRAJECTORY = re.compile(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', re.S)


def candidates(judge_prompt: str) -> list[str]:
    """The assistant outputs inside a RULER prompt's trajectory blocks, unescaped."""
    out = []
    for _, body in TRAJECTORY.findall(judge_prompt):
        messages = json.loads(body)
        text = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "assistant"), "")
        out.append(html.unescape(text))
    return out


def context_input(judge_prompt: str) -> str:
    """The task's input as the judge sees it: the last user message of a RULER prompt's <context> block."""
    m = CONTEXT.search(judge_prompt)
    messages = json.loads(m[1]) if m else []
    return next((msg.get("content") or "" for msg in reversed(messages) if msg.get("role") == "user"), "")


def token_logprobs(tokens: list[str]) -> dict:
    """Logprobs as an OpenAI server returns them when asked: one entry per token."""
    return {"content": [{"token": t, "bytes": list(t.encode()), "logprob": -0.25, "top_logprobs": []} for t in tokens]}


def by_length(texts: list[str]) -> list[float]:
    longest = max((len(t) for t in texts), default=1) or 1
    return [len(t) / longest for t in texts]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # a training step opens 100+ connections at once
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        # a client that hung up (timeouts under test) is not the server's error
        pass


class FakeOpenAI:
    def __init__(
        self,
        policy_fn: Callable[[dict], str] | None = None,
        judge_fn: Callable[[list[str]], list[float]] = by_length,
        policy_latency: float = 0.0,
        judge_latency: float = 0.0,
        fault_sleep: float = 5.0,
        trickle_delay: float = 0.05,
    ):
        self.policy_fn = policy_fn or (lambda request: "feat: add a thing")
        self.judge_fn = judge_fn
        self.policy_latency, self.judge_latency, self.fault_sleep = policy_latency, judge_latency, fault_sleep
        self.trickle_delay = trickle_delay
        # appended to every explanation the judge gives
        self.explanation = ""
        self.policy_faults: deque[str] = deque()
        # answers (see above) for the next policy requests, one each, before policy_fn is asked
        self.policy_answers: deque[str | dict] = deque()
        self._call_ids = 0
        self.judge_faults: deque[str] = deque()
        # a fault to answer every judge call with
        self.always_fail_judge: str | None = None
        # ... and every policy call
        self.always_fail_policy: str | None = None
        # model -> a fault for every policy call to it (a checkpoint: one step's rollouts)
        self.fail_model: dict[str, str] = {}
        self.requests: list[dict] = []
        self.judge_prompts: list[str] = []
        # {"judge": bool, "prompt_tokens": n, "completion_tokens": n} per answer
        self.usage_reported: list[dict] = []
        self._lock = threading.Lock()
        from litellm import token_counter  # noqa: F401  (loaded here, not inside the first answer a client is timing)

        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    @property
    def judge_calls(self) -> int:
        return len(self.judge_prompts)

    # ---------------------------------------------------------------- answers

    def _completion(
        self,
        content: str | None,
        finish_reason: str = "stop",
        model: str = "fake",
        logprobs: bool = False,
        request: dict | None = None,
        tool_calls: list[dict] | None = None,
    ) -> dict:
        message: dict = {"role": "assistant", "content": content}
        generated = content or ""
        if tool_calls:
            message["tool_calls"], finish_reason = self._tool_calls(tool_calls), "tool_calls"
            message["content"] = content or None
            generated += "".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in tool_calls)
        # usage agrees with the logprobs, as ART checks
        tokens = TOKEN.findall(generated)
        usage = self._usage(request, generated, model, len(tokens) if logprobs else None) if request is not None else {}
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish_reason,
                    "logprobs": token_logprobs(tokens) if logprobs else None,
                    "message": message,
                }
            ],
            # {} for a body cut short on purpose
            "usage": usage,
        }

    def _tool_calls(self, calls: list[dict]) -> list[dict]:
        """OpenAI tool calls for scripted ones, each with a new id; arguments that are not a string are sent as JSON."""
        out = []
        for call in calls:
            with self._lock:
                self._call_ids += 1
                n = self._call_ids
            arguments = call.get("arguments", {})
            arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
            out.append(
                {"id": f"call_{n}", "type": "function", "function": {"name": call["name"], "arguments": arguments}}
            )
        return out

    def _policy_answer(self, request: dict) -> tuple[str, list[dict]]:
        """The next scripted answer, else policy_fn's: (text, tool calls)."""
        with self._lock:
            answer = self.policy_answers.popleft() if self.policy_answers else None
        if answer is None:
            answer = self.policy_fn(request)
        if isinstance(answer, str):
            return answer, []
        return answer.get("content") or "", list(answer.get("tool_calls") or [])

    def _usage(self, request: dict, content: str, model: str, completion: int | None) -> dict:
        from litellm import token_counter

        # the model's tiktoken encoding; never a download
        tiktoken = {"type": "openai_tokenizer", "tokenizer": None}
        messages = [
            {"role": m.get("role", "user"), "content": m.get("content") or ""} for m in request.get("messages") or []
        ]
        prompt = token_counter(model=model, messages=messages, custom_tokenizer=tiktoken) if messages else 0
        if completion is None:
            completion = token_counter(model=model, text=content, custom_tokenizer=tiktoken) if content else 0
        is_judge = bool(messages) and "Grading standards" in messages[0]["content"]
        with self._lock:
            self.usage_reported.append({"judge": is_judge, "prompt_tokens": prompt, "completion_tokens": completion})
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def reported(self, judge: bool = True) -> tuple[int, int]:
        """(prompt, completion) tokens reported so far to the judge's (or the policy's) callers."""
        rows = [u for u in self.usage_reported if u["judge"] == judge]
        return sum(u["prompt_tokens"] for u in rows), sum(u["completion_tokens"] for u in rows)

    def _judge_answer(self, request: dict, fault: str | None, key: str = "") -> tuple[int, dict | str]:
        # the trajectories; a corrective retry appends turns after it
        prompt = request["messages"][1]["content"]
        texts = candidates(prompt)
        with self._lock:
            self.judge_prompts.append(prompt)
        # judge_fn(texts, prompt): sees the context
        takes_prompt = len(inspect.signature(self.judge_fn).parameters) > 1
        scores = list(self.judge_fn(texts, prompt) if takes_prompt else self.judge_fn(texts))
        if fault == "wrong-count":
            scores = scores[:-1] if len(scores) > 1 else [*scores, 0.5]
        if fault == "out-of-range":
            scores = [s * 10 - 5 for s in scores]
        said = (f" (asked with key {key})" if fault == "echo" else "") + self.explanation
        items = [
            {
                "trajectory_id": str(i),
                "explanation": f"candidate {i}{said}",
                "score": str(s) if fault == "string-scores" else s,
            }
            for i, s in enumerate(scores, 1)
        ]
        content = json.dumps({"scores": items})
        if fault == "fenced":
            content = f"```json\n{content}\n```"
        return 200, self._completion(content, model=request.get("model", "judge"), request=request)

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            # keep test output clean
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict | str, headers: dict | None = None, cut: bool = False):
                raw = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(raw) + (50 if cut else 0)))
                self.end_headers()
                if self.trickle:
                    # every byte on time for any per-read timeout; the whole takes long
                    for i in range(len(raw)):
                        self.wfile.write(raw[i : i + 1])
                        self.wfile.flush()
                        time.sleep(server.trickle_delay)
                    return
                self.wfile.write(raw[: len(raw) // 2] if cut else raw)
                if cut:
                    self.close_connection = True

            def do_POST(self):
                try:
                    self._answer()
                except (BrokenPipeError, ConnectionResetError):
                    # the client gave up (a timeout under test): nothing to answer
                    pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(request)
                first = (request.get("messages") or [{}])[0].get("content") or ""
                is_judge = isinstance(first, str) and "Grading standards" in first
                queue = server.judge_faults if is_judge else server.policy_faults
                with server._lock:
                    fault = (
                        queue.popleft()
                        if queue
                        else (
                            server.always_fail_judge
                            if is_judge
                            else (server.fail_model.get(request.get("model")) or server.always_fail_policy)
                        )
                    )
                self.trickle = fault == "trickle"
                time.sleep(server.judge_latency if is_judge else server.policy_latency)
                key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                echo = {"X-Echo-Key": key} if fault in ("401-echo", "echo") else {}
                if fault == "redirect" and "/redirected/" not in self.path:
                    return self._send(307, {}, {"Location": self.path.replace("/v1/", "/v1/redirected/", 1)})
                if fault == "401-echo":
                    return self._send(
                        401,
                        {
                            "error": {
                                "message": f"Incorrect API key provided: {key}",
                                "type": "invalid_request_error",
                                "code": "invalid_api_key",
                            }
                        },
                        echo,
                    )
                if fault == "500":
                    return self._send(500, {"error": {"message": "internal error", "type": "server_error"}})
                if fault in ("429", "429-retry-after"):
                    headers = {"Retry-After": "0.2"} if fault == "429-retry-after" else {}
                    return self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, headers)
                if fault == "timeout":
                    time.sleep(server.fault_sleep)
                if fault == "refused":
                    self.close_connection = True
                    return
                if fault == "non-json":
                    return self._send(200, "<html>bad gateway</html>")
                if fault == "truncated":
                    return self._send(200, server._completion("x"), cut=True)
                if is_judge:
                    status, body = server._judge_answer(request, fault, key)
                    return self._send(status, body, echo)
                logprobs, model = bool(request.get("logprobs")), request.get("model", "policy")
                if fault == "empty":
                    return self._send(200, server._completion("", model=model, logprobs=logprobs, request=request))
                text, calls = server._policy_answer(request)
                text += f"\n\nYour key is {key}" if fault == "echo" else ""
                if fault == "length":
                    cut = text[: max(1, len(text) // 3)]
                    return self._send(200, server._completion(cut, "length", model, logprobs, request))
                answer = server._completion(text, model=model, logprobs=logprobs, request=request, tool_calls=calls)
                return self._send(200, answer, echo)

        return Handler
