"""The reward: the documented formula, and that it tells good outputs from their corruptions."""

import re
from pathlib import Path

import pytest

from skill_rl.diffs import parse_diff
from skill_rl.rubric import check, combine, run_checks, score_offline, skill_checks
from skill_rl.skills import load_skill

ROOT = Path(__file__).resolve().parent.parent
SKILLS = {name: load_skill(ROOT / "skills" / name) for name in ("git-commit", "code-review", "release-notes")}
TYPES = ("build", "chore", "ci", "docs", "feat", "fix", "perf", "refactor", "revert", "style", "test")


@check("format", gate=True)
def _gate(output, task):
    return output.startswith("ok")


@check("format")
def _short(output, task):
    return len(output) < 10


@check("correctness")
def _half(output, task):
    return 0.5


FNS = [_gate, _short, _half]
SKILL = SKILLS["git-commit"]  # weights 0.3 / 0.4 / 0.3


def test_reward_is_the_weighted_mean_over_scored_dimensions():
    s = combine(SKILL, FNS, run_checks(FNS, "ok", None))
    assert (s.format, s.procedure, s.correctness) == (1.0, None, 0.5)
    assert s.reward == pytest.approx((0.3 * 1.0 + 0.3 * 0.5) / 0.6) and not s.judged


def test_judge_and_checks_average_within_a_dimension_and_the_judge_fills_the_rest():
    s = combine(SKILL, FNS, run_checks(FNS, "ok but far too long", None), {"procedure": 0.8, "correctness": 0.1})
    assert s.format == 0.5 and s.procedure == 0.8 and s.correctness == pytest.approx((0.5 + 0.1) / 2)
    assert s.reward == pytest.approx(0.3 * 0.5 + 0.4 * 0.8 + 0.3 * 0.3) and s.judged


def test_a_failed_gate_zeroes_its_dimension_even_with_a_perfect_judge():
    s = combine(SKILL, FNS, run_checks(FNS, "no", None), {"format": 1.0, "procedure": 1.0})
    assert s.format == 0.0 and s.checks["_short"] is True


@pytest.mark.parametrize("name", sorted(SKILLS))
def test_every_reference_passes_every_check_of_its_skill(name):
    skill = SKILLS[name]
    fns = skill_checks(skill)
    for task in skill.tasks:
        failed = {k: v for k, v in run_checks(fns, task.reference, task).items() if v not in (None, True, 1.0)}
        assert not failed, f"{task.id}: {failed}"


def _commit_corruptions(task):
    ref, exp = task.reference, task.expect
    header, _, rest = ref.partition("\n")
    wrong = next(t for t in TYPES if t not in (exp.type, *exp.alt_types))
    yield "wrong type", re.sub(r"^\w+", wrong, ref, count=1)
    if exp.breaking:
        unbroken = header.replace("!:", ":", 1) + "\n" + re.sub(r"\n*BREAKING[ -]CHANGE:.*", "", rest, flags=re.S)
        yield "dropped breaking marker", unbroken.rstrip()
    yield "vague subject", re.sub(r": .*$", ": update code", header, count=1) + ("\n" + rest if rest else "")
    yield "prose around the message", f"Here is the commit message:\n\n{ref}\n\nLet me know if you want changes."


def _review_corruptions(task):
    ref, exp = task.reference, task.expect
    diff = parse_diff(task.input)
    first_file = next(iter(diff.files))
    first_line = min(diff.files[first_file].visible)
    if exp.defects:
        yield "LGTM on a defective diff", "## Summary\nLooks good.\n\n## Findings\nNone.\n\n## Verdict\napprove"
    else:
        findings = f"## Findings\n- issue (blocking): {first_file}:{first_line} this looks wrong.\n"
        alarm = ref.replace("## Verdict\napprove", "## Verdict\nrequest-changes").replace("## Findings\nNone.\n", "## Findings\n")
        yield "false alarm on a clean diff", alarm.replace("## Findings\n", findings, 1)
    yield "finding on a line not in the diff", ref.replace(
        "## Verdict", f"- suggestion (non-blocking): {first_file}:99999 rename this.\n\n## Verdict", 1).replace("None.\n-", "-")


def _notes_corruptions(task):
    ref = task.reference
    numbers = re.findall(r"#\d+", task.input)
    yield "an entry dropped, its number uncited", ref.replace(f"({numbers[0]})", "").replace(f"{numbers[0]}, ", "").replace(f"{numbers[0]}\n", "\n")
    yield "numbers the input does not hold", re.sub(r"#(\d+)", lambda m: f"#{int(m[1]) + 100000}", ref)
    yield "wrapped in a code fence", f"```markdown\n{ref}\n```"
    yield "chatter first", f"Here are the release notes:\n\n{ref}"
    yield "four highlights", ref.replace("## Highlights\n", "## Highlights\n- More\n- More\n- More\n- More\n", 1)


@pytest.mark.parametrize("name", sorted(SKILLS))
def test_on_every_val_task_the_reference_beats_each_of_its_corruptions(name):
    skill = SKILLS[name]
    corruptions = {"git-commit": _commit_corruptions, "code-review": _review_corruptions, "release-notes": _notes_corruptions}[name]
    for task in skill.split("val"):
        pairs = list(corruptions(task))
        scores = score_offline(skill, task, [task.reference, *(text for _, text in pairs)])
        for (why, text), bad in zip(pairs, scores[1:]):
            assert bad.reward < scores[0].reward, f"{task.id}: {why} scored {bad.reward} >= {scores[0].reward}\n{text}"
