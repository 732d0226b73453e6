"""Output paths and resumed files: --out never destroys an input,
an unwritable --out is one line and a non-zero exit, and --resume keeps only what belongs to this command."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DRY_RUN, score_flags, small_git_commit
from conftest import SMALL_DIFF as DIFF
from openai_server import FakeOpenAI

from train_skill import main

ROOT = Path(__file__).resolve().parent.parent


def outputs(path: Path, n: int = 3) -> Path:
    path.write_text(
        "".join(
            json.dumps({"input": DIFF.format(n=i), "outputs": ["fix: a", "fix: raise it"]}) + "\n" for i in range(n)
        )
    )
    return path


def run(capsys, *argv) -> tuple[int, list[str]]:
    try:
        code = main(list(argv))
    # argparse refuses a flag before main's body runs
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.strip().splitlines()


# ------------------------------------------------------------------ output paths


def test_score_refuses_an_out_that_is_its_input_or_links_to_it(tmp_path, capsys):
    src = outputs(tmp_path / "in.jsonl")
    before = src.read_bytes()
    (tmp_path / "link.jsonl").symlink_to(src)
    for out in (src, tmp_path / "link.jsonl", tmp_path / "sub" / ".." / "in.jsonl"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        code, err = run(capsys, "--skill", "git-commit", "--score", str(src), "--judge", "none", "--out", str(out))
        assert code == 2 and len(err) == 1 and "is the input" in err[0], err
        assert src.read_bytes() == before


def test_score_refuses_an_out_that_is_one_of_the_skills_files(tmp_path, capsys):
    skills = small_git_commit(tmp_path, train=1, val=1)
    src = outputs(tmp_path / "in.jsonl")
    for name in ("tasks.jsonl", "SKILL.md", "checks.py"):
        target = skills / "git-commit" / name
        before = target.read_bytes()
        code, err = run(capsys, *score_flags(src, target, skills))
        assert code == 2 and len(err) == 1 and f"{name}" in err[0], err
        assert target.read_bytes() == before


def test_an_unwritable_score_out_is_one_line_and_a_nonzero_exit(tmp_path, capsys):
    src = outputs(tmp_path / "in.jsonl")
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("keep me\n")
    cases = {tmp_path / "folder": 2, tmp_path / "file.txt" / "out.jsonl": 2, Path("/dev/full"): 1}
    for out, expected in cases.items():
        code, err = run(capsys, "--skill", "git-commit", "--score", str(src), "--judge", "none", "--out", str(out))
        assert code == expected and len(err) == 1 and f"--out {out}" in err[0], (out, err)
    assert (tmp_path / "file.txt").read_text() == "keep me\n"


def test_a_disk_that_fills_during_score_stops_it_with_one_line_and_valid_records(tmp_path):
    src = outputs(tmp_path / "in.jsonl", n=60)
    out = tmp_path / "out.jsonl"

    def small_disk():
        # writes past 4 KB fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    run_ = subprocess.run(
        [sys.executable, str(ROOT / "train_skill.py"), *score_flags(src, out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=small_disk,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run_.returncode == 1 and "Traceback" not in run_.stderr, run_.stderr[-2000:]
    assert [line for line in run_.stderr.splitlines() if line.startswith("error:")] == [
        f"error: cannot write --out {out}: File too large; the records written before are kept (--resume continues)"
    ]
    for line in out.read_text().splitlines()[:-1]:
        json.loads(line)


def test_eval_refuses_an_out_that_is_a_file_or_lies_under_one(tmp_path, capsys):
    (tmp_path / "file.txt").write_text("keep me\n")
    with FakeOpenAI(policy_fn=lambda r: "fix: raise the limit") as server:
        for out in (tmp_path / "file.txt", tmp_path / "file.txt" / "eval"):
            code, err = run(
                capsys,
                "--skill",
                "git-commit",
                "--eval",
                "--model",
                f"m=a@{server.url}",
                "--judge",
                "none",
                "--limit",
                "1",
                "--out",
                str(out),
            )
            assert code == 2 and len(err) == 1 and f"--out {out}" in err[0], err
        # refused before any model was asked
        assert not server.requests
    assert (tmp_path / "file.txt").read_text() == "keep me\n"


@pytest.mark.parametrize("flag", ["--run-name", "--project"])
@pytest.mark.parametrize("value", ["../escape", "a/b", "..", ".", "", "a\\b", "x\ny"])
def test_run_name_and_project_cannot_leave_the_art_folder(tmp_path, capsys, monkeypatch, flag, value):
    monkeypatch.chdir(tmp_path)
    code, err = run(capsys, "--skill", "git-commit", *DRY_RUN, "--judge", "none", flag, value)
    assert code == 2 and len(err) == 1 and flag in err[0], err
    assert not (tmp_path / ".art").exists()


# ------------------------------------------------------------------ resume integrity


def score(capsys, skills, src, out, *extra):
    return run(capsys, *score_flags(src, out, skills), *extra)


def test_score_resume_refuses_records_of_another_input_or_skill(tmp_path, capsys):
    skills = small_git_commit(tmp_path, train=1, val=1)
    src, out = outputs(tmp_path / "in.jsonl"), tmp_path / "out.jsonl"
    assert score(capsys, skills, src, out)[0] == 0
    before = out.read_bytes()
    # the same name, another content
    src.write_text(src.read_text().replace("fix: a", "fix: b"))
    code, err = score(capsys, skills, src, out, "--resume")
    assert code == 2 and len(err) == 1 and "another command" in err[0] and "without --resume" in err[0], err
    assert out.read_bytes() == before
    assert run(capsys, "--skill", "code-review", "--score", str(src), "--judge", "none", "--out", str(out))[0] == 0
    # written by code-review, resumed by git-commit
    code, err = score(capsys, skills, src, out, "--resume")
    assert code == 2 and "another command" in err[0] and "code-review" in err[0], err
    # a file that names no command at all
    out.write_text('{"line": 1, "index": 0}\n')
    assert score(capsys, skills, src, out, "--resume")[0] == 2


def eval_cmd(server_urls: dict, out: Path, *extra) -> list[str]:
    models = [arg for label, url in server_urls.items() for arg in ("--model", f"{label}=m@{url}")]
    return ["--skill", "git-commit", "--eval", *models, "--judge", "none", "--limit", "3", "--out", str(out), *extra]


def test_eval_resume_evaluates_an_added_model_without_regenerating_the_others(tmp_path, capsys):
    out = tmp_path / "eval"
    with (
        FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit") as a,
        FakeOpenAI(policy_fn=lambda r: "Raised it.") as b,
    ):
        assert run(capsys, *eval_cmd({"a": a.url}, out))[0] == 0
        assert len(a.requests) == 3
        code, err = run(capsys, *eval_cmd({"a": a.url, "b": b.url}, out, "--resume"))
        assert code == 0, err
        # a's outputs were kept; b answered every task
        assert len(a.requests) == 3 and len(b.requests) == 3
    rows = {r["model"]: r for r in json.loads((out / "results.json").read_text())["models"]}
    assert rows["a"]["n"] == 3 and rows["b"]["n"] == 3 and rows["a"]["format"] > rows["b"]["format"]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted((r["task_id"], r["model"]) for r in records) == sorted({(r["task_id"], r["model"]) for r in records})


def test_eval_resume_retries_a_model_whose_endpoint_failed(tmp_path, capsys):
    out = tmp_path / "eval"
    with FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit") as server:
        server.always_fail_policy = "500"
        assert run(capsys, *eval_cmd({"a": server.url}, out, "--request-timeout", "5"))[0] == 1
        server.always_fail_policy = None
        code, err = run(capsys, *eval_cmd({"a": server.url}, out, "--request-timeout", "5", "--resume"))
    row = json.loads((out / "results.json").read_text())["models"][0]
    assert code == 0 and row["n"] == 3 and row["failures"] == 0, err


@pytest.mark.parametrize("change", ["samples", "model id", "model url", "dropped model", "tasks file"])
def test_eval_resume_refuses_records_of_another_command(tmp_path, capsys, change):
    skills = small_git_commit(tmp_path, train=1, val=3)
    out = tmp_path / "eval"
    with FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit") as a, FakeOpenAI() as b:
        base = ["--skills-dir", str(skills), *eval_cmd({"a": a.url, "b": b.url}, out)]
        assert run(capsys, *base)[0] == 0
        before = (out / "records.jsonl").read_bytes()
        again = {
            "samples": [*base, "--samples", "2"],
            "model id": [arg.replace("a=m@", "a=other@") for arg in base],
            "model url": [arg.replace(f"a=m@{a.url}", f"a=m@{b.url}") for arg in base],
            "dropped model": [arg for arg in base if arg != f"b=m@{b.url}"][: -0 or None],
            "tasks file": base,
        }[change]
        if change == "dropped model":
            again = ["--skills-dir", str(skills), *eval_cmd({"a": a.url}, out)]
        if change == "tasks file":
            with open(skills / "git-commit" / "tasks.jsonl", "a") as f:
                f.write(json.dumps({"id": "new", "input": DIFF.format(n=9), "split": "val"}) + "\n")
        requests = len(a.requests) + len(b.requests)
        code, err = run(capsys, *again, "--resume")
        assert code == 2 and len(err) == 1 and "another command" in err[0] and "without --resume" in err[0], err
        assert len(a.requests) + len(b.requests) == requests
    assert (out / "records.jsonl").read_bytes() == before


# ------------------------------------------------------------------ rough edges


def test_a_pipe_in_a_model_label_is_escaped_in_results_md(tmp_path, capsys):
    with FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit") as server:
        assert (
            run(
                capsys,
                "--skill",
                "git-commit",
                "--eval",
                "--model",
                f"a|b=m@{server.url}",
                "--judge",
                "none",
                "--limit",
                "1",
                "--out",
                str(tmp_path / "eval"),
            )[0]
            == 0
        )
    table = [line for line in (tmp_path / "eval" / "results.md").read_text().splitlines() if line.startswith("|")]
    assert "| a\\|b |" in table[2] and len({line.replace("\\|", "").count("|") for line in table}) == 1


def test_a_duplicate_key_in_score_input_is_an_error_as_in_tasks_jsonl(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"input": "diff", "output": "fix: a", "output": "fix: b"}\n{"input": "diff", "output": "fix: c"}\n')
    code, err = run(
        capsys, "--skill", "git-commit", "--score", str(src), "--judge", "none", "--out", str(tmp_path / "o.jsonl")
    )
    assert code == 1 and f"{src}:1: field 'output' is given twice" in err, err
    assert [json.loads(line)["line"] for line in (tmp_path / "o.jsonl").read_text().splitlines()] == [2]


# the judge is ART's RULER (torch)
@pytest.mark.slow
def test_the_judge_follows_a_307_redirect_like_the_policy_client(tmp_path, capsys):
    src = outputs(tmp_path / "in.jsonl", n=1)
    with FakeOpenAI() as server:
        server.always_fail_judge = "redirect"
        code, err = run(
            capsys,
            "--skill",
            "git-commit",
            "--score",
            str(src),
            "--judge-base-url",
            server.url,
            "--judge-api-key",
            "k",
            "--judge-attempts",
            "1",
            "--out",
            str(tmp_path / "o.jsonl"),
        )
    assert code == 0, err
    assert all(json.loads(line)["judged"] for line in (tmp_path / "o.jsonl").read_text().splitlines())
