"""What a checks-only reward pays for: `--judge none` training refuses a reward that cannot see correctness,
and text repeated across a step's tasks is paid for nowhere (skill_rl/scoring/repeats.py)."""

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import DRY_RUN, score_flags

from skill_rl.scoring import repeats
from skill_rl.training.trajectories import penalise_repeats
from train_skill import main

ROOT = Path(__file__).resolve().parent.parent


def run(capsys, *argv) -> tuple[int, list[str]]:
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.strip().splitlines()


def skills_with(tmp_path: Path, name: str, strip_expect: bool = False) -> Path:
    folder = tmp_path / "skills" / name
    shutil.copytree(ROOT / "skills" / name, folder)
    # markdown-only: release-notes with its checks.py (and so its expect) taken away
    if name == "release-notes":
        (folder / "checks.py").unlink()
        strip_expect = True
    if strip_expect:
        rows = [json.loads(line) for line in (folder / "tasks.jsonl").read_text().splitlines()]
        (folder / "tasks.jsonl").write_text(
            "".join(json.dumps({k: v for k, v in r.items() if k != "expect"}) + "\n" for r in rows)
        )
    return tmp_path / "skills"


TRAIN = (*DRY_RUN, "--judge", "none", "--sft", "--sft-from", "no-such-file.jsonl")


@pytest.mark.parametrize(
    "name,strip",
    [("release-notes", False), ("git-commit", True)],
    ids=["markdown-only skill", "raw tasks without expect"],
)
def test_judge_none_training_on_checks_that_cover_no_correctness_exits_2_with_one_line(
    tmp_path, capsys, monkeypatch, name, strip
):
    monkeypatch.chdir(tmp_path)
    code, err = run(capsys, "--skills-dir", str(skills_with(tmp_path, name, strip)), "--skill", name, *TRAIN)
    assert code == 2 and len(err) == 1, err
    assert "--judge none" in err[0] and "correctness" in err[0] and "--format-only-reward" in err[0]
    assert not (tmp_path / ".art").exists()


@pytest.mark.parametrize(
    "name,strip",
    [("release-notes", False), ("git-commit", True)],
    ids=["markdown-only skill", "raw tasks without expect"],
)
def test_the_format_only_flag_trains_on_that_reward_anyway(tmp_path, capsys, monkeypatch, name, strip):
    monkeypatch.chdir(tmp_path)
    code, err = run(
        capsys, "--skills-dir", str(skills_with(tmp_path, name, strip)), "--skill", name, *TRAIN, "--format-only-reward"
    )
    # got past it
    assert code == 2 and len(err) == 1 and "no-such-file.jsonl" in err[0] and "correctness" not in err[0], err


def test_tasks_with_expect_train_on_checks_alone(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = run(capsys, "--skills-dir", str(skills_with(tmp_path, "git-commit")), "--skill", "git-commit", *TRAIN)
    assert code == 2 and len(err) == 1 and "no-such-file.jsonl" in err[0], err


def test_check_prints_what_the_checks_cover(tmp_path, capsys):
    assert (
        main(
            [
                "--skills-dir",
                str(skills_with(tmp_path, "git-commit", strip_expect=True)),
                "--skill",
                "git-commit",
                "--check",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "checks cover" in out and "unchecked" in out and "(estimate)" in out
    # refused: see below
    assert re.search(r"correctness (\d+)%", out) and int(re.search(r"correctness (\d+)%", out)[1]) < 50


# ------------------------------------------------------------------ repeats across a step


BOILERPLATE = "This change improves the overall quality and maintainability of the code."


def test_a_paragraph_repeated_for_different_tasks_is_taken_off_the_reward():
    items = [
        ("a", f"fix: parse dates\n\n{BOILERPLATE}"),
        ("b", f"feat: add retries\n\n{BOILERPLATE}"),
        ("a", "fix: parse dates in ISO 8601 form"),
    ]
    shares = repeats.shares(items)
    # 40 letters or more of repeated skeleton: all of it
    assert shares[0] == shares[1] == 1.0 and shares[2] == 0.0
    same = "fix: one answer for every task"
    # one answer for every task
    assert repeats.shares([("a", same), ("b", same)]) == [1.0, 1.0]
    # one task's rollouts alike
    assert repeats.shares([("a", same), ("a", same)]) == [0.0, 0.0]


def test_score_over_a_file_pays_nothing_for_boilerplate_shared_across_tasks(tmp_path, capsys):
    from skill_rl.skills import load_skill

    skill = load_skill(ROOT / "skills" / "git-commit")
    tasks = [t for t in skill.tasks if t.reference][:3]
    lines = [{"task_id": t.id, "outputs": [t.reference, f"{t.reference}\n\n{BOILERPLATE}"]} for t in tasks]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = tmp_path / "out.jsonl"
    assert main(["--skill", "git-commit", "--score", str(src), "--judge", "none", "--out", str(out)]) == 0
    records = {(r["line"], r["index"]): r for r in map(json.loads, out.read_text().splitlines())}
    for line in range(1, len(tasks) + 1):
        plain, padded = records[line, 0], records[line, 1]
        assert plain["repeated"] == 0.0 and padded["repeated"] > 0.1 and padded["reward"] < plain["reward"]


# what repeats reads of an art.Trajectory: its task, metrics, reward and last message
class _Traj:
    def __init__(self, task, text):
        self.metadata, self.metrics, self.reward = {"task_id": task}, {}, 1.0
        self.messages_and_choices = [{"role": "assistant", "content": text}]


class _Group:
    def __init__(self, *trajs):
        self.trajectories = list(trajs)


# the training loop's grouping loads ART (and so torch)
@pytest.mark.slow
def test_a_training_step_scales_rewards_by_what_is_repeated_across_its_tasks():
    groups = [
        _Group(_Traj("a", "fix: one answer for everything"), _Traj("a", "fix: parse dates in ISO form")),
        _Group(_Traj("b", "fix: one answer for everything"), _Traj("b", "feat: add retries to the client")),
    ]
    assert penalise_repeats(groups) == pytest.approx(0.5)
    rewards = [[t.reward for t in g.trajectories] for g in groups]
    assert rewards == [[0.0, 1.0], [0.0, 1.0]] and groups[0].trajectories[0].metrics["repeated"] == 1.0


@pytest.mark.parametrize("strip", [True, False], ids=["without expect", "with expect"])
def test_score_without_a_judge_says_when_the_reward_cannot_tell_a_right_answer(tmp_path, capsys, strip):
    skills = skills_with(tmp_path, "git-commit", strip_expect=strip)
    from skill_rl.skills import load_skill

    tasks = [t for t in load_skill(skills / "git-commit").tasks if t.reference][:4]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"task_id": t.id, "outputs": [t.reference]}) + "\n" for t in tasks))
    assert main([*score_flags(src, out, skills)]) == 0
    err = capsys.readouterr().err
    assert ("the reward cannot tell whether these answers are right" in err) is strip, err
