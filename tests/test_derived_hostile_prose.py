"""Hostile SKILL.md prose for the derived checks: numbers too big to read, a SKILL.md large
enough to expose quadratic work, section names in any script, and constraints no output can meet."""

import json
import time

import pytest
from test_derived import TEMPLATE, make

from skill_rl.scoring.checks import run_checks
from skill_rl.scoring.derived import derive
from skill_rl.scoring.rubric import skill_checks
from skill_rl.skills import SkillError, Task
from train_skill import main


def check_run(tmp_path, capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.chdir(tmp_path)
    code = main(["--skills-dir", str(tmp_path), "--skill", "demo", "--check"])
    out = capsys.readouterr()
    return code, out.out, out.err


def write(tmp_path, output_format: str, rules: str = "", meta: str = "") -> None:
    skill = make(tmp_path, output_format, rules, meta)
    # every command that scores refuses it, not only --check
    with pytest.raises(SkillError):
        skill_checks(skill)


# ------------------------------------------------------------------ 7: a number too big to read


@pytest.mark.parametrize("number", ["1" + "0" * 5000, "10000000000000"])
def test_a_limit_too_big_to_mean_anything_is_one_line_naming_its_line(tmp_path, capsys, monkeypatch, number):
    write(tmp_path, TEMPLATE, f"- The whole output is at most {number} characters.")
    code, out, err = check_run(tmp_path, capsys, monkeypatch)
    assert code == 2 and "Traceback" not in err and out == ""
    assert err.startswith("demo/SKILL.md:39: ") and "1,000,000,000" in err and len(err.strip().splitlines()) == 1
    assert len(err) < 300


def test_score_refuses_a_huge_limit_in_one_line_too(tmp_path, capsys, monkeypatch):
    write(tmp_path, TEMPLATE, "- The whole output is at most " + "9" * 5000 + " characters.")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text(json.dumps({"task_id": "a", "outputs": ["x"]}) + "\n")
    code = main(["--skills-dir", str(tmp_path), "--skill", "demo", "--score", "in.jsonl", "--judge", "none"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("demo/SKILL.md:39: ") and len(err.strip().splitlines()) == 1, err[:300]


def test_with_derivation_off_a_huge_limit_is_no_error(tmp_path, capsys, monkeypatch):
    make(
        tmp_path,
        TEMPLATE,
        "- The whole output is at most " + "9" * 5000 + " characters.",
        meta='  derive-checks: "false"\n',
    )
    code, out, err = check_run(tmp_path, capsys, monkeypatch)
    assert code == 0 and "Traceback" not in err


# ------------------------------------------------------------------ 8: linear in the SKILL.md's size


def big_prose(parts: int) -> tuple[str, str]:
    template = "```\n" + "\n".join(f"## Part {i}\n<text>" for i in range(parts)) + "\n```"
    rules = "\n".join(f"- The Part {i % parts} section has at most {i % 9 + 1} lines." for i in range(parts * 8 // 5))
    return template, rules


def test_deriving_checks_is_linear_in_the_skill_md(tmp_path):
    timings = []
    # 4000: about 365 kB of SKILL.md
    for where, parts in ((tmp_path / "small", 250), (tmp_path, 4000)):
        where.mkdir(exist_ok=True)
        skill = make(where, *big_prose(parts))
        start = time.perf_counter()
        found = derive(skill)
        timings.append(time.perf_counter() - start)
        # a limit per part, headings, placeholders_filled
        assert len(found.checks) == parts + 2 and found.problems == ()
    assert len((tmp_path / "demo" / "SKILL.md").read_bytes()) > 360_000
    # 16 times the prose: 16 times the work when linear, 256 times when quadratic (83 s in --check before the
    # fix); the bound leaves 10x room above linear, and a floor for a slow, shared machine
    assert timings[1] < max(160 * timings[0], 10.0), timings


# ------------------------------------------------------------------ 9: section names in any script


@pytest.mark.parametrize(
    "one, two", [("摘要", "概要"), ("Über blick", "Über-blick"), ("Next steps", "Next-steps"), ("Résumé", "Resume")]
)
def test_two_sections_whose_names_differ_only_outside_ascii_letters_keep_both_constraints(tmp_path, one, two):
    template = f"```\n## {one}\n<text>\n\n## {two}\n<text>\n```"
    rules = f"- The `{one}` section has at most 2 words.\n- The `{two}` section has at most 5 words."
    skill = make(tmp_path, template, rules)
    names = [f.__name__ for f in skill_checks(skill)]
    # headings, placeholders_filled and one limit per section
    assert len(names) == len(set(names)) == 4, names
    limits = [n for n in names if "_max_words" in n]
    got = run_checks(
        skill_checks(skill), f"## {one}\none two three\n\n## {two}\none two three", Task(id="t", input="x")
    )
    # three words: over the first limit, within the second
    assert sorted(got[n] for n in limits) == [False, True]
    assert all(n.isascii() and n.isidentifier() for n in names)


# ------------------------------------------------------------------ 10: a check no output can pass


def test_a_section_enumeration_sharing_its_section_with_a_field_is_reported_as_unsatisfiable(
    tmp_path, capsys, monkeypatch
):
    write(tmp_path, "```\n## Verdict\n<approve | reject>\nReason: <why>\n```")
    code, out, err = check_run(tmp_path, capsys, monkeypatch)
    assert code == 2 and "Traceback" not in err
    assert err.startswith("demo/SKILL.md:19: ") and "verdict_one_of" in err and "no output can pass" in err


@pytest.mark.parametrize(
    "rules",
    [
        "- The `Summary` section has at most 50 words.\n- The `Summary` section has at least 80 words.",
        "- The whole output is at most 50 lines.\n- The `Steps` section has at least 60 lines.",
    ],
)
def test_contradictory_limits_are_reported_naming_both_lines(tmp_path, capsys, monkeypatch, rules):
    write(tmp_path, TEMPLATE, rules)
    code, out, err = check_run(tmp_path, capsys, monkeypatch)
    assert code == 2 and "Traceback" not in err
    assert err.startswith("demo/SKILL.md:40: ") and "contradicts" in err and "SKILL.md:39" in err, err


def test_limits_that_can_both_hold_are_no_contradiction(tmp_path):
    assert (
        derive(
            make(
                tmp_path,
                TEMPLATE,
                "- The `Summary` section has at least 3 words.\n- The `Summary` section has at most 30 words.",
            )
        ).problems
        == ()
    )


# ------------------------------------------------------------------ a val task with a train task's input


def test_check_warns_about_a_val_task_whose_input_is_a_train_tasks(tmp_path, capsys, monkeypatch):
    make(tmp_path, TEMPLATE)
    tasks = tmp_path / "demo" / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps(t) + "\n"
            for t in [
                {"id": "a", "input": "Refs #12."},
                {"id": "b", "input": "Refs #13."},
                {"id": "v", "input": " Refs  #12.\n", "split": "val"},
                {"id": "w", "input": "Refs #14.", "split": "val"},
            ]
        )
    )
    code, out, err = check_run(tmp_path, capsys, monkeypatch)
    assert code == 0, err
    assert err.strip() == (
        "warning: demo/tasks.jsonl:3: val task 'v' has the same input as train task 'a' (line 1): "
        "its val reward measures recall of a trained task, not the skill"
    )
