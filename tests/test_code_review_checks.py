"""The code-review checks, as tables of literal reviews with a reason per row."""

import re
from pathlib import Path

import pytest

from skill_rl.scoring.diffs import parse_diff
from skill_rl.skills import Task, load_skill

ROOT = Path(__file__).resolve().parent.parent
checks = load_skill(ROOT / "skills/code-review", with_tasks=False).checks

DIFF = """diff --git a/app/users.py b/app/users.py
index 46d7478..a85bf90 100644
--- a/app/users.py
+++ b/app/users.py
@@ -5,5 +5,10 @@ def connect(path):
     return sqlite3.connect(path)
 
 
+def find_user(conn, name):
+    cur = conn.execute(f"SELECT id, name FROM users WHERE name = '{name}'")
+    return cur.fetchone()
+
+
 def count(rows):
     return len(rows)
diff --git a/app/util.py b/app/util.py
new file mode 100644
index 0000000..eb89695
--- /dev/null
+++ b/app/util.py
@@ -0,0 +1,2 @@
+def last_items(xs, n):
+    return [xs[i] for i in range(len(xs) - n, len(xs) - 1)]
"""
EXPECT = {
    "verdict": "request-changes",
    "defects": [
        {"file": "app/users.py", "lines": [9, 9], "kind": "injection"},
        {"file": "app/util.py", "lines": [2, 2], "kind": "off-by-one"},
    ],
}
TASK = Task(id="t", input=DIFF, expect=checks.Expect.model_validate(EXPECT))
CLEAN = Task(id="c", input=DIFF, expect=checks.Expect.model_validate({"verdict": "approve"}))


def review(findings="", verdict="request-changes", summary="Adds a user lookup and a list helper."):
    return f"## Summary\n{summary}\n\n## Findings\n{findings}\n\n## Verdict\n{verdict}\n"


SQL = "- issue (blocking, security): app/users.py:9 the name is formatted into SQL; pass it as a parameter."
OBO = "- issue (blocking): app/util.py:2 the range stops one short and drops the last item."
GOOD = review(SQL + "\n" + OBO)
FALSE = "- issue (blocking): app/users.py:13 `count` is wrong."
REMARKS = "\n".join(f"- nitpick (non-blocking): app/users.py:{n} style." for n in (5, 6, 13, 14))
WIDE = "- issue (blocking): app/users.py:5-14 this function is injectable."
NO_EXPECT = Task(id="n", input=DIFF)


def test_diff_reader_sees_added_and_context_lines():
    d = parse_diff(DIFF)
    assert sorted(d.files["app/users.py"].visible) == list(range(5, 15))
    assert sorted(d.files["app/users.py"].added) == [8, 9, 10, 11, 12]
    assert sorted(d.files["app/util.py"].visible) == [1, 2]
    assert d.changed_lines == 7


