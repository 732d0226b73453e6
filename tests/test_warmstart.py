"""The warm start (--sft) offline: ART's real `TrainableModel.train_sft` over the dry-run backend's
stand-in `_train_sft`, which records every example it was given in dryrun.jsonl; a teacher, the
policy and the judge served over real HTTP by the local test server."""

import json
from pathlib import Path

import pytest
from conftest import DRY_RUN, SMALL_GROUPS, small_git_commit
from openai_server import FakeOpenAI

from skill_rl.scoring.rubric import score_offline
from skill_rl.skills import load_skill
from train_skill import main

GOOD = "fix(app): raise the limit\n\nThe old limit dropped requests."
# not a Conventional Commit: its format gate fails
BAD = "Fixed the limit."
# above the minimum reward, below it, and the best
TEACHER = ["fix: raised the limit", BAD, GOOD]


@pytest.fixture
def skills(tmp_path, monkeypatch):
    """git-commit with train tasks t0-t3 and val tasks t4-t5, every one with a reference; t1's is bad."""
    folder = small_git_commit(tmp_path, train=4, val=2)
    path = folder / "git-commit" / "tasks.jsonl"
    tasks = [json.loads(line) for line in path.read_text().splitlines()]
    for t in tasks:
        t["reference"] = BAD if t["id"] == "t1" else GOOD
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return folder


@pytest.fixture
def policy(monkeypatch):
    with FakeOpenAI(policy_fn=lambda request: "fix: raise the limit") as server:
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        yield server


def train(capsys, skills, policy, *extra):
    code = main(
        [
            "--skills-dir",
            str(skills),
            "--skill",
            "git-commit",
            *DRY_RUN,
            "--judge-base-url",
            policy.url,
            "--judge-api-key",
            "sk-test",
            "--judge-timeout",
            "2",
            *SMALL_GROUPS,
            "--eval-every",
            "100",
            # the test server's judge prefers length: the audit would refuse (test_audit.py)
            "--audit-tasks",
            "0",
            *extra,
        ]
    )
    out = capsys.readouterr()
    return code, out.out, out.err


def records(run="git-commit-qwen2.5-3b-instruct"):
    log = Path(".art/skill-rl/models", run, "dryrun.jsonl")
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def sft_examples(record):
    """(task_id, output) of every example one stand-in SFT call received, checking each chat's shape."""
    skill = load_skill(Path("skills/git-commit"))
    out = []
    for ex in record["sft"]["examples"]:
        system, user, assistant = ex["messages"]
        task = skill.task(ex["metadata"]["task_id"])
        assert (system["role"], system["content"]) == ("system", skill.body)
        assert (user["role"], user["content"]) == ("user", task.input)
        assert assistant["role"] == "assistant"
        out.append((task.id, assistant["content"]))
    return sorted(out)


