"""The CPU policy server's HTTP side (skill_rl/cpu/server.py), over real HTTP on 127.0.0.1: its key, what it reads of
a request, its answers to malformed ones, batching, and clients that hang up.

The model behind it is a stand-in with the Policy's interface (`Decoder` below: a prompt's token ids are its
characters, an answer repeats the prompt's last tokens), so that these run in the fast tier without torch; the same
server with the real Policy is tested in tests/test_cpu.py (slow)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from skill_rl.cpu import server as served
from skill_rl.cpu import toolcalls
from skill_rl.cpu.policy import Sample
from skill_rl.cpu.presets import GEN_BATCH


class Tokenizer:
    def decode(self, ids, skip_special_tokens=True) -> str:
        return "".join(map(chr, ids))


class Decoder:
    """The Policy's interface for the server. While `hold` is clear each decoding step takes 10 ms, so that a test
    can act while a batch is being decoded; `decoding` is set once a batch has started; `steps` holds how many
    decoding steps each batch ran."""

    max_positions = 2048

    def __init__(self):
        self.tokenizer, self.calls = Tokenizer(), []
        self.hold, self.decoding = threading.Event(), threading.Event()
        self.hold.set()
        self.steps: list[int] = []

    def prompt_ids(self, messages, tools=None) -> list[int]:
        # a template that takes no tools, as SmolLM2's
        messages, _ = toolcalls.rendered(messages, tools, None)
        return [ord(c) for m in messages for c in m["content"]]

    def generate_many(self, prompts, temperature, max_tokens, adapter, abandoned=None) -> list[Sample]:
        rows = [p for p, n in prompts for _ in range(n)]
        self.calls.append(len(rows))
        self.decoding.set()
        steps = 0
        # one decoding step a token, all rows at once; stopped rows end the batch
        while steps < max_tokens:
            steps += 1
            if abandoned is not None and all(abandoned()):
                break
            self.hold.wait(0.01)
        self.steps.append(steps)
        return [Sample(p, p[-max_tokens:], [-0.5] * len(p[-max_tokens:]), True) for p in rows]


@pytest.fixture
def decoder():
    return Decoder()


@pytest.fixture
def server(decoder):
    s = served.Server(decoder, {"trained": True, "base": False}, api_key="k-" + "x" * 30)
    yield s
    decoder.hold.set()
    s.close()


def post(server, body, key: str | None = "default", raw: bytes | None = None, headers: dict | None = None):
    """(status, JSON answer) of a POST to /v1/chat/completions."""
    conn = http.client.HTTPConnection("127.0.0.1", server.http.server_address[1], timeout=60)
    data = raw if raw is not None else json.dumps(body).encode()
    sent = {
        "Content-Type": "application/json",
        **({"Authorization": f"Bearer {server.api_key if key == 'default' else key}"} if key else {}),
        **(headers or {}),
    }
    conn.request("POST", "/v1/chat/completions", body=data, headers=sent)
    reply = conn.getresponse()
    status, payload = reply.status, json.loads(reply.read())
    conn.close()
    return status, payload


def chat(content: str = "hello", **extra) -> dict:
    return {"model": "trained", "messages": [{"role": "user", "content": content}], "max_tokens": 3, **extra}


def port(server) -> int:
    return server.http.server_address[1]


def answer_of(sock) -> str:
    """All the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data.decode()


def test_the_server_answers_only_requests_that_carry_its_key(server):
    assert post(server, chat())[0] == 200
    for key in (None, "wrong", server.api_key[:-1], server.api_key + "x", "é"):
        status, payload = post(server, chat(), key=key)
        assert status == 401 and "API key" in payload["error"]["message"], key
    conn = http.client.HTTPConnection("127.0.0.1", port(server), timeout=10)
    conn.request("GET", "/v1/models")
    assert conn.getresponse().status == 401


def test_each_server_makes_its_own_random_key(decoder):
    keys = set()
    for _ in range(2):
        s = served.Server(decoder, {"base": False})
        keys.add(s.api_key)
        s.close()
    assert len(keys) == 2 and all(len(k) >= 32 for k in keys)