# (check, review, task, expected, reason)
ROWS = [
    ("three_sections", GOOD, TASK, True, "all three sections in order"),
    ("three_sections", GOOD.replace("## Verdict", "## Decision"), TASK, False, "verdict section renamed"),
    (
        "three_sections",
        "## Findings\n" + SQL + "\n\n## Summary\nx\n\n## Verdict\napprove",
        TASK,
        False,
        "sections out of order",
    ),
    ("three_sections", "LGTM", TASK, False, "not a review at all"),
    ("review_only", GOOD, TASK, True, "nothing around the review"),
    ("review_only", "Here is my review:\n\n" + GOOD, TASK, False, "chatter before the first section"),
    ("review_only", "```markdown\n" + GOOD + "```", TASK, False, "wrapped in a code fence"),
    ("summary_written", GOOD, TASK, True, "one sentence"),
    ("summary_written", review(SQL, summary=""), TASK, False, "empty summary"),
    ("summary_written", review(SQL, summary="One. Two. Three. Four."), TASK, False, "more than three sentences"),
    ("findings_well_formed", GOOD, TASK, 1.0, "valid Conventional Comments lines"),
    ("findings_well_formed", review("- the SQL on app/users.py:9 is injectable"), TASK, 0.0, "no label"),
    (
        "findings_well_formed",
        review(SQL + "\n- bug (blocking): app/util.py:2 off by one"),
        TASK,
        0.5,
        "'bug' is not a label",
    ),
    ("findings_well_formed", review("None.", "approve"), CLEAN, 1.0, "None. is a valid empty Findings section"),
    ("findings_well_formed", review("", "approve"), CLEAN, 0.0, "an empty Findings section is not"),
    ("locations_exist", GOOD, TASK, 1.0, "both locations are shown in the diff"),
    (
        "locations_exist",
        review(SQL + "\n- issue (blocking): app/util.py:40 x"),
        TASK,
        0.5,
        "line 40 is not in the diff",
    ),
    ("locations_exist", review("- issue (blocking): app/models.py:3 x"), TASK, 0.0, "file not in the diff"),
    ("locations_exist", review("- issue (blocking): app/users.py:12-16 x"), TASK, 0.0, "a range running past the hunk"),
    ("locations_exist", review("None.", "approve"), CLEAN, None, "nothing cited, nothing to check"),
    ("verdict_stated", GOOD, TASK, True, "request-changes"),
    ("verdict_stated", review(SQL, "LGTM"), TASK, False, "not one of the two verdicts"),
    ("verdict_follows_findings", review(SQL, "approve"), TASK, False, "approve despite a blocking finding"),
    (
        "verdict_follows_findings",
        review("- nitpick (non-blocking): app/users.py:10 name it row", "approve"),
        CLEAN,
        True,
        "non-blocking only",
    ),
    ("defects_detected", GOOD, TASK, 1.0, "both planted defects cited, nothing else: recall 1, precision 1"),
    ("defects_detected", review(SQL), TASK, pytest.approx(2 / 3), "one of two: R 0.5, P 1, F1 2/3"),
    (
        "defects_detected",
        review("- praise (non-blocking): app/users.py:9 neat query"),
        TASK,
        0.0,
        "praise on the defect line does not count",
    ),
    (
        "defects_detected",
        review("- issue (blocking): app/users.py:8-10 injectable\n" + OBO),
        TASK,
        1.0,
        "a range within SLACK lines of the defect counts in full",
    ),
    ("defects_detected", review("None.", "approve"), TASK, 0.0, "LGTM on a defective diff: recall 0"),
    (
        "defects_detected",
        review(SQL + "\n" + OBO + "\n" + FALSE),
        TASK,
        pytest.approx(0.8),
        "one blocking false alarm: P 2/3, F1 0.8",
    ),
    (
        "defects_detected",
        review(SQL + "\n" + OBO + "\n" + FALSE.replace("blocking", "non-blocking")),
        TASK,
        1.0,
        "a non-blocking remark off the defects costs nothing up to the allowance of two",
    ),
    (
        "defects_detected",
        review(SQL + "\n" + OBO + "\n" + REMARKS),
        TASK,
        pytest.approx(2 * 0.8 / 1.8),
        "four remarks: two free, two at 0.25: P 2/2.5 = 0.8",
    ),
    (
        "defects_detected",
        review(SQL + "\n" + OBO + "\n" + SQL),
        TASK,
        pytest.approx(0.8),
        "the same defect reported twice, blocking: the second report is a false alarm",
    ),
    (
        "defects_detected",
        review(WIDE + "\n" + OBO),
        TASK,
        pytest.approx(2 * 0.8 * 0.8 / 1.6),
        "a 10-line range for a 1-line defect earns 6/10 of it: R 0.8, P 0.8",
    ),
    ("defects_detected", GOOD, CLEAN, pytest.approx(1 / 3), "on a clean diff two blocking findings cost 1 each"),
    (
        "defects_detected",
        review("- nitpick (non-blocking): app/users.py:10 name it row", "approve"),
        CLEAN,
        1.0,
        "one nitpick on a clean diff is within the allowance",
    ),
    ("defects_detected", review("None.", "approve"), CLEAN, 1.0, "nothing raised on a clean diff"),
    ("defects_detected", GOOD, NO_EXPECT, None, "without expect nothing is planted, nothing to score"),
    ("summary_grounded", GOOD, TASK, 1.0, "the summary names what the diff adds"),
    (
        "summary_grounded",
        review(SQL, summary="Looks good to me."),
        TASK,
        0.0,
        "a summary that names nothing in the diff",
    ),
    (
        "summary_grounded",
        review(SQL, summary="Adds `find_user` and `last_items`."),
        TASK,
        1.0,
        "code names the diff holds",
    ),
    (
        "summary_grounded",
        review(SQL, summary="Adds `find_user` and `OrderRepository.save`."),
        TASK,
        0.5,
        "half of its code names are invented",
    ),
    (
        "summary_grounded",
        review(SQL, summary="Adds `find_user`, `last_items` and `fetchone` for the `UserLookup` screen."),
        TASK,
        1.0,
        "one name in four absent from the diff: the feature a human names the change for, not invented",
    ),
    ("summary_grounded", review(SQL, summary=""), TASK, 0.0, "no summary"),
    ("verdict_right", GOOD, TASK, True, "request-changes on a defective diff"),
    ("verdict_right", review("None.", "approve"), TASK, False, "approve on a defective diff"),
    ("verdict_right", review("None.", "approve"), CLEAN, True, "approve on a clean diff"),
    (
        "no_phantom_lines",
        review(SQL + "\n- issue (blocking): app/users.py:99 x"),
        TASK,
        0.5,
        "one finding on a line that does not exist",
    ),
    ("no_false_alarms", review(SQL), CLEAN, False, "a blocking finding on a clean diff"),
    ("findings_specific", GOOD, TASK, 1.0, "each finding names what is on its line (name, SQL) or the defect"),
    (
        "findings_specific",
        review("- issue (blocking): app/users.py:9 this is wrong and must be fixed before merging."),
        TASK,
        0.0,
        "the right line, nothing said about it",
    ),
    (
        "findings_specific",
        review("- issue (blocking): app/users.py:9 `name` must not go in there."),
        TASK,
        0.5,
        "one name from the line",
    ),
    (
        "findings_specific",
        review("- issue (blocking): app/util.py:2 `- 1` drops the last item."),
        TASK,
        1.0,
        "an operator quoted from the line, and its words",
    ),
    (
        "findings_specific",
        review("- issue (blocking): app/users.py:9 injectable: a null check is missing."),
        TASK,
        1.0,
        "classes of defect say something even without a name",
    ),
    (
        "findings_specific",
        review("- issue (blocking): app/users.py:14 `find_user` breaks with `cur`."),
        TASK,
        0.0,
        "names from another hunk of the file (lines 8-10) are not about line 14",
    ),
    (
        "findings_specific",
        review("- issue (blocking): app/util.py:2 keep `len(xs) - 1` as it was."),
        TASK,
        1.0,
        "an expression quoted from the line says what the finding is about",
    ),
    (
        "findings_specific",
        review("- issue (blocking): app/util.py:2 `OrderRepository.save()` is the wrong call."),
        TASK,
        0.0,
        "an expression the lines do not hold says nothing about them",
    ),
    ("findings_specific", review("None.", "approve"), CLEAN, None, "no findings, nothing to say"),
    ("no_false_alarms", review("None.", "approve"), CLEAN, True, "nothing raised on a clean diff"),
]