@pytest.mark.slow
def test_references_and_a_file_reach_sft_deduplicated_filtered_train_only_and_resume_never_repeats_it(
    capsys, skills, policy
):
    alt = "fix(app): raise the request limit\n\nRequests over the old limit were dropped."
    extra = Path("extra.jsonl")
    extra.write_text(
        "".join(
            json.dumps(x) + "\n"
            for x in [
                # the reference again: one example, not two
                {"task_id": "t0", "output": GOOD + "\n"},
                {"task_id": "t2", "output": alt},
                {"task_id": "t2", "output": alt},
            ]
        )
    )
    sft = ["--sft", "--sft-from", "references", "--sft-from", str(extra), "--sft-epochs", "2"]
    code, out, err = train(capsys, skills, policy, *sft, "--steps", "1")
    assert code == 0, err[-2000:]

    first, second, rl = records()
    # t1's reference is below the minimum
    expected = sorted([("t0", GOOD), ("t2", GOOD), ("t2", alt), ("t3", GOOD)])
    # no val task (t4, t5), though they have references
    assert sft_examples(first) == sft_examples(second) == expected
    assert [first["step"], second["step"], rl["step"]] == [1, 2, 3]
    # ART's default and 'auto'
    assert first["sft"]["learning_rate"] == 5e-5 and first["sft"]["batch_size"] == 2
    assert "2 duplicates" in out and "1 below the minimum reward" in out
    assert "sft  1/2 | step 1 | examples 4 | batches 2 |" in out and "sft  2/2 | step 2 |" in out
    # validated once after the warm start
    assert "starting at step 2 of 3" in out and "val     2 | reward" in out
    kept = [
        json.loads(line)
        for line in Path(".art/skill-rl/models/git-commit-qwen2.5-3b-instruct/warmstart.jsonl").read_text().splitlines()
    ]
    assert sorted((k["task_id"], k["output"]) for k in kept) == expected
    assert all(k["reward"] >= 0.8 and k["judged"] for k in kept)
    assert next(k["source"] for k in kept if k["output"] == GOOD and k["task_id"] == "t0") == "reference+file"
    history = [
        json.loads(line)
        for line in Path(".art/skill-rl/models/git-commit-qwen2.5-3b-instruct/history.jsonl").read_text().splitlines()
    ]
    # ART's own names
    assert [h["sft/gradient_step"] for h in history if "sft/gradient_step" in h] == [1.0, 2.0, 1.0, 2.0]
    assert [h["step"] for h in history if "loss/learning_rate" in h] == [1, 2]

    code, out, err = train(capsys, skills, policy, *sft, "--steps", "2")
    assert code == 0, err[-2000:]
    assert "warm start: done earlier in this run" in out and "starting at step 3 of 4" in out
    assert [("sft" in r, r["step"]) for r in records()] == [(True, 1), (True, 2), (False, 3), (False, 4)]
    # without --sft: RL steps still follow the warm start's
    code, out, err = train(capsys, skills, policy, "--steps", "3")
    assert code == 0 and "starting at step 4 of 5" in out and len(records()) == 5


def teacher_answers(skill):
    """Per task, in turn: a passable message, a non-commit, the best; task t3's input drops the connection."""
    seen: dict[str, int] = {}
    texts = TEACHER

    def answer(request):
        user = request["messages"][1]["content"]
        if user == skill.task("t3").input:
            raise ConnectionAbortedError("the teacher hangs up on this task")
        seen[user] = seen.get(user, -1) + 1
        return texts[seen[user] % len(texts)]

    return answer


@pytest.mark.slow
def test_teacher_outputs_are_scored_best_per_task_kept_failures_reported_and_the_file_reuses_them(
    capsys, skills, policy, monkeypatch
):
    skill = load_skill(skills / "git-commit")
    monkeypatch.setenv("TEACHER_API_KEY", "sk-planted-teacher-key")
    with FakeOpenAI(policy_fn=teacher_answers(skill)) as teacher:
        # the first call fails once and is retried
        teacher.policy_faults.append("500")
        code, out, err = train(
            capsys,
            skills,
            policy,
            "--sft",
            "--sft-from",
            "teacher",
            "--teacher",
            f"big=gpt@{teacher.url}",
            "--teacher-samples",
            "3",
            "--judge",
            "none",
            "--steps",
            "1",
        )
        asked = {r["messages"][1]["content"] for r in teacher.requests}
        calls = len(teacher.requests)
    # it finished, and says that the teacher failed on a task
    assert code == 1, err[-2000:]
    assert "teacher big: t3: APIConnectionError" in err and "1 teacher task failure(s)" in out
    # every train task, never a val task
    assert asked == {t.input for t in skill.split("train")}
    examples = sft_examples(records()[0])
    # the tasks the teacher served are used, with their best output only
    for task_id in ("t0", "t1", "t2"):
        rewards = [s.reward for s in score_offline(skill, skill.task(task_id), TEACHER)]
        assert [o for t, o in examples if t == task_id] == [TEACHER[rewards.index(max(rewards))]]
    assert not any(t == "t3" for t, _ in examples)
    kept = Path(".art/skill-rl/models/git-commit-qwen2.5-3b-instruct/warmstart.jsonl")
    assert all(json.loads(line)["source"] == "teacher" for line in kept.read_text().splitlines())
    assert not any(
        "sk-planted-teacher-key" in text
        for text in [out, err, *(f.read_text(errors="replace") for f in Path(".art").rglob("*") if f.is_file())]
    )

    code, out, err = train(
        capsys,
        skills,
        policy,
        "--sft",
        "--sft-from",
        str(kept),
        "--judge",
        "none",
        "--steps",
        "0",
        "--run-name",
        "reuse",
    )
    assert code == 0, err[-2000:]
    assert sft_examples(records("reuse")[0]) == examples and len(teacher.requests) == calls


