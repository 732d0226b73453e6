"""A skill folder with skill-creator's evals/evals.json and no tasks.jsonl: its evals are the tasks, their files
are inlined, their expected output and expectations reach the judge; a bad evals.json is one line per problem."""

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import DRY_RUN

from skill_rl.scoring.reward import rubric
from skill_rl.skills import SkillError, load_skill
from train_skill import main

DATA = Path(__file__).resolve().parent / "data" / "evals-skill"


@pytest.fixture
def skills(tmp_path):
    shutil.copytree(DATA, tmp_path / "skills")
    return tmp_path / "skills"


def evals_file(skills) -> Path:
    return skills / "meeting-notes" / "evals" / "evals.json"


def test_evals_become_tasks_with_their_files_inlined_and_their_expectations_as_criteria(skills):
    skill = load_skill(skills / "meeting-notes")
    assert [t.id for t in skill.tasks] == ["1", "2", "3", "4", "5"]
    # the last fifth, rounded up
    assert [t.split for t in skill.tasks] == ["train"] * 4 + ["val"]
    first = skill.task("1")
    assert first.input.startswith(
        "Here is today's standup log, what did we decide?\n\n--- evals/files/standup.txt ---\n"
    )
    assert "Tom: yes, I'll do it before lunch." in first.input
    assert (
        first.criteria[0].startswith("The expected output: Two decisions")
        and "Tom owns renewing the signing key, due today" in first.criteria
    )
    assert skill.task("4").criteria == [
        "The decision that the office closes at 6 from next week is listed",
        # no expected_output
        "Raj owns telling the night shift, with no due date",
    ]
    text = rubric(skill, "correctness", first)
    assert all(f"- {c}" in text for c in first.criteria)
    assert "Tom owns" not in rubric(skill, "procedure", first) and "Tom owns" not in rubric(
        skill, "correctness", skill.task("2")
    )
    assert skill.tasks_path == evals_file(skills)


def test_check_passes_and_names_where_the_tasks_came_from(skills, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["--skills-dir", str(skills), "--skill", "meeting-notes", "--check"]) == 0
    out = capsys.readouterr().out
    assert "5 task(s) carry criteria" in out and f"5 tasks (from {evals_file(skills)}) are valid" in out


def test_a_tasks_jsonl_beside_it_wins(skills):
    (skills / "meeting-notes" / "tasks.jsonl").write_text(
        json.dumps({"id": "t", "input": "Ann: ship it.\nBo: ok."}) + "\n"
    )
    skill = load_skill(skills / "meeting-notes")
    assert [t.id for t in skill.tasks] == ["t"] and skill.tasks_path.name == "tasks.jsonl"


# the judge is ART's RULER: it imports torch
@pytest.mark.slow
def test_the_expectations_reach_the_judge_and_only_with_their_task(skills, server, tmp_path, capsys):
    src = tmp_path / "out.jsonl"
    src.write_text(
        json.dumps({"task_id": "1", "outputs": ["## Decisions\n- Retro on Thursday\n", "## Decisions\n"]})
        + "\n"
        + json.dumps({"task_id": "2", "outputs": ["## Decisions\n- Ship v2 on the 14th\n", "nothing"]})
        + "\n"
    )
    assert (
        main(
            [
                "--skills-dir",
                str(skills),
                "--skill",
                "meeting-notes",
                "--score",
                str(src),
                "--judge-base-url",
                server.url,
                "--judge-api-key",
                "sk-test",
                "--out",
                str(tmp_path / "scored.jsonl"),
            ]
        )
        == 0
    ), capsys.readouterr().err
    judge_prompts = [
        json.dumps(r["messages"]) for r in server.requests if "Grading standards" in r["messages"][0]["content"]
    ]
    assert len(judge_prompts) == 4
    with_criteria = [p for p in judge_prompts if "Tom owns renewing the signing key, due today" in p]
    # task 1's correctness call only
    assert len(with_criteria) == 1 and "Sam owns the changelog" not in with_criteria[0]
    assert sum("Sam owns the changelog, due the 12th" in p for p in judge_prompts) == 1


def write(skills, evals=None, raw=None):
    evals_file(skills).write_text(
        raw if raw is not None else json.dumps({"skill_name": "meeting-notes", "evals": evals}, indent=2)
    )


