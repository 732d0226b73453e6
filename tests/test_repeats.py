"""The step pass (skill_rl/scoring/repeats.py): what repeats across different tasks once each task's own words are
masked is paid for nowhere, and what is the same because it is right is never charged."""

import dataclasses
import json
from pathlib import Path

from conftest import skill_folder

from skill_rl.scoring import repeats
from skill_rl.scoring.rubric import score_offline
from skill_rl.skills import load_skill
from train_skill import main

ROOT = Path(__file__).resolve().parent.parent


def _diff(path: str, *added: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,0 +1,{len(added)} @@\n" + "".join(
        f"+{line}\n" for line in added
    )


DATES = _diff("src/dates.py", "def parse_date(text, fmt):", "    return strptime(text, fmt)")
RETRY = _diff("lib/client.ts", "const backoffMs = 200;", "export function retryRequest(req) {}")


def template(diff_names: tuple[str, str, str]) -> str:
    a, b, f = diff_names
    return f"fix: handle `{a}` in `{b}`\n\nUpdate `{f}`: change `{a}` and `{b}`."


def test_a_template_filled_with_each_tasks_names_is_seen_as_the_repeat_it_is():
    dates, retry = (
        template(("parse_date", "strptime", "dates.py")),
        template(("retryRequest", "backoffMs", "client.ts")),
    )
    # nothing repeats verbatim
    assert dates != retry
    penalties = repeats.shares([(DATES, dates), (RETRY, retry)])
    assert min(penalties) >= 0.5, penalties
    honest = [
        "fix: accept a format in parse_date\n\nCallers pass strptime formats now.",
        "feat: back off before retrying a request\n\nWait backoffMs between tries.",
    ]
    assert repeats.shares([(DATES, honest[0]), (RETRY, honest[1])]) == [0.0, 0.0]


def test_adding_unique_text_never_dilutes_the_penalty():
    boiler = "This change improves the overall quality and maintainability of the code."
    short = [(DATES, f"fix: parse dates\n\n{boiler}"), (RETRY, f"feat: add retries\n\n{boiler}")]
    long = [
        (
            DATES,
            f"fix: parse dates\n\n{boiler}\n\n" + "\n".join(f"Line {i}: parse_date now takes fmt." for i in range(9)),
        ),
        short[1],
    ]
    assert repeats.shares(long)[0] >= repeats.shares(short)[0] == 1.0


def test_short_answers_and_one_tasks_rollouts_are_never_charged():
    # a verdict, right for both
    assert repeats.shares([(DATES, "approve"), (RETRY, "approve")]) == [0.0, 0.0]
    # `<approve | request-changes>` in its template
    review = load_skill(ROOT / "skills" / "code-review")
    assert repeats.shares([(DATES, "request-changes"), (RETRY, "request-changes")], review) == [0.0, 0.0]
    # 10 letters
    assert repeats.shares([(DATES, "chore: bump deps"), (RETRY, "chore: bump deps")]) == [1.0, 1.0]
    same = "fix: one answer for every task whatever it is"
    assert repeats.shares([(DATES, same), (DATES, same)]) == [0.0, 0.0]
    assert repeats.shares([(DATES, same), (RETRY, same)]) == [1.0, 1.0]


LABEL_SKILL = """---
name: {name}
description: Label the sentiment of a product review. Use when reviews need sorting.
---

# Sentiment

## Procedure

1. Read the review.
2. Decide whether it is positive or negative.

## Output Format

```
<positive | negative>
{footer}```

## Rules

- Answer with the label only{rule}.
"""


def _skill(tmp_path: Path, name: str, footer: str = "", tasks=()) -> Path:
    rule = f", then the line `{footer.strip()}`" if footer else ""
    md = LABEL_SKILL.format(name=name, footer=footer, rule=rule)
    return skill_folder(tmp_path / "skills", name, md=md, tasks=tasks)


REVIEWS = [
    {"id": "r1", "input": "Battery lasts two days, screen is sharp.", "reference": "positive"},
    {"id": "r2", "input": "Arrived broken and support never replied.", "reference": "negative"},
    {"id": "r3", "input": "Fast shipping, the headphones sound great.", "reference": "positive"},
]


def _score_file(tmp_path, skills: Path, name: str, lines: list[dict]) -> list[dict]:
    src, out = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert (
        main(["--skills-dir", str(skills), "--skill", name, "--score", str(src), "--judge", "none", "--out", str(out)])
        == 0
    )
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_label_skill_keeps_full_reward_for_identical_right_answers(tmp_path):
    _skill(tmp_path, "sentiment", tasks=REVIEWS)
    records = _score_file(
        tmp_path, tmp_path / "skills", "sentiment", [{"task_id": t["id"], "outputs": [t["reference"]]} for t in REVIEWS]
    )
    assert [r["repeated"] for r in records] == [0.0, 0.0, 0.0]
    # r1 and r3 both "positive": right, not boilerplate
    assert all(r["reward"] == 1.0 for r in records), records


def test_a_footer_line_the_skill_prescribes_costs_nothing(tmp_path):
    footer = "Labelled by the review-triage bot, see the triage guide.\n"
    skill = load_skill(_skill(tmp_path, "signed", footer=footer, tasks=REVIEWS))
    answers = [f"{t['reference']} because {t['input'].lower()}\n{footer.strip()}" for t in REVIEWS]
    assert repeats.shares([(t["input"], a) for t, a in zip(REVIEWS, answers)], skill) == [0.0, 0.0, 0.0]
    # a line of the policy's own, on every answer
    own = "Labelled with care by the most accurate triage assistant."
    mine = [a.replace(footer.strip(), own) for a in answers]
    assert min(repeats.shares([(t["input"], a) for t, a in zip(REVIEWS, mine)], skill)) > 0.5


