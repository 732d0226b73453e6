"""An OpenAI-compatible server of the policy on 127.0.0.1 (`/v1/chat/completions`, `/v1/models`).
"""

from __future__ import annotations

import concurrent.futures
import json
import queue
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from skill_rl.cpu.presets import BATCH_WINDOW_S, GEN_BATCH
from skill_rl.cpu.policy import Policy, Sample


@dataclass
class _Job:
    prompt: list[int]
    temperature: float
    max_tokens: int
    adapter: bool
    done: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


class BadRequest(ValueError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Server:
    """`/v1/chat/completions` and `/v1/models` on 127.0.0.1, in threads of this process.

    `names` maps each served model name to whether the LoRA adapter is on (`base` serves the model
    without it). Requests that arrive together are generated as one batch."""

    def __init__(self, policy: Policy, names: dict[str, bool], port: int = 0):
        self.policy, self.names = policy, names
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.http = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.http.daemon_threads = True
        self.threads = [threading.Thread(target=self.http.serve_forever, daemon=True),
                        threading.Thread(target=self._generate_forever, daemon=True)]
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

    def complete(self, body: dict) -> dict:
        """A chat completion for a request body, or BadRequest with what is wrong in it."""
        name, messages = body.get("model"), body.get("messages")
        if name not in self.names:
            raise BadRequest(404, f"model {name!r} is not served here; these are: {', '.join(self.names)}")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages):
            raise BadRequest(400, "messages must be a non-empty list of {role, content} with string contents")
        n, temperature = body.get("n") or 1, body.get("temperature", 1.0)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 256
        for key, value, ok in (("n", n, type(n) is int and 1 <= n <= 64),
                               ("max_tokens", max_tokens, type(max_tokens) is int and max_tokens >= 1),
                               ("temperature", temperature, isinstance(temperature, (int, float)) and 0 <= temperature <= 10)):
            if not ok:
                raise BadRequest(400, f"{key}: {value!r} is out of range")
        prompt = self.policy.prompt_ids(messages)
        if len(prompt) + max_tokens > self.policy.max_positions:
            raise BadRequest(400, f"prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) exceed the model's "
                                  f"context of {self.policy.max_positions} tokens")
        jobs = [_Job(prompt, float(temperature), max_tokens, self.names[name]) for _ in range(n)]
        for job in jobs:
            self.jobs.put(job)
        return self._response(name, prompt, [job.done.result() for job in jobs])

    def _response(self, name: str, prompt: list[int], samples: list[Sample]) -> dict:
        decode = self.policy.tokenizer.decode
        choices = [{
            "index": i, "finish_reason": "stop" if s.finished else "length",
            "message": {"role": "assistant", "content": decode(s.token_ids, skip_special_tokens=True)},
            "token_ids": s.token_ids,
            "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                                     for t, lp in zip(s.token_ids, s.logprobs)]},
        } for i, s in enumerate(samples)]
        used = sum(len(s.token_ids) for s in samples)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": name, "prompt_token_ids": prompt, "choices": choices,
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": used, "total_tokens": len(prompt) + used}}

    def _generate_forever(self) -> None:
        while (job := self.jobs.get()) is not None:
            batch, deadline = [job], time.monotonic() + BATCH_WINDOW_S
            while (left := deadline - time.monotonic()) > 0:
                try:
                    batch.append(self.jobs.get(timeout=left))
                except queue.Empty:
                    break
            stopping = None in batch
            self._run([j for j in batch if j is not None])
            if stopping:
                return

    def _run(self, jobs: list[_Job]) -> None:
        """Generate for the jobs: those with the same settings as one batch (a decoding step runs them all), each
        prompt's prefix computed once for its rows (a group's rollouts share one prompt)."""
        same: dict[tuple, dict[tuple, list[_Job]]] = {}
        for job in jobs:
            same.setdefault((job.temperature, job.max_tokens, job.adapter), {}).setdefault(tuple(job.prompt), []).append(job)
        for (temperature, max_tokens, adapter), by_prompt in same.items():
            queue_ = [(prompt, job) for prompt, group in by_prompt.items() for job in group]
            for i in range(0, len(queue_), GEN_BATCH):
                chunk = queue_[i:i + GEN_BATCH]
                rows = Counter(prompt for prompt, _ in chunk)  # in the chunk's prompt order, as samples come back
                try:
                    samples = self.policy.generate_many([(list(p), n) for p, n in rows.items()], temperature, max_tokens, adapter)
                except Exception as e:  # handed to the waiting request, which answers 500 with it
                    for _, j in chunk:
                        j.done.set_exception(e)
                    continue
                for (_, j), sample in zip(chunk, samples):
                    j.done.set_result(sample)


def _handler(server: Server):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: the training loop prints what matters
            pass

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "skill-rl"}
                                                                  for n in server.names]})
            self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                if not isinstance(body, dict):
                    raise BadRequest(400, "the request body must be a JSON object")
                self._send(200, server.complete(body))
            except json.JSONDecodeError as e:
                self._send(400, {"error": {"message": f"the request body is not JSON: {e}"}})
            except BadRequest as e:
                self._send(e.status, {"error": {"message": str(e)}})
            except Exception as e:  # a generation failure: the client sees it as a server error, the server lives on
                self._send(500, {"error": {"message": f"{type(e).__name__}: {e}"}})

    return Handler