MALFORMED = [
    (None, b"{not json", "not JSON"),
    (None, b"\xff\xfe{}", "not JSON"),
    (None, b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    ([1, 2], None, "JSON object"),
    ({"model": ["trained"], "messages": []}, None, "not served"),
    ({"model": {"a": 1}, "messages": []}, None, "not served"),
    (chat(messages=[{"role": "user", "content": ["parts"]}]), None, "messages"),
    (chat(messages="hello"), None, "messages"),
    (chat(n=0), None, "n: 0"),
    (chat(n=True), None, "n: True"),
    (chat(max_tokens=0), None, "max_tokens: 0"),
    (chat(max_tokens="5"), None, "max_tokens: '5'"),
    (chat(max_tokens=-1), None, "max_tokens: -1"),
    (chat(max_completion_tokens=0), None, "max_completion_tokens: 0"),
    (chat(temperature="hot"), None, "temperature"),
    (chat(temperature=float("nan")), None, "temperature"),
    (chat(max_tokens=5000), None, "context"),
]


@pytest.mark.parametrize("body,raw,said", MALFORMED, ids=[r[2] + f"-{i}" for i, r in enumerate(MALFORMED)])
def test_a_malformed_request_is_answered_400_with_a_json_error(server, decoder, body, raw, said):
    status, payload = post(server, body, raw=raw)
    assert status in (400, 404) and said in payload["error"]["message"], payload
    # nothing was decoded for it
    assert not decoder.calls
    # and the server goes on
    assert post(server, chat())[0] == 200


def test_max_tokens_is_honoured_as_given_never_replaced_by_a_default(server, decoder):
    status, payload = post(server, chat("abcdefgh", max_tokens=1))
    assert status == 200 and payload["choices"][0]["token_ids"] == [ord("h")]
    status, payload = post(server, chat("abcdefgh", max_tokens=None, max_completion_tokens=2))
    assert payload["choices"][0]["token_ids"] == [ord("g"), ord("h")]


def test_a_body_over_the_limit_is_refused_before_it_is_read(server, decoder):
    with socket.create_connection(("127.0.0.1", port(server)), timeout=30) as sock:
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.api_key}\r\n"
            f"Content-Length: {served.MAX_BODY + 1}\r\n\r\n".encode()
        )
        # answered at once: the server did not wait for 4 MB that never come
        answer = answer_of(sock)
    assert answer.startswith("HTTP/1.0 413") and '"error"' in answer


@pytest.mark.parametrize("headers,status", [({"Transfer-Encoding": "chunked"}, 411), ({"Content-Length": "12x"}, 400)])
def test_a_body_without_a_plain_length_is_refused(server, headers, status):
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port(server)), timeout=30) as sock:
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.api_key}\r\n"
            f"{head}\r\n".encode()
        )
        assert answer_of(sock).startswith(f"HTTP/1.0 {status}")


def test_a_body_that_stalls_is_dropped_after_the_read_timeout(monkeypatch, decoder, capfd):
    monkeypatch.setattr(served, "READ_TIMEOUT_S", 0.5)
    s = served.Server(decoder, {"trained": True})
    try:
        with socket.create_connection(("127.0.0.1", port(s)), timeout=30) as sock:
            sock.sendall(
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {s.api_key}\r\n"
                'Content-Length: 1000\r\n\r\n{"model"'.encode()
            )
            # closed by the server, with no answer: the request never arrived whole
            assert sock.recv(65536) == b""
        assert post(s, chat())[0] == 200 and not decoder.calls[1:]
    finally:
        s.close()
    assert "Traceback" not in capfd.readouterr().err


def test_requests_that_arrive_together_are_decoded_as_one_batch(decoder):
    # the batch starts once it is full, not after 60 s
    s = served.Server(decoder, {"trained": True}, window_s=60)
    try:
        with ThreadPoolExecutor(GEN_BATCH) as pool:
            answers = list(pool.map(lambda i: post(s, chat(f"request {i:02d}")), range(GEN_BATCH)))
    finally:
        s.close()
    assert s.batches == 1 and decoder.calls == [GEN_BATCH]
    assert [a[1]["choices"][0]["message"]["content"] for a in answers] == [f" {i:02d}" for i in range(GEN_BATCH)]


def staggered(server, count: int, apart_s: float) -> None:
    """`count` requests, each sent `apart_s` after the one before (a tool episode's next turns, coming back as
    their calls finish), all answered."""
    with ThreadPoolExecutor(count) as pool:
        futures = []
        for i in range(count):
            futures.append(pool.submit(post, server, chat(f"request {i:02d}")))
            time.sleep(apart_s)
        assert all(f.result()[0] == 200 for f in futures)


@pytest.mark.parametrize("wait_s, batches", [(30.0, [4]), (1.0, [3, 1])])
def test_requests_that_keep_arriving_within_the_window_of_each_other_are_one_batch_up_to_the_wait(
    decoder, wait_s, batches
):
    """Four requests 0.4 s apart with a window of 1 s: each keeps the batch open another second, so they are one
    batch (counted from the first alone, the window would close before the fourth), unless the batch has waited
    `wait_s` since its first."""
    s = served.Server(decoder, {"trained": True}, window_s=1.0, wait_s=wait_s)
    try:
        staggered(s, 4, 0.4)
    finally:
        s.close()
    assert decoder.calls == batches


def test_a_client_that_hangs_up_stops_its_rows_and_leaves_no_traceback(server, decoder, capfd):
    # decoding waits, step by step, for the test
    decoder.hold.clear()
    body = json.dumps(chat(max_tokens=1000)).encode()
    sock = socket.create_connection(("127.0.0.1", port(server)), timeout=30)
    sock.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    assert decoder.decoding.wait(30)
    # the client hangs up while its answer is being decoded
    sock.close()
    # queued behind the abandoned batch, answered once it stopped
    status, payload = post(server, chat("next"))
    assert status == 200 and payload["choices"][0]["message"]["content"] == "ext"
    assert decoder.steps[0] < 1000, "the abandoned rows were decoded to max_tokens"
    assert "Traceback" not in capfd.readouterr().err
