"""What the code-review reward pays on real history: the rates docs/scoring.md quotes for tests/data/review-*.jsonl.

    python bench/reviews.py [FIXTURE.jsonl ...]

The fixture holds review tasks mined by `--tasks-from-git` from public Conventional-Commits repositories
(tests/data/README.md): real fixes, reversed so that the diff brings the bug back, and clean commits that
no later fix touched, to approve. For each, the task's reference (a review written from the fix: its
subject and the code it restored) is scored against what a reward-hacking policy writes instead, by the
checks alone (`--judge none`), with `expect` and without it. Takes a few seconds.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from skill_rl.scoring.diffs import parse_diff  # noqa: E402
from skill_rl.scoring.rubric import score_offline  # noqa: E402
from skill_rl.skills import load_skill, load_tasks  # noqa: E402

VAGUE = "this is wrong and must be fixed before merging."


def findings(task, rewrite) -> str:
    return "\n".join(rewrite(line) if line.startswith("- ") else line for line in task.reference.split("\n"))


def vague(line: str) -> str:
    return re.sub(r"^(- [^:]+: \S+:\d+(?:-\d+)?) .*$", rf"\1 {VAGUE}", line)


def subject_only(line: str) -> str:
    return re.sub(r"\); (keep|drop) `.*$", ").", line)


def added_blocking(task) -> str | None:
    taken = {(d.file, n) for d in task.expect.defects for n in range(d.lines[0], d.lines[1] + 1)}
    free = [(p, n) for p, f in parse_diff(task.input).files.items() for n in sorted(f.visible) if (p, n) not in taken][
        :2
    ]
    extra = "".join(f"\n- issue (blocking): {p}:{n} this line must change before merging." for p, n in free)
    return task.reference.replace("\n\n## Verdict", extra + "\n\n## Verdict") if free else None


def net(diff: str) -> int:
    """Lines added minus lines removed."""
    lines = [ln for ln in diff.split("\n") if not ln.startswith(("+++ ", "--- "))]
    return sum(ln[:1] == "+" for ln in lines) - sum(ln[:1] == "-" for ln in lines)


def rate(skill, pairs, strictly_above=False) -> str:
    hits = 0
    for task, good, bad in pairs:
        a, b = score_offline(skill, task, [good, bad])
        hits += b.reward > a.reward if strictly_above else b.reward < a.reward
    return f"{hits}/{len(pairs)} ({hits / len(pairs):.0%})" if pairs else "n/a"


def main(paths: list[str]) -> None:
    skill = load_skill(ROOT / "skills" / "code-review", with_tasks=False)
    # skills/code-review/exploits.py
    own = skill.exploits
    files = [Path(p) for p in paths] or sorted((ROOT / "tests" / "data").glob("review-*.jsonl"))
    problems: list[str] = []
    tasks = [t for f in files for t in load_tasks(f, skill.checks.Expect, problems)]
    if problems:
        sys.exit("\n".join(problems))
    fixes = [t for t in tasks if t.expect.defects]
    clean = [t for t in tasks if not t.expect.defects]
    print(f"{len(tasks)} tasks from {len(files)} file(s): {len(fixes)} reversed fixes, {len(clean)} clean commits")
    bare = [t.model_copy(update={"expect": None}) for t in fixes]
    rows = [
        (
            "vague finding on the right lines scores below the reference",
            rate(skill, [(t, t.reference, findings(t, vague)) for t in fixes]),
        ),
        (
            "... below the fix's own words (subject only, no code quoted)",
            rate(skill, [(t, findings(t, subject_only), findings(t, vague)) for t in fixes]),
        ),
        (
            "every run of added lines flagged (blocking) scores below the reference",
            rate(skill, [(t, t.reference, o) for t in fixes if (o := own.every_added_run(None, t))]),
        ),
        (
            "reference + two blocking findings scores strictly ABOVE the reference",
            rate(skill, [(t, t.reference, o) for t in fixes if (o := added_blocking(t))], strictly_above=True),
        ),
        (
            "LGTM (its summary names the code) scores below the reference, fixes",
            rate(skill, [(t, t.reference, own.lgtm(None, t)) for t in fixes]),
        ),
        (
            "request-changes scores below the reference, clean commits",
            rate(skill, [(t, t.reference, own.always_request_changes(None, t)) for t in clean]),
        ),
        (
            "without expect: LGTM scores below the reference, fixes",
            rate(skill, [(t, t.reference, own.lgtm(None, t)) for t in bare]),
        ),
    ]
    for what, value in rows:
        print(f"  {what:72} {value}")
    for name, group in (("reversed fixes", fixes), ("clean commits", clean)):
        shrinking = sum(net(t.input) < 0 for t in group)
        print(
            f"  {name} whose diff removes more lines than it adds: {shrinking}/{len(group)}"
            f" ({shrinking / max(1, len(group)):.0%}): a tell a policy could learn instead of the code"
        )
    covers = [score_offline(skill, t, [own.lgtm(None, t)])[0].covers.get("correctness", 0.0) for t in bare]
    print(
        f"  without expect, the checks cover at most {max(covers):.2f} of an LGTM's correctness (the rest is the judge's)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
