"""The code-review checks, as tables of literal reviews with a reason per row."""

from pathlib import Path

import pytest

from skill_rl.diffs import parse_diff
from skill_rl.skills import Task, load_skill

ROOT = Path(__file__).resolve().parent.parent
checks = load_skill(ROOT / "skills/code-review", with_tasks=False).checks

DIFF = '''diff --git a/app/users.py b/app/users.py
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
'''
EXPECT = {"verdict": "request-changes", "defects": [
    {"file": "app/users.py", "lines": [9, 9], "kind": "injection"},
    {"file": "app/util.py", "lines": [2, 2], "kind": "off-by-one"}]}
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
    ("three_sections", "## Findings\n" + SQL + "\n\n## Summary\nx\n\n## Verdict\napprove", TASK, False, "sections out of order"),
    ("three_sections", "LGTM", TASK, False, "not a review at all"),
    ("review_only", GOOD, TASK, True, "nothing around the review"),
    ("review_only", "Here is my review:\n\n" + GOOD, TASK, False, "chatter before the first section"),
    ("review_only", "```markdown\n" + GOOD + "```", TASK, False, "wrapped in a code fence"),
    ("summary_written", GOOD, TASK, True, "one sentence"),
    ("summary_written", review(SQL, summary=""), TASK, False, "empty summary"),
    ("summary_written", review(SQL, summary="One. Two. Three. Four."), TASK, False, "more than three sentences"),
    ("findings_well_formed", GOOD, TASK, 1.0, "valid Conventional Comments lines"),
    ("findings_well_formed", review("- the SQL on app/users.py:9 is injectable"), TASK, 0.0, "no label"),
    ("findings_well_formed", review(SQL + "\n- bug (blocking): app/util.py:2 off by one"), TASK, 0.5, "'bug' is not a label"),
    ("findings_well_formed", review("None.", "approve"), CLEAN, 1.0, "None. is a valid empty Findings section"),
    ("findings_well_formed", review("", "approve"), CLEAN, 0.0, "an empty Findings section is not"),
    ("locations_exist", GOOD, TASK, 1.0, "both locations are shown in the diff"),
    ("locations_exist", review(SQL + "\n- issue (blocking): app/util.py:40 x"), TASK, 0.5, "line 40 is not in the diff"),
    ("locations_exist", review("- issue (blocking): app/models.py:3 x"), TASK, 0.0, "file not in the diff"),
    ("locations_exist", review("- issue (blocking): app/users.py:12-16 x"), TASK, 0.0, "a range running past the hunk"),
    ("locations_exist", review("None.", "approve"), CLEAN, None, "nothing cited, nothing to check"),
    ("verdict_stated", GOOD, TASK, True, "request-changes"),
    ("verdict_stated", review(SQL, "LGTM"), TASK, False, "not one of the two verdicts"),
    ("verdict_follows_findings", review(SQL, "approve"), TASK, False, "approve despite a blocking finding"),
    ("verdict_follows_findings", review("- nitpick (non-blocking): app/users.py:10 name it row", "approve"), CLEAN, True, "non-blocking only"),
    ("defects_detected", GOOD, TASK, 1.0, "both planted defects cited, nothing else: recall 1, precision 1"),
    ("defects_detected", review(SQL), TASK, pytest.approx(2 / 3), "one of two: R 0.5, P 1, F1 2/3"),
    ("defects_detected", review("- praise (non-blocking): app/users.py:9 neat query"), TASK, 0.0,
     "praise on the defect line does not count"),
    ("defects_detected", review("- issue (blocking): app/users.py:8-10 injectable\n" + OBO), TASK, 1.0,
     "a range within SLACK lines of the defect counts in full"),
    ("defects_detected", review("None.", "approve"), TASK, 0.0, "LGTM on a defective diff: recall 0"),
    ("defects_detected", review(SQL + "\n" + OBO + "\n" + FALSE), TASK, pytest.approx(0.8),
     "one blocking false alarm: P 2/3, F1 0.8"),
    ("defects_detected", review(SQL + "\n" + OBO + "\n" + FALSE.replace("blocking", "non-blocking")), TASK, 1.0,
     "a non-blocking remark off the defects costs nothing up to the allowance of two"),
    ("defects_detected", review(SQL + "\n" + OBO + "\n" + REMARKS), TASK, pytest.approx(2 * 0.8 / 1.8),
     "four remarks: two free, two at 0.25: P 2/2.5 = 0.8"),
    ("defects_detected", review(SQL + "\n" + OBO + "\n" + SQL), TASK, pytest.approx(0.8),
     "the same defect reported twice, blocking: the second report is a false alarm"),
    ("defects_detected", review(WIDE + "\n" + OBO), TASK, pytest.approx(2 * 0.8 * 0.8 / 1.6),
     "a 10-line range for a 1-line defect earns 6/10 of it: R 0.8, P 0.8"),
    ("defects_detected", GOOD, CLEAN, pytest.approx(1 / 3), "on a clean diff two blocking findings cost 1 each"),
    ("defects_detected", review("- nitpick (non-blocking): app/users.py:10 name it row", "approve"), CLEAN, 1.0,
     "one nitpick on a clean diff is within the allowance"),
    ("defects_detected", review("None.", "approve"), CLEAN, 1.0, "nothing raised on a clean diff"),
    ("defects_detected", GOOD, NO_EXPECT, None, "without expect nothing is planted, nothing to score"),
    ("summary_grounded", GOOD, TASK, 1.0, "the summary names what the diff adds"),
    ("summary_grounded", review(SQL, summary="Looks good to me."), TASK, 0.0, "a summary that names nothing in the diff"),
    ("summary_grounded", review(SQL, summary="Adds `find_user` and `last_items`."), TASK, 1.0, "code names the diff holds"),
    ("summary_grounded", review(SQL, summary="Adds `find_user` and `OrderRepository.save`."), TASK, 0.5,
     "half of its code names are invented"),
    ("summary_grounded", review(SQL, summary=""), TASK, 0.0, "no summary"),
    ("verdict_right", GOOD, TASK, True, "request-changes on a defective diff"),
    ("verdict_right", review("None.", "approve"), TASK, False, "approve on a defective diff"),
    ("verdict_right", review("None.", "approve"), CLEAN, True, "approve on a clean diff"),
    ("no_phantom_lines", review(SQL + "\n- issue (blocking): app/users.py:99 x"), TASK, 0.5, "one finding on a line that does not exist"),
    ("no_false_alarms", review(SQL), CLEAN, False, "a blocking finding on a clean diff"),
    ("no_false_alarms", review("None.", "approve"), CLEAN, True, "nothing raised on a clean diff"),
]


@pytest.mark.parametrize("name,text,task,expected,reason", ROWS, ids=[f"{r[0]}: {r[4]}" for r in ROWS])
def test_code_review_checks(name, text, task, expected, reason):
    assert getattr(checks, name)(text, task) == expected


def test_expect_schema_rejects_inconsistent_verdicts():
    with pytest.raises(ValueError, match="verdict must be 'request-changes' when defects are listed"):
        checks.Expect.model_validate({"verdict": "approve", "defects": EXPECT["defects"]})
    with pytest.raises(ValueError, match="lines must be"):
        checks.Expect.model_validate({"verdict": "request-changes", "defects": [{"file": "a", "lines": [5, 2], "kind": "race"}]})
