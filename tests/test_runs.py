"""Slow streams, oversized answers, flags, and runs that compete or are stopped."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    SMALL_GROUPS,
    held_at,
    launch,
    main_in_process,
    policy_env,
    read_until,
    small_git_commit,
    training,
    wait_for,
)
from openai_server import FakeOpenAI

from train_skill import main

ROOT = Path(__file__).resolve().parent.parent
# ~350 bytes
ANSWER = "fix(app): raise the limit to a sane value\n\n" + "The old limit dropped valid requests. " * 8


def train_cmd(skills: Path, server, *extra) -> list[str]:
    return training(skills, "--judge", "none", *SMALL_GROUPS, *extra)


def train_env(server) -> dict:
    return policy_env(server)


def in_env(monkeypatch, server) -> None:
    """This process's environment as train_env's: for a training run in process (ART loaded once per worker)."""
    monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


# ------------------------------------------------------------------ slow streams and big answers


def test_eval_request_timeout_bounds_a_model_that_trickles_its_answer(tmp_path, capsys):
    # ~3 s per answer, a byte every 8 ms
    with FakeOpenAI(policy_fn=lambda r: ANSWER, trickle_delay=0.008) as server:
        server.always_fail_policy = "trickle"
        code = main(
            [
                "--skill",
                "git-commit",
                "--eval",
                "--model",
                f"slow=a@{server.url}",
                "--judge",
                "none",
                "--limit",
                "2",
                "--request-timeout",
                "1",
                "--out",
                str(tmp_path / "eval"),
            ]
        )
    row = json.loads((tmp_path / "eval" / "results.json").read_text())["models"][0]
    # whole answers take 3 s
    assert code == 1 and row["failures"] == 2 and row["n"] == 0, capsys.readouterr().err
    assert "no whole answer within 1 s (--request-timeout)" in json.dumps(
        json.loads((tmp_path / "eval" / "results.json").read_text())["errors"]
    )


# in process, but the training loop loads ART (and so torch)
@pytest.mark.slow
def test_training_request_timeout_bounds_a_policy_that_trickles(tmp_path, monkeypatch, capfd):
    skills = small_git_commit(tmp_path, train=4, val=1)
    monkeypatch.chdir(tmp_path)
    with FakeOpenAI(policy_fn=lambda r: ANSWER, trickle_delay=0.008) as server:
        in_env(monkeypatch, server)
        server.policy_faults.append("trickle")
        run = main_in_process(
            capfd, *train_cmd(skills, server, "--steps", "1", "--request-timeout", "6", "--max-exceptions", "0.5")[2:]
        )
    # a whole answer takes ~50 s
    assert "rollout errors 1 |" in run.stdout, run.stdout[-1500:] + run.stderr[-1500:]


# the judge is ART's RULER: importing it imports torch
@pytest.mark.slow
def test_judge_explanations_and_kept_outputs_are_bounded(tmp_path, capsys):
    huge = "x" * 300_000
    with FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit\n\n" + huge) as server:
        server.explanation = "y" * 50_000
        code = main(
            [
                "--skill",
                "git-commit",
                "--eval",
                "--model",
                f"m=a@{server.url}",
                "--judge-base-url",
                server.url,
                "--judge-api-key",
                "k",
                "--limit",
                "1",
                "--out",
                str(tmp_path / "eval"),
            ]
        )
    record = json.loads((tmp_path / "eval" / "records.jsonl").read_text().splitlines()[0])
    assert code == 0, capsys.readouterr().err
    assert record["output_cut"] is True and 100_000 <= len(record["output"]) < 100_100
    # two judged dimensions, 2,000 characters each at most
    assert len(record["judge"]) < 2 * 2_100
    assert (tmp_path / "eval" / "results.json").stat().st_size < 300_000


# ------------------------------------------------------------------ flags, up front

BAD_FLAGS = [
    ("--judge-attempts", "0"),
    ("--judge-attempts", "x"),
    ("--judge-timeout", "0"),
    ("--judge-timeout", "nan"),
    ("--judge-timeout", "inf"),
    ("--limit", "0"),
    ("--samples", "0"),
    ("--concurrency", "0"),
    ("--steps", "0"),
    ("--steps", "-3"),
    ("--groups-per-step", "0"),
    ("--rollouts-per-group", "1"),
    ("--learning-rate", "0"),
    ("--learning-rate", "nan"),
    ("--learning-rate", "-1e-5"),
    ("--eval-every", "0"),
    ("--temperature", "-0.1"),
    ("--temperature", "nan"),
    ("--max-tokens", "0"),
    ("--max-exceptions", "-0.1"),
    ("--max-exceptions", "nan"),
    ("--request-timeout", "0"),
    ("--request-timeout", "-1"),
    ("--context-tokens", "0"),
    ("--seed", "x"),
    ("--teacher-samples", "0"),
    ("--teacher-temperature", "nan"),
    ("--teacher-min-reward", "2"),
    ("--sft-epochs", "0"),
    ("--sft-learning-rate", "nan"),
    ("--sft-batch-size", "0"),
    ("--val-fraction", "1"),
    ("--val-fraction", "nan"),
    ("--max-diff-chars", "0"),
    ("--gpu-memory", "0"),
    ("--gpu-memory", "nan"),
    ("--lora-rank", "3"),
    ("--model", "m=a@127.0.0.1:8000/v1"),
    ("--model", "m=a@localhost:8000"),
    ("--model", "=a"),
    ("--model", "m="),
    ("--base-url", "127.0.0.1:8000/v1"),
    ("--judge-base-url", "localhost:8000"),
    ("--run-name", "a/b"),
]


@pytest.mark.parametrize("flag,value", BAD_FLAGS, ids=[f"{f} {v}" for f, v in BAD_FLAGS])
def test_every_numeric_flag_and_endpoint_is_checked_before_any_work(tmp_path, capsys, monkeypatch, flag, value):
    monkeypatch.chdir(tmp_path)
    with FakeOpenAI() as server:
        argv = [
            "--skill",
            "git-commit",
            "--eval",
            "--model",
            f"m=a@{server.url}",
            "--judge",
            "none",
            "--out",
            "eval",
            flag,
            value,
        ]
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert not server.requests
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: argument {flag}"), err
    assert not (tmp_path / "eval").exists()


def test_context_tokens_must_leave_room_beside_max_tokens(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--skill", "git-commit", "--check", "--context-tokens", "1024", "--max-tokens", "1024"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "--context-tokens" in err[0]


@pytest.mark.parametrize("what", ["missing", "folder"])
def test_score_on_a_missing_file_or_a_folder_exits_2(tmp_path, capsys, what):
    target = tmp_path / "nope.jsonl" if what == "missing" else tmp_path
    code = main(["--skill", "git-commit", "--score", str(target), "--judge", "none"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"--score {target}" in err[0], err


# ------------------------------------------------------------------ one run, one process; stopping


def trained_steps(tmp_path: Path) -> list[int]:
    log = next((tmp_path / ".art").rglob("dryrun.jsonl"), None) if (tmp_path / ".art").exists() else None
    return [json.loads(line)["step"] for line in log.read_text().splitlines()] if log else []


@pytest.mark.slow
def test_a_second_training_of_a_run_exits_2_naming_the_first_and_sigterm_stops_it_resumably(
    tmp_path, monkeypatch, capfd
):
    """The first training is a process (it holds the lock, it gets the signal); the second, and the resume, run here."""
    skills = small_git_commit(tmp_path, train=8, val=1)
    # step 2's rollouts (on step 1's checkpoint) wait: the first run is mid-step
    policy = held_at("skill-git-commit@1", lambda r: ANSWER)
    monkeypatch.chdir(tmp_path)
    with FakeOpenAI(policy_fn=policy) as server:
        cmd = train_cmd(skills, server, "--steps", "4", "--run-name", "shared")
        in_env(monkeypatch, server)
        first = subprocess.Popen(
            cmd, cwd=tmp_path, env=train_env(server), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert policy.reached.wait(300), "step 2 never started"
            second = main_in_process(capfd, *cmd[2:])
            assert second.returncode == 2 and f"(PID {first.pid})" in second.stderr, second.stderr[-1500:]
            assert len(second.stderr.strip().splitlines()) == 1
            # during step 2's rollouts: that step completes, then it stops
            first.send_signal(signal.SIGTERM)
            before = read_until(first.stderr, "SIGTERM: stopping after this step")
        finally:
            policy.release.set()
        out, err = first.communicate(timeout=90)
        assert (
            first.returncode == 143 and "SIGTERM: stopping after this step" in before and "stopped early: yes" in out
        ), (before + err)[-1500:]
        assert "Traceback" not in before + err and trained_steps(tmp_path) == [1, 2]
        # no progress bars (ART's too): stderr is a pipe
        assert "%|" not in before + err and "it/s]" not in before + err
        again = main_in_process(capfd, *cmd[2:])
    assert again.returncode == 0 and "starting at step 2 of 4" in again.stdout, again.stderr[-1500:]
    assert trained_steps(tmp_path) == [1, 2, 3, 4]


@pytest.mark.slow
def test_a_second_ctrl_c_abandons_the_step_at_once(tmp_path):
    """(A killed run's lock is no obstacle: test_faults.py, the training killed mid-step.)"""
    skills = small_git_commit(tmp_path, train=8, val=1)
    # step 3's rollouts (on step 2's checkpoint) wait
    policy = held_at("skill-git-commit@2", lambda r: ANSWER)
    with FakeOpenAI(policy_fn=policy) as server:
        run = launch(train_cmd(skills, server, "--steps", "3"), tmp_path, train_env(server))
        try:
            assert policy.reached.wait(300), "step 3 never started"
            # the first: finish step 3, then stop
            run.send_signal(signal.SIGINT)
            # the first was handled
            before = read_until(run.stderr, "Ctrl-C: stopping after this step")
            # the second: abandon step 3 now
            run.send_signal(signal.SIGINT)
            out, err = run.communicate(timeout=90)
        finally:
            policy.release.set()
    assert "Ctrl-C: stopping after this step" in before, before[-1500:]
    # 128 + SIGINT
    assert "Traceback" not in err and run.returncode == 130, err[-1500:]
    assert trained_steps(tmp_path) == [1, 2]
    assert "stopped at once during step 3: nothing of it was trained; the same command resumes at step 3" in err, err[
        -1500:
    ]


@pytest.mark.slow
@pytest.mark.parametrize("command,sig", [("score", signal.SIGINT), ("eval", signal.SIGTERM)])
def test_interrupting_score_or_eval_keeps_the_records_and_prints_one_line(tmp_path, command, sig):
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(json.dumps({"input": f"diff {i}", "outputs": ["fix: a", "fix: raise it"]}) + "\n" for i in range(40))
    )
    with FakeOpenAI(policy_fn=lambda r: "fix: raise it", policy_latency=0.3, judge_latency=0.3) as server:
        extra = (
            [
                "--score",
                str(src),
                "--out",
                str(tmp_path / "out.jsonl"),
                "--judge-base-url",
                server.url,
                "--judge-api-key",
                "k",
            ]
            if command == "score"
            else [
                "--eval",
                "--model",
                f"m=a@{server.url}",
                "--judge",
                "none",
                "--concurrency",
                "1",
                "--out",
                str(tmp_path / "eval"),
            ]
        )
        records = tmp_path / ("out.jsonl" if command == "score" else "eval/records.jsonl")
        proc = launch(
            [sys.executable, str(ROOT / "train_skill.py"), "--skill", "git-commit", *extra],
            tmp_path,
            {**os.environ, "PYTHONPATH": str(ROOT)},
        )
        wait_for(lambda: records.exists() and records.read_text().count("\n") >= 4)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, err[-2000:]
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        line for line in err.splitlines() if line.startswith("error: interrupted: every")
    ]
    assert all(json.loads(line) for line in records.read_text().splitlines())
