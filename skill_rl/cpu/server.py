"""An OpenAI-compatible server of the policy on 127.0.0.1 (`/v1/chat/completions`, `/v1/models`).

Loopback is not a boundary on a shared machine: every request must carry the server's own key
(`Authorization: Bearer KEY`), a random token made when the server starts (`secrets.token_urlsafe`) and
handed to the one client meant to use it (ART's, through the backend's `_prepare_backend_for_training`;
`--eval`, through the key file `python -m skill_rl.cpu` writes). What a caller sends is bounded before it
is read: a body must announce its length (at most MAX_BODY bytes) and arrive within READ_TIMEOUT_S; a
request that is not what the API takes is answered 400 with a JSON error (500 is kept for a failure of
generation itself). A request may carry `tools` and an episode's tool calls and results; the answer then
returns the model's `<tool_call>` blocks as `tool_calls` (toolcalls.py). Requests that arrive together are decoded as one batch by the training's batched
decoder (`Policy.generate_many`); a client that hangs up is dropped from its batch (its rows stop decoding)
without a word on stderr.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import json
import queue
import secrets
import select
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from skill_rl.cpu import toolcalls
from skill_rl.cpu.policy import Policy, Sample
from skill_rl.cpu.presets import BATCH_WAIT_S, BATCH_WINDOW_S, GEN_BATCH

# bytes of a request body: a prompt the model's context can take is far less
MAX_BODY = 4 * 1024 * 1024
# a refused request's body up to this size is read and dropped
DRAINED = 64 * 1024
# for a request's headers and body, and for each write of the answer
READ_TIMEOUT_S = 30.0


class ClientGone(ConnectionError):
    """The request's client hung up before its answer was decoded."""


@dataclass
class _Job:
    prompt: list[int]
    temperature: float
    max_tokens: int
    adapter: bool
    # whether the client has hung up
    gone: Callable[[], bool] = lambda: False
    done: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


