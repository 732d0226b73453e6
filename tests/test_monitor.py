"""The reward-hacking monitor: its figures on real ART groups, and a run whose policy collapses to one message."""

import collections
import itertools
import json
import re

import pytest

import train_skill
from conftest import small_git_commit
from openai_server import FakeOpenAI


# the monitor reads ART's groups: ART (and so torch) is imported inside the tests, never while collecting
pytestmark = pytest.mark.slow


def group(task_id, outputs, **metrics):
    import art

    return art.TrajectoryGroup(
        art.Trajectory(messages_and_choices=[{"role": "user", "content": task_id}, {"role": "assistant", "content": o}],
                       metadata={"task_id": task_id}, metrics=dict(metrics), reward=0.0)
        for o in outputs)


def test_collapse_counts_outputs_repeated_across_tasks_not_within_one():
    from skill_rl.training.monitor import collapse

    assert collapse([group("a", ["x", "x"]), group("b", ["y", "y"])]) == 0.0
    assert collapse([group("a", ["x", "y"]), group("b", ["x", "z"])]) == 0.5
    assert collapse([group("a", ["x ", "x"]), group("b", ["x", "x"])]) == 1.0  # surrounding whitespace is no disguise


def test_the_warning_fires_on_collapse_and_on_a_widening_judge_check_gap():
    from skill_rl.training.monitor import Monitor

    monitor = Monitor()
    scored = {"by_checks/correctness": 0.5, "by_judge/correctness": 0.5, "format_gate_failed": 0.0}
    metrics, warning = monitor.step([group("a", ["fix: a", "fix: b"], **scored), group("b", ["fix: c", "fix: d"], **scored)])
    assert warning is None and metrics["monitor/gap/correctness"] == 0.0 and metrics["monitor/length"] == 6.0
    gamed = {**scored, "by_checks/correctness": 1.0, "by_judge/correctness": 0.6}  # the checks climb, the judge does not
    metrics, warning = monitor.step([group("a", ["fix: a", "fix: b"], **gamed), group("b", ["fix: c", "fix: d"], **gamed)])
    assert metrics["monitor/gap_change/correctness"] == pytest.approx(-0.4)
    assert warning and "correctness moved -0.40" in warning and "identical" not in warning
    metrics, warning = monitor.step([group("a", ["chore: update files"] * 2, **scored), group("b", ["chore: update files"] * 2, **scored)])
    assert metrics["monitor/collapse"] == 1.0 and metrics["monitor/length_change"] == pytest.approx(len("chore: update files") / 6 - 1)
    assert "100% of outputs are identical across different tasks" in warning


def test_a_resumed_run_keeps_its_first_step_as_the_baseline(tmp_path):
    from skill_rl.training.monitor import Monitor

    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps({"step": 1, "train/monitor/length": 10.0, "train/monitor/gap/procedure": 0.1}) + "\n"
                       + json.dumps({"step": 2, "train/monitor/length": 30.0, "train/monitor/gap/procedure": 0.5}) + "\n")
    monitor = Monitor.resume(history)
    assert monitor.first_length == 10.0 and monitor.first_gap == {"procedure": 0.1}
    metrics, _ = monitor.step([group("a", ["x" * 20, "y" * 20], **{"by_checks/procedure": 0.0, "by_judge/procedure": 0.1})])
    assert metrics["monitor/length_change"] == 1.0 and metrics["monitor/gap_change/procedure"] == pytest.approx(0.0)


def test_a_policy_that_starts_answering_one_constant_message_is_flagged(tmp_path, monkeypatch, capsys):
    skills = small_git_commit(tmp_path, train=4, val=1)
    calls, per_task = itertools.count(), collections.Counter()

    def policy(request):  # step 1: a message for each diff, two wordings; from then on one message for everything
        limit = re.search(r"\+LIMIT = (\d+)", request["messages"][-1]["content"])[1]
        per_task[limit] += 1
        if next(calls) >= 4:
            return "chore: update project files"
        return f"fix(app): raise LIMIT to {limit}" + ("\n\nUploads over the old limit failed." if per_task[limit] % 2 else "")

    with FakeOpenAI(policy_fn=policy) as server:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        monkeypatch.delenv("WANDB_API_KEY", raising=False)
        code = train_skill.main([
            "--skills-dir", str(skills), "--skill", "git-commit", "--backend", "skill_rl.dryrun:DryRunBackend",
            "--judge-base-url", server.url, "--judge-api-key", "sk-test", "--steps", "2", "--groups-per-step", "2",
            "--rollouts-per-group", "2", "--eval-every", "100"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = {int(m[1]): m[0] for m in re.finditer(r"^step +(\d+) \|.*$", out, re.M)}
    assert "warning" not in lines[1]
    assert "warning: reward hacking? 100% of outputs are identical across different tasks" in lines[2]
    history = [json.loads(line) for line in next((tmp_path / ".art").rglob("history.jsonl")).read_text().splitlines()]
    train = {row["step"]: row for row in history if "train/monitor/collapse" in row}
    assert train[1]["train/monitor/collapse"] == 0.0 and train[2]["train/monitor/collapse"] == 1.0
    assert train[1]["train/monitor/judge_skipped"] == 0 and train[2]["train/monitor/judge_skipped"] == 2
    assert "train/monitor/gap/correctness" in train[1] and train[2]["train/monitor/length_change"] < 0
