"""Hostile warm-start inputs: a --sft-from file or a teacher that quotes the process's own key,
--sft-from files without bounds, and a --teacher endpoint without a scheme."""

import json
from pathlib import Path

import pytest
from openai_server import FakeOpenAI
from test_warmstart import GOOD, policy, records, sft_examples, skills, train  # noqa: F401 (fixtures)

from train_skill import main

KEY = "sk-live-planted-0123456789"


def every_file_text():
    return {
        str(f): f.read_text(errors="replace") for f in Path(".art").rglob("*") if f.is_file() and f.suffix != ".png"
    }


# a warm start loads ART (torch)
@pytest.mark.slow
def test_an_sft_file_line_quoting_our_own_key_is_dropped_counted_and_never_trained_on(
    capsys, skills, policy, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    leak = Path("leak.jsonl")
    leak.write_text(
        "".join(
            json.dumps(x) + "\n"
            for x in [
                {"task_id": "t0", "output": f"fix(app): raise the limit\n\nUse the key {KEY} to deploy."},
                # a masked key, as our logs write it
                {"task_id": "t2", "output": "fix(app): raise the limit\n\nUse the key *** to deploy."},
                {"task_id": "t3", "output": GOOD},
            ]
        )
    )
    code, out, err = train(capsys, skills, policy, "--sft", "--sft-from", str(leak), "--judge", "none", "--steps", "0")
    assert code == 0, err[-2000:]
    assert sft_examples(records()[0]) == [("t3", GOOD)]
    assert "2 quoting an API key" in out
    assert not [f for f, text in every_file_text().items() if KEY in text or "***" in text]


# a warm start loads ART (torch)
@pytest.mark.slow
def test_a_teacher_echoing_the_key_gives_no_masked_example(capsys, skills, policy, monkeypatch):
    monkeypatch.setenv("TEACHER_API_KEY", KEY)
    echo = f"fix(app): raise the limit\n\nAuthorization: Bearer {KEY}"
    with FakeOpenAI(
        policy_fn=lambda request: echo if "LIMIT = 2" in request["messages"][1]["content"] else GOOD
    ) as teacher:
        code, out, err = train(
            capsys,
            skills,
            policy,
            "--sft",
            "--sft-from",
            "teacher",
            "--teacher",
            f"t=m@{teacher.url}",
            "--teacher-samples",
            "1",
            "--judge",
            "none",
            "--steps",
            "0",
        )
    assert code == 0, err[-2000:]
    # t0 (LIMIT = 2) echoed the key
    assert [t for t, _ in sft_examples(records()[0])] == ["t1", "t2", "t3"]
    assert "1 quoting an API key" in out
    assert not [f for f, text in every_file_text().items() if KEY in text or "***" in text]


@pytest.mark.parametrize("spec", ["t=gpt@api.example.com", "gpt@localhost:8000/v1"])
def test_a_teacher_endpoint_without_a_scheme_is_refused_in_one_line(capsys, skills, spec):
    with pytest.raises(SystemExit) as stop:
        main(["--skill", "git-commit", "--sft", "--sft-from", "teacher", "--teacher", spec])
    err = capsys.readouterr().err
    assert (
        stop.value.code == 2
        and "argument --teacher:" in err
        and "http://" in err
        and len(err.strip().splitlines()) == 1
    )


def test_an_sft_file_that_never_ends_is_refused_at_its_bound(capsys, skills, policy):
    code, out, err = train(capsys, skills, policy, "--sft", "--sft-from", "/dev/zero", "--steps", "0")
    assert code == 2 and "Traceback" not in err and "/dev/zero:1: line is longer than" in err
    assert not Path(".art").exists()


def test_an_sft_file_with_a_huge_line_or_value_is_reported_in_bounded_lines(capsys, skills, policy):
    big = Path("big.jsonl")
    big.write_text(
        json.dumps({"task_id": "t0", "output": "x" * 2_000_000})
        + "\n"
        # under the line bound: echoed short
        + json.dumps({"task_id": "y" * 500_000, "output": "fix: x"})
        + "\n"
    )
    code, out, err = train(capsys, skills, policy, "--sft", "--sft-from", str(big), "--steps", "0")
    lines = err.strip().splitlines()
    assert code == 2 and [line.split(": ", 1)[0] for line in lines] == ["big.jsonl:1", "big.jsonl:2"], err[:500]
    assert "line is longer than" in lines[0] and all(len(line) < 300 for line in lines)
