"""Faults and bad input at every entry point: the command finishes, counts what failed, loses nothing,
and never prints a traceback or a key. docs/reliability.md lists what is tried here."""

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import skills_ref
from conftest import SMALL_DIFF as DIFF
from conftest import held_at, launch, main_in_process, policy_env, skill_folder, small_git_commit, training, wait_for
from openai_server import FakeOpenAI, candidates

from skill_rl.skills import load_skill
from train_skill import main

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-planted-SECRET-9f8e7d"
FAST_JUDGE = ["--judge-api-key", KEY, "--judge-timeout", "1", "--judge-attempts", "2"]


def lines_of(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


# ------------------------------------------------------------------ the judge misbehaves (--score)

# fault -> does a judge that ALWAYS answers this way still give judged scores?
JUDGE_FAULTS = {
    "500": False,
    "429": False,
    "429-retry-after": False,
    "refused": False,
    "timeout": False,
    "truncated": False,
    "non-json": False,
    "wrong-count": False,
    "fenced": True,
    "out-of-range": True,
    "string-scores": True,
}


# the judge is ART's RULER: importing it imports torch
@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(JUDGE_FAULTS))
def test_score_under_a_judge_fault(tmp_path, capsys, fault):
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(
            json.dumps({"input": DIFF.format(n=i), "outputs": ["fix: raise the limit", "Raised it."]}) + "\n"
            for i in range(2)
        )
    )
    out = tmp_path / "out.jsonl"
    score = [
        "--skill",
        "git-commit",
        "--score",
        str(src),
        "--judge-base-url",
        "",
        *FAST_JUDGE,
        "--out",
        str(out),
        # each run asks the judge: none is answered from the cache
        "--no-judge-cache",
    ]
    with FakeOpenAI(fault_sleep=1.5) as server:
        score[score.index("--judge-base-url") + 1] = server.url
        assert main(score) == 0
        baseline = [r["reward"] for r in lines_of(out)]
        # once: retried (or read as it is) and scored as if it had never happened
        server.judge_faults.append(fault)
        assert main(score) == 0
        assert all(r["judged"] for r in lines_of(out))
        # that answer is used, clamped (test_judge.py)
        if fault != "out-of-range":
            assert [r["reward"] for r in lines_of(out)] == baseline
        # always: the groups fall back to checks only, and say so
        server.always_fail_judge = fault
        asked = len(server.requests)
        code = main(score)
        asked = len(server.requests) - asked
    err = capsys.readouterr().err
    records = lines_of(out)
    assert len(records) == 4 and all(0.0 <= r["reward"] <= 1.0 for r in records)
    if JUDGE_FAULTS[fault]:
        assert code == 0 and all(r["judged"] for r in records)
        # 2 lines x 2 judged dimensions, each asked once
        assert asked == 2 * 2
    else:
        assert code == 1 and not any(r["judged"] for r in records)
        assert "2 judge failure(s)" in err and "judge failed, scored by checks only" in err
        # retries are bounded in count: 2 lines x 2 dimensions x --judge-attempts 2 (RULER itself asks once more
        # when an answer scores the wrong number of candidates)
        assert asked == 2 * 2 * 2 * (2 if fault == "wrong-count" else 1), asked
    assert "Traceback" not in err and KEY not in err


# ------------------------------------------------------------------ a model misbehaves (--eval)

# policy fault -> is the model's output still scored (True), or is the task a failure for that model?
POLICY_FAULTS = {
    "500": False,
    "429": False,
    "refused": False,
    "timeout": False,
    "truncated": False,
    "non-json": False,
    "empty": True,
    "length": True,
}


