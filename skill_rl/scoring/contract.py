"""What a skill's checks pay for: the exploit contract of tests/test_exploits.py, as `--check` prints it for any skill.

The project's tests hold the shipped skills and the `--init` template to the contract (each degenerate policy of
skill_rl.scoring.exploits scores strictly below the task's reference on at least 90 % of the tasks, by the checks
alone). A user's own skill is held to nothing it did not ask for: `--check` measures the same families on it and
says which ones its checks pay and what to add, and never fails for it.

With references, each family is compared with them (on an even sample of at most SAMPLE tasks, three other
references per task, so that `--check` stays quick). Without any, only the families that need no reference are
tried: one constant answer (the Output Format with its placeholders filled in by their own words), a copy of the
input, the Output Format as written, its headings with nothing under them; each is compared with the most the
checks pay (a reward of 1), which is what a right answer can earn from them.

Checks only: this is the `--judge none` reward; a judge scores what the checks leave to it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple

from skill_rl.scoring import exploits
from skill_rl.scoring.rubric import score_offline, skill_checks
from skill_rl.skills import Skill

SAMPLE = 24
# as tests/test_exploits.py: below the reference on at least 90 % of the tasks
CONTRACT = 0.9
CONSTANT = "one constant answer for every task"
# the generic families that need no reference, by their names in exploits.GENERIC
WITHOUT_REFERENCE = (
    CONSTANT,
    "a copy of the input",
    "the Output Format's placeholders",
    "all sections present but empty",
)
PLACEHOLDER = re.compile(r"<([^<>\n]+)>")


class Family(NamedTuple):
    name: str
    # tasks (answers, for a family of several) that scored as high as the reference, or the checks' most
    paid: int
    # tasks it applied to (answers tried, for a family of several per task)
    tried: int
    unit: str = "tasks"

    @property
    def held(self) -> bool:
        return not self.tried or (self.tried - self.paid) >= CONTRACT * self.tried


class Contract(NamedTuple):
    families: list[Family]
    with_references: bool
    # tasks tried
    tasks: int
    # tasks the skill has (with a reference, when it has any)
    of: int
    # families that need a reference the skill's tasks lack
    unmeasured: list[str]


def filled_format(block: str) -> str:
    """The Output Format's template with each placeholder replaced by its own words (`<low | high>` by `low`): one
    well-formed answer that says nothing about any task."""

    def fill(m: re.Match) -> str:
        return m.group(1).split("|")[0].strip() or "text"

    return PLACEHOLDER.sub(fill, block)


def measure(skill: Skill) -> Contract:
    """The families the skill's checks pay, with references when its tasks have them."""
    refs = [t for t in skill.tasks if t.reference]
    if refs:
        sample = refs[:: -(-len(refs) // SAMPLE)]
        ctx = exploits.context(dataclasses.replace(skill, tasks=tuple(sample)), others=3)
        rates = exploits.rates_offline(ctx)
        families = [
            Family(r.exploit, r.tried - r.below, r.tried, "answers")
            if r.several
            else Family(r.exploit, r.tasks - r.tasks_below, r.tasks)
            for r in rates
        ]
        return Contract(families, True, len(sample), len(refs), [])
    return _without_references(skill)


def _without_references(skill: Skill) -> Contract:
    tasks = [t.model_copy(update={"reference": ""}) for t in skill.tasks[:: -(-len(skill.tasks) // SAMPLE) or 1]]
    generic = {e.name: e for e in exploits.GENERIC}
    tried = [generic[n] for n in WITHOUT_REFERENCE if n in generic]
    placeholders = generic.get("the Output Format's placeholders")
    ctx = exploits.Context(skill, tasks, "")
    if placeholders is not None and tasks:
        ctx = dataclasses.replace(ctx, constant=filled_format(placeholders.make(ctx, tasks[0]) or ""))
    paid = dict.fromkeys((e.name for e in tried), 0)
    for task in tasks:
        outputs = [e.make(ctx, task) for e in tried]
        with exploits.without_acting(skill, task, len(outputs)) as episodes:
            scores = score_offline(skill, task, outputs, episodes)
        for e, score in zip(tried, scores):
            paid[e.name] += score.reward >= 1 - 1e-9
    unmeasured = [e.name for e in exploits.catalogue(skill) if e.name not in paid]
    return Contract(
        [Family(n, k, len(tasks)) for n, k in paid.items()], False, len(tasks), len(skill.tasks), unmeasured
    )


def advice(skill: Skill, contract: Contract) -> list[str]:
    """What to add, one line each, for the families the checks pay (and for missing references)."""
    paid = {f.name for f in contract.families if not f.held}
    out = []
    if not contract.with_references:
        out.append(
            "a `reference` (a right answer) on some tasks: --check then compares every family with it, and "
            "the warm start trains on them"
        )
    if paid & {CONSTANT, "another task's reference"}:
        own = "a check in checks.py" if skill.checks is not None else "a checks.py with a check"
        out.append(
            f"`expect` on the tasks (what a right answer must say) and {own} that compares the output with it: "
            "nothing the checks read now tells one task's right answer from another's (docs/skills.md)"
        )
    if "the answer plus words for the judge" in paid:
        out.append(
            "a check that refuses words for the grader (skill_rl.scoring.injection.addresses_grader, as the "
            "--init template's checks.py does)"
        )
    if paid & {"the answer twice", "a 20,000-character answer"}:
        out.append(
            "a rule in SKILL.md that bounds the answer (each heading once, at most N lines or characters): "
            "--check then lists the check derived from it"
        )
    if not skill_checks(skill):
        out.append(
            "no check at all: without a judge the reward pays nothing; add an Output Format to SKILL.md or a checks.py"
        )
    return out