def test_bad_sft_file_lines_are_reported_by_line_and_nothing_runs(capsys, skills, policy):
    bad = Path("bad.jsonl")
    bad.write_text(
        "\n".join(
            [
                "not json",
                json.dumps({"task_id": "t0"}),
                json.dumps({"task_id": "nope", "output": "fix: x"}),
                json.dumps({"task_id": "t4", "output": "fix: x"}),
                json.dumps({"task_id": "t0", "output": "fix: x", "ouput": "fix: y"}),
                json.dumps({"task_id": "t0", "output": "  "}),
                json.dumps(["t0", "fix: x"]),
                json.dumps({"task_id": "t0", "output": "fix: fine"}),
            ]
        )
        + "\n"
    )
    with FakeOpenAI() as teacher:
        code, out, err = train(
            capsys,
            skills,
            policy,
            "--sft",
            "--sft-from",
            str(bad),
            "--sft-from",
            "teacher",
            "--teacher",
            f"t=m@{teacher.url}",
            "--steps",
            "1",
        )
        assert teacher.requests == [] and policy.requests == []
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == [f"bad.jsonl:{n}" for n in range(1, 8)]
    assert "field 'output' is required" in lines[1] and "'nope' is not in" in lines[2]
    assert "'t4' is a val task; only train tasks may reach SFT" in lines[3]
    assert "field 'ouput' is not allowed" in lines[4] and "field 'output'" in lines[5] and "got list" in lines[6]
    assert not Path(".art").exists()


def test_an_sft_file_line_giving_a_key_twice_is_refused_as_tasks_jsonl_refuses_it(capsys, skills, policy):
    twice = Path("twice.jsonl")
    twice.write_text(
        json.dumps({"task_id": "t0", "output": GOOD})
        + "\n"
        + '{"task_id": "t2", "output": "fix: a", "output": "fix: b"}\n'
    )
    code, out, err = train(capsys, skills, policy, "--sft", "--sft-from", str(twice), "--steps", "1")
    assert code == 2 and err == "twice.jsonl:2: field 'output' is given twice\n" and policy.requests == []
    assert not Path(".art").exists()
    tasks = skills / "git-commit" / "tasks.jsonl"
    tasks.write_text(tasks.read_text() + '{"id": "t9", "input": "diff", "id": "t10"}\n')
    code, out, err = train(capsys, skills, policy, "--steps", "1")
    n = len(tasks.read_text().splitlines())
    assert code == 2 and f"tasks.jsonl:{n}: field 'id' is given twice" in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--no-sft", "--sft-from", "references"], "--sft-from and --teacher apply only with --sft"),
        (["--sft", "--sft-from", "teacher"], "--sft-from teacher needs --teacher SPEC"),
        (["--sft", "--teacher", "gpt"], "--teacher is used only with --sft-from teacher"),
        (["--sft", "--backend", "tinker"], "Tinker backend cannot fine-tune"),
    ],
)
def test_warm_start_flags_that_cannot_work_exit_2_before_anything_runs(capsys, skills, flags, message):
    code = main(["--skills-dir", str(skills), "--skill", "git-commit", "--judge", "none", *flags])
    assert code == 2 and message in capsys.readouterr().err and not Path(".art").exists()


