"""Derived checks measured on two corpora of SKILL.md excerpts (tests/data/skills-corpus/README.md):
`real/` holds our own excerpts of 16 public SKILL.md files (each constraint restated in our words, in the phrasing
type the original uses; the side file lists the constraints a careful reader finds in the original), the top folder
22 self-written excerpts. Each `<name>.md` holds an Output Format and Rules, and `<name>.json` the
constraints a careful reader finds (by the check name derivation gives such a constraint, or a name of our
own for one no derived form states) and an example output that keeps them all. Precision: the share of derived
prose checks that state an expected constraint (with its number); recall: the share of expected constraints
derived. The template's own checks (headings, template_lines, placeholders_filled) are left out of both.
`python -m pytest tests/test_derived_corpus.py -s -n0` prints the figures."""

import json
from pathlib import Path

import pytest
from conftest import skill_folder

from skill_rl.scoring.derived import derive
from skill_rl.skills import Task, load_skill

CORPUS = Path(__file__).resolve().parent / "data" / "skills-corpus"
GROUPS = {"real-based": CORPUS / "real", "self-written": CORPUS}
TEMPLATE_CHECKS = {"headings", "template_lines", "placeholders_filled"}
HEAD = "---\nname: {name}\ndescription: Corpus excerpt.\n---\n\n# {name}\n\n## Procedure\n\n1. Read the input.\n2. Write the output.\n\n"


def corpus(tmp_path, folder):
    for md in sorted(p for p in folder.glob("*.md") if p.name != "README.md"):
        side = json.loads(md.with_suffix(".json").read_text())
        skill = skill_folder(
            tmp_path / folder.name,
            md.stem,
            md=HEAD.format(name=md.stem) + md.read_text(),
            tasks=[{"id": "a", "input": side["input"]}],
        )
        yield md.stem, load_skill(skill), side


def _states(d, expected: dict) -> bool:
    limit = d.fn.limit
    return d.fn.__name__ == expected["check"] and (
        "n" not in expected or (limit is not None and limit[3] == expected["n"])
    )


def measure(tmp_path, folder):
    rows = []
    for name, skill, side in corpus(tmp_path, folder):
        found = derive(skill)
        assert found.problems == (), found.problems
        prose = [d for d in found.checks if d.fn.__name__ not in TEMPLATE_CHECKS]
        right = [d for d in prose if any(_states(d, e) for e in side["constraints"])]
        seen = [e for e in side["constraints"] if any(_states(d, e) for d in prose)]
        rows.append((name, skill, side, found, prose, right, seen))
    return rows


@pytest.mark.parametrize("group", list(GROUPS))
def test_derived_checks_on_the_corpus_are_precise_and_recall_is_reported(tmp_path, group):
    rows = measure(tmp_path, GROUPS[group])
    assert len(rows) >= (15 if group == "real-based" else 20)
    derived = sum(len(r[4]) for r in rows)
    right = sum(len(r[5]) for r in rows)
    expected = sum(len(r[2]["constraints"]) for r in rows)
    seen = sum(len(r[6]) for r in rows)
    for name, _, side, found, prose, ok, got in rows:
        wrong = [f"{d.fn.__name__} ({d.fn.__doc__})" for d in prose if d not in ok]
        missed = [e["check"] for e in side["constraints"] if e not in got]
        print(
            f"{name:24} derived {len(prose)}, right {len(ok)}, expected {len(side['constraints'])}, not derived listed "
            f"{len(found.ignored)}"
            + (f"; wrong: {', '.join(wrong)}" if wrong else "")
            + (f"; missed: {', '.join(missed)}" if missed else "")
        )
    print(
        f"{group} corpus: {len(rows)} excerpts, {expected} constraints, {derived} derived prose checks; "
        f"precision {right}/{derived} = {right / derived:.2f}, recall {seen}/{expected} = {seen / expected:.2f}"
    )
    assert right / derived >= 0.95


@pytest.mark.parametrize("group", list(GROUPS))
def test_no_derived_check_fails_an_excerpts_own_example(tmp_path, group):
    checked = 0
    for name, _skill, side, found, *_ in measure(tmp_path, GROUPS[group]):
        task = Task(id="t", input=side["input"])
        for d in found.checks:
            result = d.fn(side["example"], task)
            checked += 1
            assert result is None or result is True or (result is not False and result >= 1), (
                f"{name}: {d.fn.__name__} ({d.fn.__doc__}) fails the example: {result}"
            )
    assert checked