class BadRequest(ValueError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _setting(body: dict, names: tuple[str, ...], default, ok: Callable, rule: str):
    """The first of `names` the body sets (null: unset), checked: BadRequest(400) saying `rule` otherwise."""
    name = next((n for n in names if body.get(n) is not None), names[0])
    value = body.get(name)
    if value is None:
        return default
    if not ok(value):
        raise BadRequest(400, f"{name}: {value!r} is out of range; {rule}")
    return value


class _HTTP(ThreadingHTTPServer):
    daemon_threads = True
    # a training step opens a connection per rollout at once
    request_queue_size = 256

    def handle_error(self, request, client_address) -> None:
        """Silent for a client that hung up or stalled (the handler answers everything else itself)."""


class Server:
    """`/v1/chat/completions` and `/v1/models` on 127.0.0.1, in threads of this process.

    `names` maps each served model name to whether the LoRA adapter is on (`base` serves the model
    without it); `api_key` is what every request must carry (a random one when not given). Requests that
    arrive within `window_s` of each other, for at most `wait_s` after the first (or fill a batch of GEN_BATCH
    sooner), are generated as one batch; `batches` counts the decoder's calls."""

    def __init__(
        self,
        policy: Policy,
        names: dict[str, bool],
        port: int = 0,
        api_key: str | None = None,
        window_s: float = BATCH_WINDOW_S,
        wait_s: float = BATCH_WAIT_S,
    ):
        self.policy, self.names, self.window_s, self.wait_s = policy, names, window_s, max(window_s, wait_s)
        self.api_key = api_key or secrets.token_urlsafe(32)
        self.batches = 0
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.http = _HTTP(("127.0.0.1", port), _handler(self))
        self.threads = [
            threading.Thread(target=self.http.serve_forever, daemon=True),
            threading.Thread(target=self._generate_forever, daemon=True),
        ]
        for t in self.threads:
            t.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.jobs.put(None)
        for t in self.threads:
            t.join(timeout=60)

    def authorized(self, header: str | None) -> bool:
        scheme, _, token = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key.encode())

    def complete(self, body: dict, gone: Callable[[], bool] = lambda: False) -> dict:
        """A chat completion for a request body, or BadRequest with what is wrong in it."""
        name = body.get("model")
        if not isinstance(name, str) or name not in self.names:
            raise BadRequest(404, f"model {name!r} is not served here; these are: {', '.join(self.names)}")
        try:
            messages, tools = toolcalls.read_request(body.get("messages"), body.get("tools"))
        except ValueError as e:
            raise BadRequest(400, str(e)) from None
        n = _setting(body, ("n",), 1, lambda v: type(v) is int and 1 <= v <= 64, "1 to 64")
        max_tokens = _setting(
            body,
            ("max_completion_tokens", "max_tokens"),
            256,
            lambda v: type(v) is int and v >= 1,
            "a whole number of at least 1",
        )
        temperature = _setting(
            body, ("temperature",), 1.0, lambda v: type(v) in (int, float) and 0 <= v <= 10, "a number from 0 to 10"
        )
        try:
            prompt = self.policy.prompt_ids(messages, tools)
        except Exception as e:  # noqa: BLE001  the chat template refused these messages (a role it does not take)
            raise BadRequest(
                400, f"the model's chat template cannot render these messages ({type(e).__name__}: {str(e)[:200]})"
            ) from None
        if len(prompt) + max_tokens > self.policy.max_positions:
            raise BadRequest(
                400,
                f"prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) exceed the model's "
                f"context of {self.policy.max_positions} tokens",
            )
        jobs = [_Job(prompt, float(temperature), max_tokens, self.names[name], gone) for _ in range(n)]
        for job in jobs:
            self.jobs.put(job)
        return self._response(name, prompt, [job.done.result() for job in jobs], tools is not None)

    def _choice(self, index: int, sample: Sample, tools: bool) -> dict:
        """One sample as an OpenAI choice, with its token ids and logprobs; with tools, its `<tool_call>` blocks as
        tool_calls (finish_reason "tool_calls" when it ended by itself)."""
        text = self.policy.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
        content, calls = toolcalls.parse_answer(text) if tools else (text, [])
        message = {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}
        return {
            "index": index,
            "finish_reason": ("tool_calls" if calls else "stop") if sample.finished else "length",
            "message": message,
            "token_ids": sample.token_ids,
            "logprobs": {
                "content": [
                    {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                    for t, lp in zip(sample.token_ids, sample.logprobs)
                ]
            },
        }

    def _response(self, name: str, prompt: list[int], samples: list[Sample], tools: bool = False) -> dict:
        choices = [self._choice(i, s, tools) for i, s in enumerate(samples)]
        used = sum(len(s.token_ids) for s in samples)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": name,
            "prompt_token_ids": prompt,
            "choices": choices,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": used, "total_tokens": len(prompt) + used},
        }

    def _generate_forever(self) -> None:
        while (job := self.jobs.get()) is not None:
            # each arrival keeps the batch open another window (a tool episode's next turns come back over a
            # second or so, as their calls finish), up to wait_s after the first
            first = time.monotonic()
            batch, deadline = [job], first + self.window_s
            while len(batch) < GEN_BATCH and (left := deadline - time.monotonic()) > 0:
                try:
                    batch.append(self.jobs.get(timeout=left))
                except queue.Empty:
                    break
                deadline = min(time.monotonic() + self.window_s, first + self.wait_s)
            stopping = None in batch
            self._run([j for j in batch if j is not None])
            if stopping:
                return

    def _run(self, jobs: list[_Job]) -> None:
        """Generate for the jobs whose clients still wait: those with the same settings as one batch (a decoding
        step runs them all), each prompt's prefix computed once for its rows (a group's rollouts share one prompt)."""
        same: dict[tuple, dict[tuple, list[_Job]]] = {}
        for job in jobs:
            if job.gone():
                job.done.set_exception(ClientGone())
                continue
            same.setdefault((job.temperature, job.max_tokens, job.adapter), {}).setdefault(
                tuple(job.prompt), []
            ).append(job)
        for (temperature, max_tokens, adapter), by_prompt in same.items():
            queue_ = [(prompt, job) for prompt, group in by_prompt.items() for job in group]
            for i in range(0, len(queue_), GEN_BATCH):
                chunk = queue_[i : i + GEN_BATCH]
                # in the chunk's prompt order, as samples come back
                rows = Counter(prompt for prompt, _ in chunk)
                self.batches += 1
                try:
                    samples = self.policy.generate_many(
                        [(list(p), n) for p, n in rows.items()],
                        temperature,
                        max_tokens,
                        adapter,
                        abandoned=lambda c=chunk: [j.gone() for _, j in c],
                    )
                # handed to the waiting request, which answers 500 with it
                except Exception as e:
                    for _, j in chunk:
                        j.done.set_exception(e)
                    continue
                for (_, j), sample in zip(chunk, samples):
                    # its rows were stopped early: what they hold is no answer
                    if j.gone():
                        j.done.set_exception(ClientGone())
                    else:
                        j.done.set_result(sample)