@pytest.mark.parametrize(
    "evals, message",
    [
        ([{"id": 1}], "evals.json:4: evals[0]: field 'prompt' is required"),
        (
            [{"id": 1, "prompt": "x", "expectations": "one"}],
            "evals.json:4: evals[0]: field 'expectations': input should be a valid list",
        ),
        ([{"id": 1, "prompt": "x", "grader": "me"}], "evals.json:4: evals[0]: field 'grader' is not allowed"),
        (
            [{"id": 1, "prompt": "x"}, {"id": 1, "prompt": "y"}],
            "evals.json:8: evals[1]: field 'id' '1' is already used by evals[0]",
        ),
        (
            [{"id": 1, "prompt": "x", "files": ["../../../etc/passwd"]}],
            "evals[0]: file '../../../etc/passwd' is outside the skill folder",
        ),
        (
            [{"id": 1, "prompt": "x", "files": ["/etc/passwd"]}],
            "evals[0]: file '/etc/passwd' is outside the skill folder",
        ),
        (
            [{"id": 1, "prompt": "x", "files": ["evals/files/link"]}],
            "evals[0]: file 'evals/files/link' is outside the skill folder",
        ),
        (
            [{"id": 1, "prompt": "x", "files": ["evals/files/photo.png"]}],
            "evals[0]: file 'evals/files/photo.png' is not UTF-8 text",
        ),
        (
            [{"id": 1, "prompt": "x", "files": ["evals/files/none.txt"]}],
            "evals[0]: file 'evals/files/none.txt' is not a file in the skill folder",
        ),
        ([], "evals.json: no evals"),
        ("raw:[1, 2]", 'evals.json: expected {"skill_name": ..., "evals": [...]}'),
        ('raw:{"evals": [}', "evals.json:1: invalid JSON: Expecting value"),
        (
            'raw:{"skill_name": "other", "evals": [{"id": 1, "prompt": "x"}]}',
            "field 'skill_name' must be this skill's name 'meeting-notes', got 'other'",
        ),
    ],
)
def test_a_bad_evals_file_is_one_line_per_problem_naming_file_line_and_field(skills, evals, message):
    files = skills / "meeting-notes" / "evals" / "files"
    (files / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    os.symlink("/etc/hostname", files / "link")
    write(skills, raw=evals[4:]) if isinstance(evals, str) else write(skills, evals)
    with pytest.raises(SkillError) as e:
        load_skill(skills / "meeting-notes")
    assert len(e.value.problems) == 1 and message in e.value.problems[0], e.value.problems
    assert "\n" not in e.value.problems[0]


@pytest.mark.slow
def test_it_trains_on_the_stand_in_backend(skills, tmp_path, monkeypatch, capsys):
    import itertools

    from openai_server import FakeOpenAI

    answers = itertools.cycle(
        [
            "## Decisions\n- Retro moves to Thursday\n\n## Action items\n- Tom: renew the key (due today)\n",
            "## Decisions\n- none\n",
            "notes",
        ]
    )
    with FakeOpenAI(policy_fn=lambda r: next(answers)) as server:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        monkeypatch.delenv("WANDB_API_KEY", raising=False)
        code = main(
            [
                "--skills-dir",
                str(skills),
                "--skill",
                "meeting-notes",
                *DRY_RUN,
                "--judge-base-url",
                server.url,
                "--judge-api-key",
                "sk-test",
                "--steps",
                "1",
                "--groups-per-step",
                "2",
                "--rollouts-per-group",
                "3",
                "--quiet",
            ]
        )
        assert code == 0, capsys.readouterr()
        judged = [
            json.dumps(r["messages"]) for r in server.requests if "Grading standards" in r["messages"][0]["content"]
        ]
    step = json.loads(next((tmp_path / ".art").rglob("dryrun.jsonl")).read_text().splitlines()[0])
    assert step["step"] == 1 and step["groups"] == 2 and set(step["task_ids"]) <= {"1", "2", "3", "4"}
    assert any("grade by how many it meets" in p for p in judged)


def big(path: Path, size: int) -> str:
    """A sparse file of `size` bytes (nothing written): reading it whole would take its size in memory."""
    with open(path, "wb") as f:
        f.truncate(size)
    return str(path.relative_to(path.parents[2]))


@pytest.mark.parametrize(
    "case, message",
    [
        ("evals.json of 3 GB", "evals.json: is 3,000,000,000 bytes; the limit is"),
        ("deep JSON", "evals.json: invalid JSON: nested too deeply"),
        ("the same file 60 times", "evals[0]: field 'files' lists 'evals/files/half.txt' more than once"),
        ("files adding up past a task's limit", "evals[0]: the prompt with its files is over 1,000,000 characters"),
    ],
)
def test_evals_files_are_bounded_before_they_are_read(skills, case, message):
    files = skills / "meeting-notes" / "evals" / "files"
    (files / "half.txt").write_text("x" * 600_000)
    (files / "other.txt").write_text("y" * 600_000)
    if case == "evals.json of 3 GB":
        big(evals_file(skills), 3_000_000_000)
    elif case == "deep JSON":
        write(skills, raw='{"evals": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif case == "the same file 60 times":
        write(skills, [{"id": 1, "prompt": "x", "files": ["evals/files/half.txt"] * 60}])
    else:
        write(skills, [{"id": 1, "prompt": "x", "files": ["evals/files/half.txt", "evals/files/other.txt"]}])
    with pytest.raises(SkillError) as e:
        load_skill(skills / "meeting-notes")
    assert len(e.value.problems) == 1 and message in e.value.problems[0], e.value.problems


def test_a_listed_file_is_measured_before_it_is_read(skills):
    import tracemalloc

    files = skills / "meeting-notes" / "evals" / "files"
    write(skills, [{"id": 1, "prompt": "x", "files": [big(files / "huge.txt", 300_000_000)]}])
    tracemalloc.start()
    try:
        with pytest.raises(SkillError) as e:
            load_skill(skills / "meeting-notes")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "evals[0]: file 'evals/files/huge.txt' is 300,000,000 bytes; the limit is 1,000,000" in e.value.problems[0]
    assert peak < 50_000_000, f"{peak:,} bytes allocated: the file was read"