@pytest.mark.parametrize("name,text,task,expected,reason", ROWS, ids=[f"{r[0]}: {r[4]}" for r in ROWS])
def test_code_review_checks(name, text, task, expected, reason):
    assert getattr(checks, name)(text, task) == expected


def test_expect_schema_rejects_inconsistent_verdicts():
    with pytest.raises(ValueError, match="verdict must be 'request-changes' when defects are listed"):
        checks.Expect.model_validate({"verdict": "approve", "defects": EXPECT["defects"]})
    with pytest.raises(ValueError, match="lines must be"):
        checks.Expect.model_validate(
            {"verdict": "request-changes", "defects": [{"file": "a", "lines": [5, 2], "kind": "race"}]}
        )


# ------------------------------------------------------------------ on real fixes (tests/data/review-*.jsonl)


def _real():
    from skill_rl.skills import load_tasks

    problems = []
    tasks = [
        t for p in sorted((ROOT / "tests/data").glob("review-*.jsonl")) for t in load_tasks(p, checks.Expect, problems)
    ]
    assert not problems
    return tasks


SKILL = load_skill(ROOT / "skills/code-review", with_tasks=False)
REAL = _real()
FIXES = [t for t in REAL if t.expect.defects]


def _rewrite(task, finding):
    """The reference with each finding line passed through `finding`."""
    lines = task.reference.split("\n")
    return "\n".join(finding(ln) if ln.startswith("- ") else ln for ln in lines)


def _share_below(pairs):
    from skill_rl.scoring.rubric import score_offline

    below = 0
    for task, good, bad in pairs:
        a, b = score_offline(SKILL, task, [good, bad])
        below += b.reward < a.reward
    return below / len(pairs)


# a finding's location kept, its words vague
def VAGUE(ln):
    return re.sub(r"^(- [^:]+: \S+:\d+(?:-\d+)?) .*$", r"\1 this is wrong and must be fixed before merging.", ln)


# the fix's own words, no code quoted
def SUBJECT_ONLY(ln):
    return re.sub(r"\); (keep|drop) `.*$", ").", ln)


