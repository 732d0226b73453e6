"""The reward-hacking monitor: its figures on real ART groups, and a run whose policy collapses to one message."""

import collections
import itertools
import json
import re

import pytest
from conftest import DRY_RUN, SMALL_GROUPS, small_git_commit
from openai_server import FakeOpenAI

import train_skill

# the monitor reads ART's groups: ART (and so torch) is imported inside the tests, never while collecting
pytestmark = pytest.mark.slow


def group(task_id, outputs, **metrics):
    import art

    return art.TrajectoryGroup(
        art.Trajectory(
            messages_and_choices=[{"role": "user", "content": task_id}, {"role": "assistant", "content": o}],
            metadata={"task_id": task_id},
            metrics=dict(metrics),
            reward=0.0,
        )
        for o in outputs
    )


def test_collapse_counts_outputs_repeated_across_tasks_not_within_one():
    from skill_rl.training.monitor import collapse

    assert collapse([group("a", ["x", "x"]), group("b", ["y", "y"])]) == 0.0
    assert collapse([group("a", ["x", "y"]), group("b", ["x", "z"])]) == 0.5
    # surrounding whitespace is no disguise
    assert collapse([group("a", ["x ", "x"]), group("b", ["x", "x"])]) == 1.0


def test_the_warning_fires_on_collapse_and_on_a_widening_judge_check_gap():
    from skill_rl.training.monitor import Monitor

    monitor = Monitor()
    scored = {"by_checks/correctness": 0.5, "by_judge/correctness": 0.5, "format_gate_failed": 0.0}
    metrics, warning = monitor.step(
        [group("a", ["fix: a", "fix: b"], **scored), group("b", ["fix: c", "fix: d"], **scored)]
    )
    assert warning is None and metrics["monitor/gap/correctness"] == 0.0 and metrics["monitor/length"] == 6.0
    # the checks climb, the judge does not
    gamed = {**scored, "by_checks/correctness": 1.0, "by_judge/correctness": 0.6}
    metrics, warning = monitor.step(
        [group("a", ["fix: a", "fix: b"], **gamed), group("b", ["fix: c", "fix: d"], **gamed)]
    )
    assert metrics["monitor/gap_change/correctness"] == pytest.approx(-0.4)
    assert warning and "correctness moved -0.40" in warning and "identical" not in warning
    metrics, warning = monitor.step(
        [group("a", ["chore: update files"] * 2, **scored), group("b", ["chore: update files"] * 2, **scored)]
    )
    assert metrics["monitor/collapse"] == 1.0 and metrics["monitor/length_change"] == pytest.approx(
        len("chore: update files") / 6 - 1
    )
    assert "100% of outputs are identical across different tasks" in warning


def test_a_resumed_run_keeps_its_first_step_as_the_baseline(tmp_path):
    from skill_rl.training.monitor import Monitor

    history = tmp_path / "history.jsonl"
    history.write_text(
        json.dumps({"step": 1, "train/monitor/length": 10.0, "train/monitor/gap/procedure": 0.1})
        + "\n"
        + json.dumps({"step": 2, "train/monitor/length": 30.0, "train/monitor/gap/procedure": 0.5})
        + "\n"
    )
    monitor = Monitor.resume(history)
    assert monitor.first_length == 10.0 and monitor.first_gap == {"procedure": 0.1}
    metrics, _ = monitor.step(
        [group("a", ["x" * 20, "y" * 20], **{"by_checks/procedure": 0.0, "by_judge/procedure": 0.1})]
    )
    assert metrics["monitor/length_change"] == 1.0 and metrics["monitor/gap_change/procedure"] == pytest.approx(0.0)


def test_a_policy_that_starts_answering_one_constant_message_is_flagged(tmp_path, monkeypatch, capsys):
    skills = small_git_commit(tmp_path, train=4, val=1)
    calls, per_task = itertools.count(), collections.Counter()

    # step 1: a message for each diff, two wordings; from then on one message for everything
    def policy(request):
        limit = re.search(r"\+LIMIT = (\d+)", request["messages"][-1]["content"])[1]
        per_task[limit] += 1
        if next(calls) >= 4:
            return "chore: update project files"
        return f"fix(app): raise LIMIT to {limit}" + (
            "\n\nUploads over the old limit failed." if per_task[limit] % 2 else ""
        )

    with FakeOpenAI(policy_fn=policy) as server:
        code = judged_run(monkeypatch, tmp_path, server, skills, "--steps", "2", *SMALL_GROUPS, "--eval-every", "100")
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