def test_warm_start_flag_problems_are_reported_even_where_there_is_no_way_to_train(capsys, skills, monkeypatch):
    from skill_rl import cpu

    if Path("/proc/driver/nvidia").exists():
        pytest.skip("this machine has a GPU")
    # no [cpu] extra, no GPU, no key: --backend auto has nothing
    monkeypatch.setattr(cpu, "available", lambda: False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    for key in ("WANDB_API_KEY", "TINKER_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    code = main(
        ["--skills-dir", str(skills), "--skill", "git-commit", "--judge", "none", "--sft", "--sft-from", "teacher"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--sft-from teacher needs --teacher SPEC" in err and "no way to train" not in err
    code = main(["--skills-dir", str(skills), "--skill", "git-commit", "--judge", "none", "--sft"])
    assert code == 2 and "no way to train was found" in capsys.readouterr().err and not Path(".art").exists()


def test_references_source_without_references_exits_2(capsys, tmp_path, monkeypatch):
    folder = small_git_commit(tmp_path / "plain", train=2, val=1)
    monkeypatch.chdir(tmp_path)
    assert main(["--skills-dir", str(folder), "--skill", "git-commit", "--judge", "none", "--sft"]) == 2
    assert "--sft-from references: no train task has a 'reference'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--teacher-min-reward", "1.5"),
        ("--teacher-samples", "0"),
        ("--sft-epochs", "-1"),
        ("--sft-batch-size", "big"),
        ("--sft-learning-rate", "0"),
    ],
)
def test_warm_start_numbers_out_of_range_are_usage_errors(capsys, skills, flag, value):
    with pytest.raises(SystemExit) as stop:
        main(["--skill", "git-commit", "--sft", flag, value])
    assert stop.value.code == 2 and f"argument {flag}:" in capsys.readouterr().err


@pytest.mark.slow
def test_a_warm_start_goes_only_before_rl_and_one_stopped_between_epochs_resumes_at_the_next(capsys, skills, policy):
    code, out, err = train(capsys, skills, policy, "--steps", "1", "--run-name", "rl-first", "--judge", "none")
    assert code == 0, err[-2000:]
    code, out, err = train(capsys, skills, policy, "--sft", "--steps", "2", "--run-name", "rl-first", "--judge", "none")
    assert code == 2 and "already has 1 training step(s); a warm start goes before the first RL step" in err
    assert len(records("rl-first")) == 1

    # a warm start alone
    code, out, err = train(capsys, skills, policy, "--sft", "--steps", "0", "--judge", "none")
    assert code == 0 and "starting at step 1 of 1" in out, err[-2000:]
    # The state a kill leaves between epoch 1's checkpoint and its record, had the run asked for 3 epochs:
    state_path = Path(".art/skill-rl/models/git-commit-qwen2.5-3b-instruct/state.json")
    state = json.loads(state_path.read_text())
    state["skill_rl_warm_start"].update(epochs=3, epochs_done=0, step=0)
    state_path.write_text(json.dumps(state))
    code, out, err = train(capsys, skills, policy, "--steps", "1", "--judge", "none")
    assert code == 2 and "warm start stopped after epoch 1 of 3: run the same command with --sft" in err
    code, out, err = train(capsys, skills, policy, "--sft", "--steps", "1", "--judge", "none")
    assert code == 0, err[-2000:]
    # nothing collected again
    assert "resuming at epoch 2 of 3" in out and "warm start: candidates" not in out
    steps = records()
    assert [("sft" in r, r["step"]) for r in steps] == [(True, 1), (True, 2), (True, 3), (False, 4)]
    assert sft_examples(steps[0]) == sft_examples(steps[1]) == sft_examples(steps[2])
    assert json.loads(state_path.read_text())["skill_rl_warm_start"]["epochs_done"] == 3


# the training loop loads ART (torch)
@pytest.mark.slow
def test_an_internalized_warm_start_trains_on_every_example_with_the_skill_and_with_the_stub(capsys, skills, policy):
    code, out, err = train(capsys, skills, policy, "--sft", "--steps", "1", "--internalize")
    assert code == 0, err[-2000:]
    skill = load_skill(Path("skills/git-commit"))
    (sft,) = [r for r in records() if "sft" in r]
    chats = [ex["messages"] for ex in sft["sft"]["examples"]]
    kept = [json.loads(line) for line in next(Path(".art").rglob("warmstart.jsonl")).read_text().splitlines()]
    assert len(chats) == 2 * len(kept) >= 4
    # each kept example once under each prompt
    for prompt in (skill.body, "Follow the git-commit skill."):
        assert sorted(c[1]["content"] for c in chats if c[0]["content"] == prompt) == sorted(
            skill.task(r["task_id"]).input for r in kept
        )
    # RL step 1 of 1: the schedule's last step, at probability 0
    (step,) = [r for r in records() if "sft" not in r]
    assert step["system"] == ["Follow the git-commit skill."]