def test_real_fixes_are_enough_and_their_defects_are_shown_lines():
    assert len(FIXES) >= 40 and len(REAL) - len(FIXES) >= 10
    for t in FIXES:
        assert all(parse_diff(t.input).has_lines(d.file, *d.lines) for d in t.expect.defects)


@pytest.mark.parametrize("precise", [None, SUBJECT_ONLY], ids=["the reference", "the fix's subject, no code quoted"])
def test_a_finding_that_says_nothing_about_its_lines_loses_to_a_precise_one_on_real_fixes(precise):
    pairs = [(t, _rewrite(t, precise) if precise else t.reference, _rewrite(t, VAGUE)) for t in FIXES]
    assert _share_below(pairs) >= 0.9


def test_adding_blocking_findings_to_the_real_review_never_pays_on_real_fixes():
    from skill_rl.scoring.rubric import score_offline

    above = 0
    for t in FIXES:
        taken = {(d.file, n) for d in t.expect.defects for n in range(d.lines[0], d.lines[1] + 1)}
        free = [(p, n) for p, f in parse_diff(t.input).files.items() for n in sorted(f.visible) if (p, n) not in taken][
            :2
        ]
        extra = "".join(f"\n- issue (blocking): {p}:{n} this line must change before merging." for p, n in free)
        more = t.reference.replace("\n\n## Verdict", extra + "\n\n## Verdict")
        ref, bad = score_offline(SKILL, t, [t.reference, more])
        above += bad.reward > ref.reward
    assert above <= 0.05 * len(FIXES)


def test_one_verdict_for_everything_loses_on_real_data_either_way():
    # skills/code-review/exploits.py
    own = SKILL.exploits
    pairs = [(t, t.reference, own.lgtm(None, t)) for t in FIXES]
    pairs += [(t, t.reference, own.always_request_changes(None, t)) for t in REAL if not t.expect.defects]
    assert _share_below(pairs) == 1.0


# ------------------------------------------------------------------ calibrated on the real references (tests/data/)

REVIEWS = sorted((ROOT / "tests" / "data").glob("review-*.jsonl"))


@pytest.mark.parametrize("expect", [True, False], ids=["with expect", "without expect"])
@pytest.mark.parametrize("path", REVIEWS, ids=[p.stem for p in REVIEWS])
def test_every_code_review_check_passes_the_real_references(path, expect):
    """Each check passes at least 97 % of the references it applies to (one miss where it applies to fewer than 34),
    and at most 3 % of them score below 0.8 by the checks alone: `python bench/calibration.py --skill code-review
    tests/data/review-*.jsonl` prints the table."""
    from skill_rl.scoring import calibration, exploits

    skill = exploits.load_real(load_skill(ROOT / "skills" / "code-review", with_tasks=False), [path], expect)
    cal = calibration.calibrate(skill)
    assert cal.kept == cal.tasks >= 5
    misses = [
        f"{r.name}: {r.passed}/{r.applied} {r.failures}"
        for r in cal.checks.values()
        if r.rate < calibration.MIN_PASS and (r.applied >= 34 or r.applied - r.passed > 1)
    ]
    assert not misses and cal.low <= calibration.MAX_LOW, (misses, cal.low)


@pytest.mark.parametrize("strip", [True, False], ids=["without expect", "with expect"])
def test_score_without_a_judge_says_it_cannot_tell_a_review_verdict_without_expect(tmp_path, capsys, strip):
    """Without `expect` nothing says whether a diff needs changes: `--score --judge none` says the reward cannot tell
    (an LGTM and the right review both keep the form), and says nothing of the kind when `expect` is there."""
    import json
    import shutil

    from train_skill import main

    folder = tmp_path / "skills" / "code-review"
    shutil.copytree(ROOT / "skills" / "code-review", folder)
    rows = [json.loads(line) for line in (folder / "tasks.jsonl").read_text().splitlines()]
    if strip:
        (folder / "tasks.jsonl").write_text(
            "".join(json.dumps({k: v for k, v in r.items() if k != "expect"}) + "\n" for r in rows)
        )
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"task_id": r["id"], "outputs": [r["reference"]]}) + "\n" for r in rows[:4]))
    code = main(
        [
            "--skills-dir",
            str(tmp_path / "skills"),
            "--skill",
            "code-review",
            "--score",
            str(src),
            "--judge",
            "none",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    # exit 1 only when a check ran past its second (a loaded machine)
    assert code == 0 or "timed out after" in err, err
    assert ("the reward cannot tell whether these answers are right" in err) is strip, err
