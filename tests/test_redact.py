"""Keys that servers echo back (a 401 quoting the key, a header, a completion that repeats it) reach no
printed line, record, result file or `.art/` log."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DRY_RUN, small_git_commit
from conftest import SMALL_DIFF as DIFF
from openai_server import FakeOpenAI

from train_skill import main

# every test here asks the judge (ART's RULER: torch) or starts a training
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-echoed-SECRET-5a4b3c2d1e0f"


def leaked(text: str | bytes) -> bool:
    """The key, or its first 14 characters (a key cut in half by a truncated message still leaks)."""
    probe = (KEY, KEY[:14]) if isinstance(text, str) else (KEY.encode(), KEY[:14].encode())
    return any(p in text for p in probe)


def leaking_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and leaked(p.read_bytes())]


@pytest.mark.parametrize("fault", ["401-echo", "echo"])
def test_score_shows_no_key_the_judge_echoes(tmp_path, capsys, monkeypatch, fault):
    monkeypatch.setenv("JUDGE_API_KEY", KEY)
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"input": DIFF.format(n=1), "outputs": ["fix: a", "fix: raise it"]}) + "\n")
    with FakeOpenAI() as server:
        server.always_fail_judge = fault
        main(
            [
                "--skill",
                "git-commit",
                "--score",
                str(src),
                "--judge-base-url",
                server.url,
                "--judge-attempts",
                "1",
                "--out",
                str(tmp_path / "out.jsonl"),
            ]
        )
        assert server.requests, "the judge was asked"
    printed = "".join(capsys.readouterr())
    assert not leaked(printed), printed[-2000:]
    assert not leaking_files(tmp_path)


@pytest.mark.parametrize("fault", ["401-echo", "echo"])
def test_eval_shows_no_key_a_model_or_the_judge_echoes(tmp_path, capsys, monkeypatch, fault):
    monkeypatch.setenv("JUDGE_API_KEY", KEY)
    with FakeOpenAI() as server:
        server.always_fail_policy = server.always_fail_judge = fault
        main(
            [
                "--skill",
                "git-commit",
                "--eval",
                "--model",
                f"m=a@{server.url}",
                "--api-key",
                KEY,
                "--limit",
                "2",
                "--request-timeout",
                "5",
                "--judge-base-url",
                server.url,
                "--judge-attempts",
                "1",
                "--out",
                str(tmp_path / "eval"),
            ]
        )
    printed = "".join(capsys.readouterr())
    assert not leaked(printed), printed[-2000:]
    assert not leaking_files(tmp_path)


def test_training_logs_and_prints_no_key_the_policy_or_judge_echoes(tmp_path):
    """One training process (a fresh interpreter: what its loggers and asyncio print at exit is seen too): step 1
    keeps going past two failed rollouts, step 2's all fail and stop the run; every error quotes the key."""
    skills = small_git_commit(tmp_path, train=4, val=1)
    with FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit") as server:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SKILL_RL_POLICY_BASE_URL": server.url,
            "SKILL_RL_POLICY_API_KEY": KEY,
            "JUDGE_API_KEY": KEY,
        }
        env.pop("WANDB_API_KEY", None)
        cmd = [
            sys.executable,
            str(ROOT / "train_skill.py"),
            "--skills-dir",
            str(skills),
            "--skill",
            "git-commit",
            *DRY_RUN,
            "--judge-base-url",
            server.url,
            "--judge-attempts",
            "1",
            "--groups-per-step",
            "2",
            "--rollouts-per-group",
            "4",
            "--eval-every",
            "100",
            "--steps",
            "2",
            "--max-exceptions",
            "0.5",
        ]
        # every judge answer quotes the key
        server.always_fail_judge = "echo"
        # step 1: one rollout fails quoting it, one answer quotes it
        server.policy_faults.extend(["401-echo", "echo"])
        # (4 rollouts a group: each group keeps 2 or more, whichever groups the two land in, and step 1 trains)
        # step 2 (on step 1's checkpoint): every rollout fails
        server.fail_model["skill-git-commit@1"] = "401-echo"
        run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "step    1 | reward" in run.stdout and "rollout errors 2" in run.stdout, run.stderr[-2000:]
    assert run.returncode == 1 and "step    2 |" not in run.stdout and "more rollouts failed" in run.stderr, run.stderr[
        -2000:
    ]
    # the rollouts still in flight when the run stopped leave no "Task exception was never retrieved" behind
    assert "Task exception was never retrieved" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert not leaked(run.stdout + run.stderr), (run.stdout + run.stderr)[-2000:]
    assert (tmp_path / ".art").exists() and not leaking_files(tmp_path)
