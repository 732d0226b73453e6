"""A skill's categorical fields (scoring/categories.py): declared by checks.py's `categories`, else read from the
Output Format's `<a | b | c>` placeholders; read from answers as the collapse monitor and validation read them."""

from pathlib import Path

import pytest

from skill_rl.scoring import categories
from skill_rl.skills import load_skill

ROOT = Path(__file__).resolve().parent.parent


def skill(name: str):
    return load_skill(ROOT / "skills" / name)


@pytest.mark.parametrize(
    "name, field, values",
    [
        (
            "git-commit",
            "type",
            {"build", "chore", "ci", "docs", "feat", "fix", "perf", "refactor", "revert", "style", "test"},
        ),
        ("code-review", "verdict", {"approve", "request-changes"}),
        ("release-notes", "release type", {"major", "minor", "patch"}),
    ],
)
def test_every_shipped_skills_references_have_their_field_and_vary(name, field, values):
    rows, failure = categories.read_all(skill(name), [t.reference for t in skill(name).tasks if t.reference])
    counts = categories.distributions(rows)
    assert failure is None and set(counts) == {field}
    assert set(counts[field]) <= values and len(counts[field]) > 1 and sum(counts[field].values()) == len(rows)


def test_the_output_formats_placeholders_name_their_fields_by_label_or_heading():
    assert categories.declared(skill("release-notes")) == [("release type", ("major", "minor", "patch"))]
    assert categories.declared(skill("code-review")) == [("verdict", ("approve", "request-changes"))]
    # <type> has no alternatives: checks.py declares it
    assert categories.declared(skill("git-commit")) == []


@pytest.mark.parametrize(
    "output, value",
    [
        ("## Summary\nI approve of the idea.\n\n## Findings\nNone.\n\n## Verdict\nrequest-changes", "request-changes"),
        # any case, reported as the Output Format writes it
        ("## Verdict\nApprove", "approve"),
        # no Verdict line: no value, not the summary's word
        ("## Summary\nLooks fine, approve.\n\n## Findings\nNone.", None),
        # a whole word only
        ("## Verdict\napproved", None),
    ],
)
def test_a_reviews_verdict_is_read_from_the_line_that_names_it(output, value):
    rows, _ = categories.read_all(skill("code-review"), [output])
    assert rows == [{"verdict": value}]


def test_a_categories_function_that_fails_or_returns_garbage_is_reported_and_skipped(tmp_path):
    import shutil

    shutil.copytree(ROOT / "skills" / "git-commit", tmp_path / "git-commit")
    checks = tmp_path / "git-commit" / "checks.py"
    checks.write_text(
        checks.read_text()
        + "\n\ndef categories(output):\n    return {'type': 1} if 'x' in output else {'type': output[:3]}\n"
    )
    rows, failure = categories.read_all(load_skill(tmp_path / "git-commit"), ["feat: a", "fix: x"])
    assert rows == [{"type": "fea"}, {}] and "not a dict of str to str or None" in failure
    shutil.copytree(tmp_path / "git-commit", tmp_path / "loops" / "git-commit")
    checks = tmp_path / "loops" / "git-commit" / "checks.py"
    checks.write_text(checks.read_text() + "\n\ndef categories(output):\n    while True:\n        pass\n")
    rows, failure = categories.read_all(load_skill(tmp_path / "loops" / "git-commit"), ["feat: a"])
    assert rows == [{}] and failure.startswith("timed out")


def test_a_distribution_is_described_most_common_first():
    counts = categories.distributions([{"type": "feat"}, {"type": "fix"}, {"type": "feat"}, {"type": None}])
    assert categories.describe(counts) == "type: feat 2, fix 1"