def test_a_review_with_three_extra_false_findings_never_outscores_the_precise_one_in_a_step():
    skill = load_skill(ROOT / "skills" / "code-review")
    tasks = [t for t in skill.tasks if t.reference and t.expect and t.expect.defects][:4]
    # said for every task
    summary = "## Summary\nThe change is sound apart from the finding below, which must be fixed."
    precise, shotgun = [], []
    for t in tasks:
        findings_and_verdict = "## Findings" + t.reference.split("## Findings", 1)[1]
        precise.append(f"{summary}\n\n{findings_and_verdict}")
        extra = skill.exploits.shotgun(None, t).split("## Findings", 1)[1]
        shotgun.append(f"{summary}\n\n## Findings{extra}")
    items = [(t.input, o) for t, o in zip(tasks, precise)] + [(t.input, o) for t, o in zip(tasks, shotgun)]
    penalties = repeats.shares(items, skill)
    for k, t in enumerate(tasks):
        p, s = penalties[k], penalties[len(tasks) + k]
        # the repeated summary costs both, never the longer one less
        assert p > 0 and s >= p, (t.id, p, s)
        checks = score_offline(skill, t, [precise[k], shotgun[k]])
        assert checks[1].reward * (1 - s) <= checks[0].reward * (1 - p), t.id


def test_a_line_of_the_tasks_own_reference_is_right_and_not_charged(tmp_path):
    shared = "Escalated to the support team for a follow-up."
    tasks = [dict(t, reference=f"{t['reference']}\n{shared}") for t in REVIEWS[:2]] + REVIEWS[2:]
    skill = load_skill(_skill(tmp_path, "escalating", tasks=tasks))
    answers = [(t["input"], f"{t['reference']} because {t['input'].lower()}\n{shared}") for t in REVIEWS]
    first, second, third = repeats.shares(answers, skill)
    # r3's reference does not escalate: there the line is boilerplate
    assert first == second == 0.0 and third > 0.5
    bare = load_skill(
        _skill(tmp_path, "unreferenced", tasks=[{k: v for k, v in t.items() if k != "reference"} for t in REVIEWS])
    )
    # no reference says the line is right
    assert min(repeats.shares(answers, bare)) > 0.5


def test_an_example_of_the_skill_md_copied_for_every_task_is_the_constant_answer():
    skill = load_skill(ROOT / "skills" / "git-commit")
    # SKILL.md's Examples section
    example = "fix(cli): exit with status 2 when the config file is missing"
    assert example in skill.body
    assert repeats.shares([(DATES, example), (RETRY, example)], skill) == [1.0, 1.0]


def test_the_step_pass_rarely_charges_human_messages_given_as_a_policys_answers():
    """Real commit messages, scored in steps of 8 as a policy's outputs with no reference to vouch for them: what
    two humans write alike by chance (a heading, a trailer) is structure, never charged; what is charged is text
    two commits share (a squashed body pasted twice, a templated "docs: add community plugin §")."""
    from skill_rl.scoring import exploits

    skill = load_skill(ROOT / "skills" / "git-commit", with_tasks=False)
    for name in ("git-commit-semantic-release", "git-commit-deno"):
        charged, scored = exploits.honest_charges(
            exploits.load_real(skill, [ROOT / "tests" / "data" / f"{name}.jsonl"])
        )
        assert scored == 400 and charged <= 0.05 * scored, (name, charged)


def test_structure_repeats_between_honest_answers_and_boilerplate_in_a_trailers_clothes_does_not_pass_for_it():
    shared = "## Validation\n\nRoot cause:\n\nSigned-off-by: A Person <a@example.com>"
    honest = [
        (DATES, f"fix: accept a format in parse_date\n\n{shared}"),
        (RETRY, f"feat: back off before retrying a request\n\n{shared}"),
    ]
    assert repeats.shares(honest) == [0.0, 0.0]
    smuggled = "Quality-Note: this change improves the overall quality and maintainability of the code"
    assert (
        min(repeats.shares([(DATES, f"fix: parse dates\n\n{smuggled}"), (RETRY, f"feat: add retries\n\n{smuggled}")]))
        == 1.0
    )


def test_a_template_line_filled_with_one_of_its_alternatives_costs_nothing_but_a_free_placeholder_filled_does():
    """`Release type: <major | minor | patch>` filled in is prescribed, on tasks without a reference too; a line
    whose placeholder is free text (`- <entry> (#<number>)`) is the answer's own content once filled."""
    skill = load_skill(ROOT / "skills" / "release-notes")
    bare = [t.model_copy(update={"reference": None}) for t in skill.tasks[:3]]
    skill = dataclasses.replace(skill, tasks=tuple(bare))
    assert {"Release type: major", "Release type: minor", "Release type: patch"} <= repeats.prescribed(skill)
    same = "Release type: minor"
    filler = "- Improve the handling of every option users pass (#1)"
    outputs = [
        f"# p {i}.0.0\n\n{same}\n\n## Fixes\n- fix number {i} of many: {t.input.split()[1]}" for i, t in enumerate(bare)
    ]
    assert repeats.shares([(t.input, o) for t, o in zip(bare, outputs)], skill) == [0.0] * 3
    padded = [f"{o}\n{filler}" for o in outputs]
    assert min(repeats.shares([(t.input, o) for t, o in zip(bare, padded)], skill)) > 0.5
