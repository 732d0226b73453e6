"""Every output we replace goes through one write path (files.atomic_write): a unique temporary file in the
same folder, never a link planted at a predictable name, only a regular file replaced; a full disk is one
line, never a traceback."""

import errno
import json
import os
import stat

import pytest
from conftest import DRY_RUN, SMALL_GROUPS, small_git_commit
from conftest import SMALL_DIFF as DIFF
from openai_server import FakeOpenAI
from test_mining import Scripted, run

from skill_rl.files import atomic_write


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_link_planted_at_the_old_temporary_name_is_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    out = tmp_path / "out.jsonl"
    for name in ("out.jsonl.tmp", ".out.jsonl.tmp", ".rewards.tmp.png"):
        (tmp_path / name).symlink_to(victim)
    atomic_write(out, "new\n")
    assert out.read_text() == "new\n" and victim.read_text() == "keep me\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~os.umask(os.umask(0o022))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["victim", "out.jsonl", "out.jsonl.tmp", ".out.jsonl.tmp", ".rewards.tmp.png"]
    )


def special_file(tmp_path):
    """A FIFO, and as root a character device like /dev/null (made here, never the real one)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    found = [fifo]
    if os.geteuid() == 0:
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        found.append(tmp_path / "null")
    return found


def test_only_a_regular_file_is_ever_replaced(tmp_path):
    for path in special_file(tmp_path):
        kind = stat.S_IFMT(path.lstat().st_mode)
        with pytest.raises(OSError, match="not a regular file"):
            atomic_write(path, "x\n")
        assert stat.S_IFMT(path.lstat().st_mode) == kind


def test_mining_refuses_a_device_or_pipe_as_out_even_with_force(tmp_path):
    r = Scripted(tmp_path / "repo")
    r.commit("one", "feat(a): one", {"a.txt": "a\n"})
    for path in special_file(tmp_path):
        kind = stat.S_IFMT(path.lstat().st_mode)
        code, _, stderr = run("--skill", "git-commit", "--tasks-from-git", r.path, "--out", path, "--force")
        assert (code, stderr.count("\n"), "not a regular file" in stderr) == (2, 1, True), stderr
        assert stat.S_IFMT(path.lstat().st_mode) == kind


def test_a_full_disk_on_the_score_resume_rewrite_is_one_line_and_keeps_the_file(tmp_path, monkeypatch):
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(json.dumps({"input": DIFF.format(n=i), "output": "fix: raise the limit"}) + "\n" for i in range(3))
    )
    out = tmp_path / "out.jsonl"
    assert run("--skill", "git-commit", "--score", src, "--judge", "none", "--out", out)[0] == 0
    before = out.read_text()
    monkeypatch.setattr("skill_rl.commands.score.atomic_write", full_disk)
    code, _, stderr = run("--skill", "git-commit", "--score", src, "--judge", "none", "--out", out, "--resume")
    assert (code, "Traceback" not in stderr) == (1, True), stderr
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == [
        f"error: cannot rewrite --out {out} to resume: No space left on device; it is unchanged"
    ]
    assert out.read_text() == before


@pytest.fixture
def policy(monkeypatch):
    with FakeOpenAI(policy_fn=lambda request: "fix: raise the limit") as server:
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        yield server


# trains: loads ART (torch)
@pytest.mark.slow
def test_a_full_disk_for_the_reward_plot_is_a_warning_and_the_run_goes_on(tmp_path, monkeypatch, policy):
    from matplotlib.figure import Figure

    skills = small_git_commit(tmp_path, train=4, val=1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Figure, "savefig", full_disk)
    code, stdout, stderr = run(
        "--skills-dir", skills, "--skill", "git-commit", *DRY_RUN, "--judge", "none", "--steps", "1", *SMALL_GROUPS
    )
    assert code == 0 and "Traceback" not in stderr, stderr[-2000:]
    assert "warning: cannot write rewards.png: No space left on device" in stderr and "step    1 | reward" in stdout


# a warm start loads ART (torch)
@pytest.mark.slow
def test_a_full_disk_for_warmstart_jsonl_is_one_line(tmp_path, monkeypatch, policy):
    skills = small_git_commit(tmp_path, train=4, val=1)
    path = skills / "git-commit" / "tasks.jsonl"
    tasks = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**t, "reference": "fix(app): raise the limit"}) + "\n" for t in tasks))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("skill_rl.training.warmstart.atomic_write", full_disk)
    code, stdout, stderr = run(
        "--skills-dir",
        skills,
        "--skill",
        "git-commit",
        *DRY_RUN,
        "--judge",
        "none",
        "--steps",
        "1",
        *SMALL_GROUPS,
        "--sft",
        "--eval-every",
        "100",
    )
    assert code == 1 and "Traceback" not in stderr, stderr[-2000:]
    assert "warm start: cannot write" in stderr and "No space left on device; nothing was trained" in stderr