@pytest.mark.parametrize("fault", sorted(POLICY_FAULTS))
def test_eval_under_a_policy_fault(tmp_path, capsys, fault):
    good = FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit")
    bad = FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit to two", fault_sleep=6)
    bad.always_fail_policy = fault
    out = tmp_path / "eval"
    with good, bad:
        code = main(
            [
                "--skill",
                "git-commit",
                "--eval",
                "--model",
                f"good=a@{good.url}",
                "--model",
                f"bad=b@{bad.url}",
                # 1 s timed the good one out under load
                "--judge",
                "none",
                "--limit",
                "2",
                "--request-timeout",
                "4",
                "--out",
                str(out),
            ]
        )
    rows = {r["model"]: r for r in json.loads((out / "results.json").read_text())["models"]}
    stdout, stderr = capsys.readouterr()
    assert rows["good"]["n"] == 2 and rows["good"]["failures"] == 0, stderr
    if POLICY_FAULTS[fault]:
        assert code == 0 and rows["bad"]["n"] == 2 and rows["bad"]["failures"] == 0
        assert rows["bad"]["truncated"] == (2 if fault == "length" else 0)
        assert rows["bad"]["format"] < rows["good"]["format"]
    else:
        assert code == 1 and rows["bad"]["n"] == 0 and rows["bad"]["failures"] == 2
        # failures are reported on stderr
        assert "bad: " in stderr
    assert "Traceback" not in stdout + stderr


# ------------------------------------------------------------------ training under faults


def train_cmd(skills, server, *extra):
    return training(
        skills,
        *("--judge-base-url", server.url, *FAST_JUDGE, "--groups-per-step", "2", "--rollouts-per-group", "4"),
        *("--request-timeout", "10", *extra),
    )


def train_env(server):
    return policy_env(server, SKILL_RL_POLICY_API_KEY=KEY)


@pytest.fixture
def small_skill(tmp_path):
    return small_git_commit(tmp_path, train=8, val=1)


def answers():
    texts = iter(["fix: raise the limit", "Raised it.", "fix(app): raise the limit to a sane value"] * 10**5)
    return lambda request: next(texts)


# in process, but the training loop loads ART (and so torch)
@pytest.mark.slow
def test_training_counts_rollout_errors_under_the_budget_and_stops_cleanly_over_it(tmp_path, small_skill, monkeypatch):
    # main() with its output captured
    from test_mining import run

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("SKILL_RL_POLICY_API_KEY", KEY)
    with FakeOpenAI(policy_fn=answers()) as server:
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        # the command's flags, without the interpreter and the script
        flags = train_cmd(small_skill, server)[2:]
        # one failed rollout (not retried), one empty answer, of 8
        server.policy_faults.extend(["non-json", "empty"])
        code, out, err = run(*flags, "--steps", "1", "--max-exceptions", "0.2")
        assert code == 1, err[-1500:]
        assert "rollout errors 1 |" in out and "this run: steps 1," in out
        server.always_fail_policy = "500"
        over_code, over_out, over_err = run(*flags, "--steps", "2")
    assert over_code == 1
    assert "more rollouts failed than --max-exceptions 0.1 allows" in over_err and "Traceback" not in over_err
    steps = lines_of(next((tmp_path / ".art").rglob("dryrun.jsonl")))
    # nothing was trained on the failed batch
    assert [s["step"] for s in steps] == [1]
    assert KEY not in out + err + over_out + over_err


@pytest.mark.slow
def test_training_killed_mid_step_resumes_at_that_step_without_training_twice(
    tmp_path, small_skill, monkeypatch, capfd
):
    # step 2's rollouts use the checkpoint of step 1
    policy = held_at("skill-git-commit@1", answers())
    with FakeOpenAI(policy_fn=policy) as server:
        proc = launch(train_cmd(small_skill, server, "--steps", "3"), tmp_path, train_env(server))
        assert policy.reached.wait(300), "step 2 never started"
        # during step 2's rollouts
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        policy.release.set()
        log = next((tmp_path / ".art").rglob("dryrun.jsonl"))
        assert [s["step"] for s in lines_of(log)] == [1]
        # the same command resumes (in this process, where ART is loaded already): the killed process's lock is no
        # obstacle, and step 2 is done once
        for name, value in train_env(server).items():
            monkeypatch.setenv(name, value)
        # without the interpreter and the script
        flags = train_cmd(small_skill, server, "--steps", "3")[2:]
        monkeypatch.chdir(tmp_path)
        again = main_in_process(capfd, *flags)
        assert again.returncode == 0 and "starting at step 1 of 3" in again.stdout, again.stderr[-1500:]
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        monkeypatch.chdir(fresh)
        assert main_in_process(capfd, *flags).returncode == 0
    resumed, uninterrupted = lines_of(log), lines_of(next((fresh / ".art").rglob("dryrun.jsonl")))
    assert [s["step"] for s in resumed] == [1, 2, 3]
    # the batches an uninterrupted run sees; step 1's came from another process (another hash seed)
    assert [s["task_ids"] for s in resumed] == [s["task_ids"] for s in uninterrupted]