def _hung_up(sock: socket.socket) -> bool:
    """Whether the client closed its end: the socket reads as at its end (or reset) without blocking. A client
    waiting for its answer sends nothing, so a readable socket is one that has hung up (or pipelined, which
    nobody does while waiting: it counts as gone)."""
    try:
        if not select.select([sock], [], [], 0)[0]:
            return False
        return not sock.recv(1, socket.MSG_PEEK)
    # reset, or closed on our side
    except (OSError, ValueError):
        return True


def _handler(server: Server):
    class Handler(BaseHTTPRequestHandler):
        # the socket's: a stalled header, body or reader ends the connection
        timeout = READ_TIMEOUT_S

        # quiet: the training loop prints what matters
        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
            # the client hung up (or stopped reading): nothing to tell it
            except OSError:
                self.close_connection = True

        def _error(self, status: int, message: str) -> None:
            kind = (
                "authentication_error" if status == 401 else "invalid_request_error" if status < 500 else "server_error"
            )
            self._send(status, {"error": {"message": message, "type": kind}})

        def _refuse(self, status: int, message: str) -> None:
            """Answer before reading the body: a small one is read and dropped (closing on unread data would reset
            the connection before the client reads the answer), a larger one is left and the connection closed."""
            length = (self.headers.get("Content-Length") or "").strip()
            if length.isascii() and length.isdigit() and int(length) <= DRAINED:
                try:
                    self.rfile.read(int(length))
                except OSError:
                    pass
            self.close_connection = True
            self._error(status, message)

        def do_GET(self) -> None:
            if not server.authorized(self.headers.get("Authorization")):
                return self._refuse(401, "a valid API key is required (Authorization: Bearer KEY)")
            if self.path.rstrip("/") == "/v1/models":
                return self._send(
                    200,
                    {
                        "object": "list",
                        "data": [{"id": n, "object": "model", "owned_by": "skill-rl"} for n in server.names],
                    },
                )
            self._error(404, f"no route {self.path[:100]}")

        def _body(self) -> bytes | None:
            """The body, read whole within the cap and the timeout; None when it was refused (answered) or cut."""
            if self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                return self._error(411, "send the body with a Content-Length, not chunked")
            length = (self.headers.get("Content-Length") or "").strip()
            if not length.isascii() or not length.isdigit():
                self.close_connection = True
                return self._error(411 if not length else 400, "a Content-Length (a whole number of bytes) is required")
            if int(length) > MAX_BODY:
                self.close_connection = True
                return self._error(413, f"the body is {int(length):,} bytes; the limit is {MAX_BODY:,}")
            try:
                data = self.rfile.read(int(length))
            # the read timed out, or the client hung up
            except OSError:
                data = b""
            if len(data) < int(length):
                self.close_connection = True
                return None
            return data

        def do_POST(self) -> None:
            if not server.authorized(self.headers.get("Authorization")):
                return self._refuse(401, "a valid API key is required (Authorization: Bearer KEY)")
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._refuse(404, f"no route {self.path[:100]}")
            data = self._body()
            if data is None:
                return
            try:
                body = json.loads(data)
            # not JSON, not UTF-8, or nested past what the parser takes
            except (ValueError, RecursionError) as e:
                return self._error(400, f"the request body is not JSON: {str(e)[:200]}")
            try:
                if not isinstance(body, dict):
                    raise BadRequest(400, "the request body must be a JSON object")
                answer = server.complete(body, gone=lambda: _hung_up(self.connection))
            except BadRequest as e:
                return self._error(e.status, str(e)[:300])
            except ClientGone:
                self.close_connection = True
                return None
            except Exception as e:  # noqa: BLE001  a generation failure: a server error, and the server lives on
                return self._error(500, f"{type(e).__name__}: {str(e)[:300]}")
            self._send(200, answer)

    return Handler
