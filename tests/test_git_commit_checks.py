"""The git-commit checks, as tables of literal messages with a reason per row."""

from pathlib import Path

import pytest

from skill_rl.skills import Task, load_skill

ROOT = Path(__file__).resolve().parent.parent
checks = load_skill(ROOT / "skills/git-commit", with_tasks=False).checks
NO_TASK = Task(id="t", input="diff --git a/a b/a\n")
LONG = "x" * 101
URL_LINE = "See https://example.com/" + "a" * 100 + " for the details"

# (message, commitlint errors expected (config-conventional, error level), reason)
COMMITLINT = [
    ("feat: add dark mode toggle", [], "minimal valid header"),
    ("fix(parser): handle empty input", [], "scope is free-form"),
    ("feat(api)!: drop the v1 endpoints", [], "breaking marker before the colon"),
    ("refactor!: rename Config to Settings", [], "breaking marker without scope"),
    ("Feat: add dark mode toggle", ["type-case", "type-enum"], "type must be lower case (and then is not in the enum)"),
    ("FIX: handle empty input", ["type-case", "type-enum"], "upper-case type"),
    ("feature: add dark mode toggle", ["type-enum"], "type not in the list"),
    ("wip: add dark mode toggle", ["type-enum"], "wip is not a type"),
    ("add dark mode toggle", ["type-empty", "subject-empty"], "no type at all: header does not parse"),
    (": add dark mode toggle", ["type-empty"], "empty type before the colon"),
    ("feat:add dark mode toggle", ["type-empty", "subject-empty"], "no space after the colon: header does not parse"),
    ("feat: ", ["subject-empty", "header-trim"], "empty subject, trailing space"),
    ("feat:", ["type-empty", "subject-empty"], "colon without a subject does not parse"),
    ("feat: Add dark mode toggle", ["subject-case"], "sentence-case subject"),
    ("feat: Add Dark Mode Toggle", ["subject-case"], "start-case subject"),
    ("feat: ADD DARK MODE", ["subject-case"], "upper-case subject"),
    ("feat: AddDarkMode", ["subject-case"], "pascal-case subject"),
    ("feat: add `DarkMode` toggle", [], "a capitalised name inside the subject is fine"),
    ("docs: 2 typos fixed in the guide", [], "subject-case only applies to subjects starting with a letter"),
    ("feat: add dark mode toggle.", ["subject-full-stop"], "full stop at the end of the subject"),
    ("feat: add dark mode toggle...", [], "an ellipsis is not a full stop"),
    ("Added dark mode.", ["type-empty", "subject-empty", "subject-full-stop"], "prose: no type, and a full stop"),
    ("Here is the message:", ["type-empty", "subject-empty"], "a header ending in a colon is exempt from the full stop rule"),
    ("feat: add dark mode toggle!", [], "other punctuation is not a full stop"),
    ("feat: " + "a" * 94, [], "header of exactly 100 characters"),
    ("feat: " + "a" * 95, ["header-max-length"], "header of 101 characters"),
    ("feat: " + "a" * 92 + "\U0001F600\U0001F600", ["header-max-length"], "100 code points but 102 UTF-16 units, as JavaScript counts"),
    (" feat: add dark mode toggle", ["type-empty", "subject-empty", "header-trim"], "leading space: no type, and untrimmed"),
    ("feat: add dark mode toggle  ", ["header-trim"], "trailing whitespace in the header"),
    ("fix: handle empty input\n\n" + LONG, ["body-max-line-length"], "body line over 100 characters"),
    ("fix: handle empty input\n\n" + "x" * 100, [], "body line of exactly 100 characters"),
    ("fix: handle empty input\n\n" + URL_LINE, [], "long body line holding a URL is exempt"),
    ("fix: handle empty input\n\nRefs: " + LONG, ["body-max-line-length"], "footer line over 100 characters"),
    ("fix: handle empty input\nno blank line before the body", [], "missing blank line is only a warning"),
    ("\n\nfix: handle empty input\n\n", [], "surrounding blank lines are trimmed"),
    ("```\nfix: handle empty input\n```", ["type-empty", "subject-empty"], "a code fence is not a header"),
    ("Here is the commit message:\n\nfix: handle empty input", ["type-empty", "subject-empty"], "prose before the message"),
    ("chore(deps): bump serde to 1.0.200", [], "chore with a scope"),
    ("revert: feat(api): add cursor pagination", [], "revert of a conventional header"),
    ("perf(db)!: batch inserts\n\nBREAKING CHANGE: insert() returns a list", [], "breaking footer"),
    ("ci: run tests on Python 3.13", [], "capitals later in the subject are fine"),
    ("style: reformat with black", [], "style type"),
    ("test: cover the empty-input branch", [], "test type"),
    ("build: pin numpy below 3", [], "build type"),
    ("feat(ui) : add toggle", ["type-empty", "subject-empty"], "space before the colon does not parse"),
]


@pytest.mark.parametrize("message,errors,reason", COMMITLINT, ids=[r[2] for r in COMMITLINT])
def test_commitlint_config_conventional_rules(message, errors, reason):
    assert checks.commitlint_errors(message) == errors
    assert checks.conventional(message, NO_TASK) is (not errors)