# ------------------------------------------------------------------ --score and --eval killed half way


@pytest.mark.slow
def test_score_killed_half_way_keeps_finished_groups_and_resume_does_only_the_rest(tmp_path, monkeypatch, capfd):
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(
            json.dumps({"input": DIFF.format(n=i), "outputs": ["fix: raise it", f"fix: raise the limit {i}"]}) + "\n"
            for i in range(24)
        )
    )
    # the output that names its line
    lines_of_output = {f"fix: raise the limit {i}": i + 1 for i in range(24)}
    out = tmp_path / "out.jsonl"
    cmd = [
        sys.executable,
        str(ROOT / "train_skill.py"),
        "--skill",
        "git-commit",
        "--score",
        str(src),
        "--out",
        str(out),
    ]
    with FakeOpenAI(judge_latency=0.5) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        judged = [
            *cmd,
            "--judge-base-url",
            server.url,
            "--judge-api-key",
            KEY,
            # else the resume reads the killed process's last answers from the cache
            "--no-judge-cache",
        ]
        proc = subprocess.Popen(judged, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for(lambda: out.exists() and out.read_text().count("\n") >= 6)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        before = out.read_text().splitlines()
        # valid JSONL, nothing torn
        assert 6 <= len(before) < 48 and all(json.loads(line) for line in before)
        # every finished line's judgements are in; later ones are the resume's (or answers to requests the killed
        # process had in flight, which can only be for lines it did not finish)
        seen = len(server.judge_prompts)
        monkeypatch.chdir(tmp_path)
        # in this process, where ART is loaded already
        run = main_in_process(capfd, *judged[2:], "--resume")
        assert run.returncode == 0, run.stderr[-1500:]
        done = {json.loads(line)["line"] for line in before}
        judged_after = {
            lines_of_output[t] for p in server.judge_prompts[seen:] for t in candidates(p) if t in lines_of_output
        }
        # finished lines were not judged again, the others were
        assert judged_after == set(range(1, 25)) - done
    records = lines_of(out)
    assert sorted((r["line"], r["index"]) for r in records) == [(n, i) for n in range(1, 25) for i in range(2)]


def test_score_resume_drops_a_torn_line_and_a_half_written_group(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(json.dumps({"input": DIFF.format(n=i), "outputs": ["fix: a", "fix: b"]}) + "\n" for i in range(3))
    )
    out = tmp_path / "out.jsonl"
    assert main(["--skill", "git-commit", "--score", str(src), "--judge", "none", "--out", str(out)]) == 0
    full = out.read_text().splitlines()
    # line 2 has one of two records; a torn line follows
    out.write_text("\n".join(full[:3]) + "\n" + full[3][:20])
    assert main(["--skill", "git-commit", "--score", str(src), "--judge", "none", "--out", str(out), "--resume"]) == 0
    assert sorted(out.read_text().splitlines()) == sorted(full)


@pytest.mark.slow
def test_eval_killed_half_way_resumes_without_redoing_finished_tasks(tmp_path, monkeypatch, capfd):
    out = tmp_path / "eval"
    with FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit", policy_latency=0.3) as server:
        cmd = [
            sys.executable,
            str(ROOT / "train_skill.py"),
            "--skill",
            "git-commit",
            "--eval",
            "--model",
            f"m=a@{server.url}",
            "--judge",
            "none",
            "--concurrency",
            "2",
            "--out",
            str(out),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        log = out / "records.jsonl"
        wait_for(lambda: log.exists() and log.read_text().count("\n") >= 4)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        done = {r["task_id"] for r in lines_of(log)}
        # later requests are the resume's (or ones the killed process had in flight)
        seen = len(server.requests)
        monkeypatch.chdir(tmp_path)
        run = main_in_process(capfd, *cmd[2:], "--resume")
        assert run.returncode == 0, run.stderr[-1500:]
        task_of = {t.input: t.id for t in load_skill(ROOT / "skills/git-commit").tasks}
        asked_after = {task_of[r["messages"][-1]["content"]] for r in server.requests[seen:]}
        # finished tasks were not asked again
        assert asked_after == {r["task_id"] for r in lines_of(log)} - done
    records = lines_of(log)
    assert sorted(r["task_id"] for r in records) == sorted({r["task_id"] for r in records}) and len(records) == 24
    assert json.loads((out / "results.json").read_text())["models"][0]["n"] == 24


# ------------------------------------------------------------------ malformed files, fuzzed

GOOD_MD = (ROOT / "tests" / "test_skills.py").read_text().split('GOOD_MD = """', 1)[1].split('"""', 1)[0]
GOOD_TASKS = '{"id": "a", "input": "What is 2+2?"}\n{"id": "b", "input": "Capital of France?", "split": "val"}\n'


def variants():
    """(case, SKILL.md bytes, tasks.jsonl bytes, must_fail)."""
    rng = random.Random(7)
    md, tasks = GOOD_MD.encode(), GOOD_TASKS.encode()
    for _ in range(45):
        cut = rng.randrange(len(md))
        yield f"SKILL.md cut at {cut}", md[:cut], tasks, True if cut < md.index(b"## Output Format") + 17 else None
    for _ in range(40):
        cut = rng.randrange(1, len(tasks) - 1)
        yield f"tasks.jsonl cut at {cut}", md, tasks[:cut], bool(tasks[:cut].rsplit(b"\n", 1)[-1].strip())
    for _ in range(40):
        b = bytearray(md)
        k = rng.randrange(len(b))
        b[k] ^= 1 << rng.randrange(8)
        yield f"SKILL.md byte {k} flipped", bytes(b), tasks, None
    for _ in range(40):
        b = bytearray(tasks)
        k = rng.randrange(len(b))
        b[k] ^= 1 << rng.randrange(8)
        yield f"tasks.jsonl byte {k} flipped", md, bytes(b), None
    for field, value in [
        ("id", 1),
        ("id", None),
        ("id", ["a"]),
        ("id", {"a": 1}),
        ("id", " "),
        ("input", 4),
        ("input", ["x"]),
        ("input", None),
        ("split", 1),
        ("split", True),
        ("split", "TRAIN"),
        ("reference", 3),
        ("expect", {"type": "fix"}),
        ("expect", [1, 2]),
    ]:
        yield f"tasks field {field}={value!r}", md, json.dumps({"id": "a", "input": "x", field: value}).encode(), True
    for key, value in [
        ("name", "123"),
        ("name", "[a, b]"),
        ("name", "Demo"),
        ("name", "-demo"),
        ("name", "de--mo"),
        ("description", "''"),
        ("description", "[1]"),
        ("description", "has <tags>"),
        ("metadata", "[1, 2]"),
        ("metadata", "{a: 1}"),
        ("metadata", "null"),
        ("license", "[MIT]"),
        ("compatibility", "''"),
    ]:
        fields = {"name": "demo", "description": "Answer a question in one line.", key: value}
        front = "".join(f"{k}: {v}\n" for k, v in fields.items())
        yield f"frontmatter {key}: {value}", f"---\n{front}---\n{GOOD_MD.split('---', 2)[2]}".encode(), tasks, True
    yield "huge description", md.replace(b"Answer a question in one line.", b"d" * 2_000_000), tasks, True
    yield "huge task line", md, json.dumps({"id": "a", "input": "x" * 1_100_000}).encode(), True
    yield "huge but valid task", md, json.dumps({"id": "a", "input": "x" * 200_000}).encode(), False
    yield (
        "deeply nested task",
        md,
        b'{"id": "a", "input": "x", "expect": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        True,
    )
    yield (
        "deeply nested YAML",
        md.replace(b"metadata:", b"license: " + b"[" * 20_000 + b"]" * 20_000 + b"\nmetadata:"),
        tasks,
        True,
    )
    yield (
        "deeply nested JSON object",
        md,
        b'{"id": "a", "input": "x", "reference": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}",
        True,
    )
    for prefix in (b"\xef\xbb\xbf",):
        # the reference validator refuses it
        yield "BOM on SKILL.md", prefix + md, tasks, True
        yield "BOM on tasks.jsonl", md, prefix + tasks, False
        yield "BOM on a malformed tasks.jsonl", md, prefix + b'{"id": 1}\n', True
    yield "CRLF SKILL.md", md.replace(b"\n", b"\r\n"), tasks, False
    yield "CRLF tasks.jsonl", md, tasks.replace(b"\n", b"\r\n"), False
    yield "CRLF and a bad split", md, tasks.replace(b"\n", b"\r\n").replace(b'"val"', b'"dev"'), True
    for dup in (b'{"id": "a", "id": "b", "input": "x"}', b'{"id": "a", "input": "x", "input": "y"}'):
        yield "duplicate JSON key", md, dup, True
    yield "duplicate YAML key", md.replace(b"description:", b"description: one\ndescription:"), tasks, True
    yield "empty SKILL.md", b"", tasks, True
    yield "empty tasks.jsonl", md, b"", True
    yield "only blank lines", md, b"\n\n  \n", True
    yield "binary SKILL.md", bytes(range(256)) * 4, tasks, True
    yield "NUL bytes in tasks", md, b"\x00" * 64, True
    yield "a JSON array line", md, b'[{"id": "a", "input": "x"}]', True
    yield "a JSON string line", md, b'"just text"', True


CASES = list(variants())


# a hang guard: a malformed file that makes --check loop for ever
@pytest.mark.timeout(60)
@pytest.mark.parametrize("case,md,tasks,must_fail", CASES, ids=[c[0] for c in CASES])
def test_a_malformed_skill_never_crashes_or_hangs(tmp_path, capsys, monkeypatch, case, md, tasks, must_fail):
    monkeypatch.chdir(tmp_path)
    folder = skill_folder(tmp_path, md=md, tasks=tasks)
    code = main(["--skills-dir", str(tmp_path), "--skill", "demo", "--check"])
    err = capsys.readouterr().err
    assert code in (0, 2)
    # never accept what the Agent Skills reference validator refuses
    if code == 0:
        assert skills_ref.validate(folder) == [], case
    if must_fail is not None:
        assert code == (2 if must_fail else 0), err
    if code == 2:
        lines = err.strip().splitlines()
        assert lines and all(line.startswith(("demo/SKILL.md", "demo/tasks.jsonl")) for line in lines), err
        # huge inputs are summarised, not echoed
        assert all(len(line) < 600 for line in lines)


# ------------------------------------------------------------------ oversized inputs


def test_a_task_too_long_for_the_context_is_skipped_up_front_and_named(tmp_path, capsys):
    folder = small_git_commit(tmp_path, train=2, val=2) / "git-commit"
    with open(folder / "tasks.jsonl", "a") as f:
        f.write(json.dumps({"id": "huge", "input": DIFF.format(n=1) + "+x = 1\n" * 20_000, "split": "val"}) + "\n")
    with FakeOpenAI(policy_fn=lambda r: "fix: raise the limit") as server:
        code = main(
            [
                "--skills-dir",
                str(folder.parent),
                "--skill",
                "git-commit",
                "--eval",
                "--model",
                f"m=a@{server.url}",
                "--judge",
                "none",
                "--context-tokens",
                "32768",
                "--out",
                str(tmp_path / "eval"),
            ]
        )
        sizes = [sum(len(m["content"]) for m in r["messages"]) for r in server.requests]
    out = capsys.readouterr().err
    assert code == 0
    assert "skipping 1 task(s) longer than --context-tokens 32768 minus --max-tokens 1024" in out and ": huge" in out
    # the huge task never reached the model
    assert len(sizes) == 2 and max(sizes) < 10_000
