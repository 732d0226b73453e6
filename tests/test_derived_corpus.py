"""Derived checks measured on a corpus of SKILL.md excerpts written for this purpose (tests/data/skills-corpus/):
each `<name>.md` holds an Output Format and Rules phrased the way public skills phrase them, and `<name>.json` the
constraints a careful reader finds in it (by the check name derivation gives such a constraint, or a name of our
own for one no derived form states) and an example output that keeps them all. Precision: the share of derived
prose checks that state an expected constraint (with its number); recall: the share of expected constraints
derived. The template's own checks (headings, template_lines, placeholders_filled) are left out of both.
`python -m pytest tests/test_derived_corpus.py -s -n0` prints the figures."""

import json
from pathlib import Path

from skill_rl.scoring.derived import derive
from skill_rl.skills import Task, load_skill

CORPUS = Path(__file__).resolve().parent / "data" / "skills-corpus"
TEMPLATE_CHECKS = {"headings", "template_lines", "placeholders_filled"}
HEAD = "---\nname: {name}\ndescription: Corpus excerpt.\n---\n\n# {name}\n\n## Procedure\n\n1. Read the input.\n2. Write the output.\n\n"


def corpus(tmp_path):
    for md in sorted(CORPUS.glob("*.md")):
        side = json.loads(md.with_suffix(".json").read_text())
        folder = tmp_path / md.stem
        folder.mkdir()
        (folder / "SKILL.md").write_text(HEAD.format(name=md.stem) + md.read_text())
        (folder / "tasks.jsonl").write_text(json.dumps({"id": "a", "input": side["input"]}) + "\n")
        yield md.stem, load_skill(folder), side


def _states(d, expected: dict) -> bool:
    limit = d.fn.limit
    return d.fn.__name__ == expected["check"] and ("n" not in expected or (limit is not None and limit[3] == expected["n"]))


def measure(tmp_path):
    rows = []
    for name, skill, side in corpus(tmp_path):
        found = derive(skill)
        assert found.problems == (), found.problems
        prose = [d for d in found.checks if d.fn.__name__ not in TEMPLATE_CHECKS]
        right = [d for d in prose if any(_states(d, e) for e in side["constraints"])]
        seen = [e for e in side["constraints"] if any(_states(d, e) for d in prose)]
        rows.append((name, skill, side, found, prose, right, seen))
    return rows


def test_derived_checks_on_the_corpus_are_precise_and_recall_is_reported(tmp_path):
    rows = measure(tmp_path)
    assert len(rows) >= 15
    derived = sum(len(r[4]) for r in rows)
    right = sum(len(r[5]) for r in rows)
    expected = sum(len(r[2]["constraints"]) for r in rows)
    seen = sum(len(r[6]) for r in rows)
    for name, _, side, _, prose, ok, got in rows:
        wrong = [f"{d.fn.__name__} ({d.fn.__doc__})" for d in prose if d not in ok]
        missed = [e["check"] for e in side["constraints"] if e not in got]
        print(f"{name:22} derived {len(prose)}, right {len(ok)}, expected {len(side['constraints'])}"
              + (f"; wrong: {', '.join(wrong)}" if wrong else "") + (f"; missed: {', '.join(missed)}" if missed else ""))
    print(f"corpus: {len(rows)} excerpts, {expected} constraints, {derived} derived prose checks; "
          f"precision {right}/{derived} = {right / derived:.2f}, recall {seen}/{expected} = {seen / expected:.2f}")
    assert right / derived >= 0.95


def test_no_derived_check_fails_an_excerpts_own_example(tmp_path):
    for name, skill, side, found, *_ in measure(tmp_path):
        task = Task(id="t", input=side["input"])
        for d in found.checks:
            result = d.fn(side["example"], task)
            assert result is None or result is True or (result is not False and result >= 1), \
                f"{name}: {d.fn.__name__} ({d.fn.__doc__}) fails the example: {result}"