# (check name, message, expected, reason) for the skill's own stricter style
STYLE = [
    ("header_fits", "feat: " + "a" * 66, True, "72 characters is the limit"),
    ("header_fits", "feat: " + "a" * 67, False, "73 characters is over the skill's limit though commitlint allows it"),
    ("imperative", "feat: add dark mode", True, "imperative verb"),
    ("imperative", "feat: added dark mode", False, "past tense"),
    ("imperative", "feat: adds dark mode", False, "third person"),
    ("imperative", "feat: adding dark mode", False, "gerund"),
    ("imperative", "fix: updates the parser", False, "third person with -es"),
    ("imperative", "feat: this adds dark mode", False, "starts with a determiner"),
    ("imperative", "perf: embed the index in the binary", True, "verbs that end in -ed are not past tense"),
    ("imperative", "fix: bring back the retry", True, "verbs that end in -ing are not gerunds"),
    ("imperative", "fix: pass the timeout through", True, "verbs that end in -ss are not third person"),
    ("specific_subject", "fix: update code", False, "only vague words"),
    ("specific_subject", "fix: bug", False, "a single word"),
    ("specific_subject", "fix: correct typo in README", True, "says what changed"),
    ("blank_line_after_header", "fix: x\nbody", False, "body glued to the header"),
    ("blank_line_after_header", "fix: x\n\nbody", True, "one blank line"),
    ("blank_line_after_header", "fix: x", None, "no body, nothing to check"),
    ("body_wrapped", "fix: x\n\n" + "w " * 36, True, "72 characters"),
    ("body_wrapped", "fix: x\n\n" + "w" * 73, False, "73 characters"),
    ("body_wrapped", "fix: x\n\n" + URL_LINE, True, "URL lines are exempt"),
    ("breaking_marked_both_ways", "feat!: drop v1\n\nBREAKING CHANGE: v1 is gone", True, "both markers"),
    ("breaking_marked_both_ways", "feat!: drop v1", False, "! without the footer"),
    ("breaking_marked_both_ways", "feat: drop v1\n\nBREAKING CHANGE: v1 is gone", False, "footer without the !"),
    ("breaking_marked_both_ways", "feat!: drop v1\n\nBREAKING-CHANGE: v1 is gone", True, "BREAKING-CHANGE is a synonym"),
    ("breaking_marked_both_ways", "feat!: drop v1\n\nbreaking change: v1 is gone", False, "the token must be upper case"),
    ("message_only", "fix: x\n\nbody", True, "just the message"),
    ("message_only", "```\nfix: x\n```", False, "code fence"),
    ("message_only", "fix: x\n\nNote: I guessed the scope.", False, "chatter after the message"),
    ("message_only", "**fix: x**", False, "markdown bold"),
]


@pytest.mark.parametrize("name,message,expected,reason", STYLE, ids=[f"{r[0]}: {r[3]}" for r in STYLE])
def test_skill_style_checks(name, message, expected, reason):
    assert getattr(checks, name)(message, NO_TASK) is expected


def task(expect=None, diff="diff --git a/a b/a\n"):
    return Task(id="t", input=diff, expect=checks.Expect.model_validate(expect) if expect else None)


CORRECTNESS = [
    ("type_right", "fix: x", {"type": "fix"}, True, "same type"),
    ("type_right", "refactor: x", {"type": "fix", "alt_types": ["refactor"]}, True, "accepted alternative"),
    ("type_right", "feat: x", {"type": "fix"}, False, "wrong type"),
    ("type_right", "x", {"type": "fix"}, False, "no type at all"),
    ("scope_right", "fix(auth): x", {"type": "fix", "scope": "auth"}, True, "same scope"),
    ("scope_right", "fix(Auth): x", {"type": "fix", "scope": "auth"}, True, "scope compared case-insensitively"),
    ("scope_right", "fix: x", {"type": "fix", "scope": "auth"}, False, "missing expected scope"),
    ("scope_right", "fix(db): x", {"type": "fix"}, None, "no scope expected, not scored"),
    ("breaking_right", "feat!: x\n\nBREAKING CHANGE: y", {"type": "feat", "breaking": True}, True, "breaking marked"),
    ("breaking_right", "feat: x", {"type": "feat", "breaking": True}, False, "breaking change not marked"),
    ("breaking_right", "feat!: x", {"type": "feat", "breaking": False}, False, "false alarm"),
    ("breaking_right", "Changed stuff.", {"type": "feat", "breaking": False}, False, "not a commit message gets no credit"),
]


@pytest.mark.parametrize("name,message,expect,expected,reason", CORRECTNESS, ids=[f"{r[0]}: {r[4]}" for r in CORRECTNESS])
def test_correctness_checks(name, message, expect, expected, reason):
    assert getattr(checks, name)(message, task(expect)) is expected


def test_correctness_checks_are_not_scored_without_expect():
    assert all(getattr(checks, n)("fix: x", task()) is None for n in ("type_right", "scope_right", "breaking_right"))


def test_body_required_only_for_nontrivial_diffs():
    small = "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,1 +1,1 @@\n-x\n+y\n"
    big = "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,0 +1,12 @@\n" + "".join(f"+line {i}\n" for i in range(12))
    assert checks.body_when_nontrivial("fix: x", task(diff=small)) is None
    assert checks.body_when_nontrivial("fix: x", task(diff=big)) is False
    assert checks.body_when_nontrivial("fix: x\n\nThe cache kept stale rows after a rename.", task(diff=big)) is True