def judged_run(monkeypatch, where, server, skills, *flags) -> int:
    """A git-commit training run in this process, in `where`, on the stand-in backend, the policy and the judge at
    `server`."""
    monkeypatch.chdir(where)
    monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    judge = ("--judge-base-url", server.url, "--judge-api-key", "sk-test")
    return train_skill.main(["--skills-dir", str(skills), "--skill", "git-commit", *DRY_RUN, *judge, *flags])


def git_commit_types():
    from skill_rl.scoring import categories
    from skill_rl.skills import find_skill, load_skill, skill_dirs

    skill = load_skill(find_skill(skill_dirs(None), "git-commit"))
    return lambda outputs: categories.read_all(skill, outputs)[0]


def test_a_categorical_field_constant_across_tasks_for_three_steps_is_named_and_resumed(tmp_path):
    from skill_rl.training.monitor import CONSTANT_STEPS, Monitor

    monitor = Monitor(read=git_commit_types())
    varied = [group("a", ["feat: add x", "fix: y"]), group("b", ["docs: z", "feat: w"])]
    same = [group("a", ["feat: add x", "feat: y"]), group("b", ["feat: z", "feat(api): w"])]
    # one task answered alike: no sign of collapse
    one_task = [group("a", ["feat: add x", "feat: y"])]
    metrics, warning = monitor.step(varied)
    assert metrics["monitor/distinct/type"] == 3 and metrics["monitor/constant/type"] == 0 and warning is None
    assert monitor.step(one_task)[0]["monitor/constant/type"] == 0
    for n in range(1, CONSTANT_STEPS):
        metrics, warning = monitor.step(same)
        assert metrics["monitor/constant/type"] == n and warning is None and not monitor.collapsed
    metrics, warning = monitor.step(same)
    assert (
        "every answer's type is 'feat' across 2 different tasks, 3 steps in a row" in warning
        and monitor.collapsed == ["type"]
    )
    # it varies again: reset
    assert monitor.step(varied)[0]["monitor/constant/type"] == 0 and not monitor.collapsed

    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps({"step": 4, "train/monitor/constant/type": CONSTANT_STEPS - 1}) + "\n")
    resumed = Monitor.resume(history, git_commit_types())
    assert resumed.constant == {"type": CONSTANT_STEPS - 1} and "3 steps in a row" in resumed.step(same)[1]


def test_a_run_whose_answers_collapse_to_one_type_says_so_and_prunes_worse_checkpoints(tmp_path, monkeypatch, capsys):
    skills = small_git_commit(tmp_path, train=4, val=2)

    # always `feat`; from the second checkpoint on, a header commitlint refuses (worse on validation)
    def policy(request):
        limit = re.search(r"\+LIMIT = (\d+)", request["messages"][-1]["content"])[1]
        step = int(request["model"].rsplit("@", 1)[1])
        return f"feat(app): raise LIMIT to {limit}" if step < 2 else f"feat: Raise LIMIT to {limit}."

    with FakeOpenAI(policy_fn=policy) as server:
        code = judged_run(
            monkeypatch,
            tmp_path,
            server,
            skills,
            "--steps",
            "3",
            *SMALL_GROUPS,
            "--eval-every",
            "1",
            "--prune-collapsed",
        )
    out = capsys.readouterr().out
    assert code == 0, out
    lines = {int(m[1]): m[0] for m in re.finditer(r"^step +(\d+) \|.*$", out, re.M)}
    assert (
        "type" not in lines[2]
        and "every answer's type is 'feat' across 2 different tasks, 3 steps in a row" in lines[3]
    )
    # 2 val tasks x 2 answers
    assert re.search(r"^val +1 \| answers: type: feat 4$", out, re.M)
    assert re.search(
        r"^val +3 \| type collapsed: checkpoints 2 \(worse on validation than the best\) deleted$", out, re.M
    )
    assert "warning: the last validation's answers collapsed to one type: 'feat' in all 4 of them" in out
    history = [json.loads(line) for line in next((tmp_path / ".art").rglob("history.jsonl")).read_text().splitlines()]
    val = {row["step"]: row["val/reward"] for row in history if "val/reward" in row}
    assert val[2] < val[1] and val[3] < val[1]
