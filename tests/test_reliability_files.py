"""Output paths and resumed files (second reliability pass, classes 5 and 6): --out never destroys an input,
an unwritable --out is one line and a non-zero exit, and --resume keeps only what belongs to this command."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SMALL_DIFF as DIFF, small_git_commit
from openai_server import FakeOpenAI
from train_skill import main

ROOT = Path(__file__).resolve().parent.parent


def outputs(path: Path, n: int = 3) -> Path:
    path.write_text("".join(json.dumps({"input": DIFF.format(n=i), "outputs": ["fix: a", "fix: raise it"]}) + "\n"
                            for i in range(n)))
    return path


def run(capsys, *argv) -> tuple[int, list[str]]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse refuses a flag before main's body runs
        code = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.strip().splitlines()


# ------------------------------------------------------------------ output paths (class 5)


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
        code, err = run(capsys, "--skills-dir", str(skills), "--skill", "git-commit", "--score", str(src),
                        "--judge", "none", "--out", str(target))
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
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # writes past 4 KB fail with EFBIG

    run_ = subprocess.run([sys.executable, str(ROOT / "train_skill.py"), "--skill", "git-commit", "--score", str(src),
                           "--judge", "none", "--out", str(out)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, preexec_fn=small_disk, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run_.returncode == 1 and "Traceback" not in run_.stderr, run_.stderr[-2000:]
    assert [line for line in run_.stderr.splitlines() if line.startswith("error:")] == [
        f"error: cannot write --out {out}: File too large; the records written before are kept (--resume continues)"]
    for line in out.read_text().splitlines()[:-1]:
        json.loads(line)


def test_eval_refuses_an_out_that_is_a_file_or_lies_under_one(tmp_path, capsys):
    (tmp_path / "file.txt").write_text("keep me\n")
    with FakeOpenAI(policy_fn=lambda r: "fix: raise the limit") as server:
        for out in (tmp_path / "file.txt", tmp_path / "file.txt" / "eval"):
            code, err = run(capsys, "--skill", "git-commit", "--eval", "--model", f"m=a@{server.url}", "--judge", "none",
                            "--limit", "1", "--out", str(out))
            assert code == 2 and len(err) == 1 and f"--out {out}" in err[0], err
        assert not server.requests  # refused before any model was asked
    assert (tmp_path / "file.txt").read_text() == "keep me\n"


@pytest.mark.parametrize("flag", ["--run-name", "--project"])
@pytest.mark.parametrize("value", ["../escape", "a/b", "..", ".", "", "a\\b", "x\ny"])
def test_run_name_and_project_cannot_leave_the_art_folder(tmp_path, capsys, monkeypatch, flag, value):
    monkeypatch.chdir(tmp_path)
    code, err = run(capsys, "--skill", "git-commit", "--backend", "skill_rl.dryrun:DryRunBackend", "--judge", "none", flag, value)
    assert code == 2 and len(err) == 1 and flag in err[0], err
    assert not (tmp_path / ".art").exists()
