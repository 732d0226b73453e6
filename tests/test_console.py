"""Text from users and models is printed literally: never read as rich markup, never crashing the output,
never losing `[...]`, never sending terminal control codes."""

import json
from pathlib import Path

import pytest
from conftest import skill_folder, small_git_commit
from openai_server import FakeOpenAI

from train_skill import main

ROOT = Path(__file__).resolve().parent.parent
BODY = (
    (ROOT / "tests" / "test_skills.py").read_text().split('GOOD_MD = """', 1)[1].split('"""', 1)[0].split("---\n", 2)[2]
)
MARKUP = "Use [bold]x[/] with qwen[lora] [link=http://e.x]here[/link]"


def skill(where: Path, name: str, description: str, body: str = BODY) -> Path:
    return skill_folder(
        where,
        name,
        md=f"---\nname: {name}\ndescription: {description}\n---\n{body}",
        tasks='{"id": "a", "input": "x"}\n',
    )


def test_list_prints_descriptions_and_problems_literally(tmp_path, capsys):
    skill(tmp_path, "demo", MARKUP)
    skill(tmp_path, "broken", "d", body="no sections [/] here [red]")
    code = main(["--skills-dir", str(tmp_path), "--list"])
    out = capsys.readouterr().out
    assert code == 0
    assert "[bold]x[/]" in out and "qwen[lora]" in out and "[link=http://e.x]here[/link]" in out
    assert "invalid" in out and "broken" in out


def test_check_prints_description_and_paths_literally(tmp_path, capsys):
    where = tmp_path / "my[red]skills[/]"
    skill(where, "demo", MARKUP)
    code = main(["--skills-dir", str(where), "--skill", "demo", "--check"])
    out = capsys.readouterr().out
    assert code == 0
    assert MARKUP in out and "my[red]skills[/]" in out


def test_eval_table_and_chart_show_model_labels_literally_and_escape_control_codes(tmp_path, capsys):
    skills = small_git_commit(tmp_path, train=1, val=1)
    with FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit") as server:
        code = main(
            [
                "--skills-dir",
                str(skills),
                "--skill",
                "git-commit",
                "--eval",
                "--judge",
                "none",
                "--model",
                f"qwen[lora]=a@{server.url}",
                "--model",
                f"[/]=b@{server.url}",
                "--model",
                f"\x1b[2Jwipe=c@{server.url}",
                "--model",
                f"$\\frac$=d@{server.url}",
                "--model",
                f"_hidden=e@{server.url}",
                "--out",
                str(tmp_path / "eval"),
            ]
        )
    out = capsys.readouterr().out
    assert code == 0
    assert "qwen[lora]" in out and "[/]" in out and "\\x1b[2Jwipe" in out and "\x1b[2J" not in out
    assert {r["model"] for r in json.loads((tmp_path / "eval" / "results.json").read_text())["models"]} == {
        "qwen[lora]",
        "[/]",
        "\x1b[2Jwipe",
        "$\\frac$",
        "_hidden",
    }
    # matplotlib's mathtext and '_' labels are escaped too
    assert (tmp_path / "eval" / "chart.png").exists()


# the judge is ART's RULER (torch)
@pytest.mark.slow
def test_score_summary_shows_the_judge_model_literally(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"input": "diff", "outputs": ["fix: a", "fix: b"]}) + "\n")
    with FakeOpenAI() as server:
        code = main(
            [
                "--skill",
                "git-commit",
                "--score",
                str(src),
                "--judge-base-url",
                server.url,
                "--judge-api-key",
                "k",
                "--judge-model",
                "openai/qwen[lora]",
                "--out",
                str(tmp_path / "o.jsonl"),
            ]
        )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "qwen[lora]" in err


def test_a_piped_phase_prints_a_line_per_period_with_what_it_has_done(monkeypatch, capsys):
    """Counted, not timed: while each "batch" runs, the phase's own thread prints a line saying how many are done."""
    from rich.console import Console

    from skill_rl import progress

    monkeypatch.setenv("SKILL_RL_PROGRESS_SECONDS", "0.01")
    piped = Console(stderr=True, force_terminal=False)
    with progress.phase("warm start", 3, "batches", console=piped) as advance:
        for done in range(3):
            err = ""
            # bounded by the test's timeout, not by a clock
            while f"warm start: {done}/3 batches, " not in err:
                err += capsys.readouterr().err
            assert all(line.startswith("warm start: ") for line in err.splitlines()), err
            advance()
    with progress.phase("quiet", 1, quiet=True, console=piped):
        pass
    assert "quiet" not in capsys.readouterr().err


# subprocesses
@pytest.mark.slow
@pytest.mark.parametrize("args", [["--list"], ["--skill", "git-commit", "--check"], ["--tasks-from-git"]])
def test_a_closed_or_full_stdout_stops_with_one_line(tmp_path, args):
    """`| head` closing the pipe, or a full disk under stdout: exit 1 and at most one line, no traceback (rich's
    tables stop silently, as Unix tools do; our own lines say why)."""
    import subprocess
    import sys

    if args == ["--tasks-from-git"]:
        repo = tmp_path / "repo"
        repo.mkdir()
        git = ["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@example.com"]
        subprocess.run([*git[:3], "init", "-q"], check=True)
        for i in range(3):
            (repo / f"f{i}.py").write_text(f"x = {i}\n")
            subprocess.run([*git, "add", "."], check=True)
            subprocess.run([*git, "commit", "-qm", f"fix: set x to {i}"], check=True)
        args = ["--skill", "git-commit", "--tasks-from-git", str(repo), "--out", str(tmp_path / "t.jsonl"), "--force"]
    command = [sys.executable, str(ROOT / "train_skill.py"), *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, text=True)
    # the reader is gone before the first line
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1 and "Traceback" not in err and len(err.splitlines()) <= 1, err
    assert err in ("", "error: stdout was closed by its reader; stopped\n"), err
    with open("/dev/full", "w") as full:
        done = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, cwd=tmp_path, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 1, done.stderr
