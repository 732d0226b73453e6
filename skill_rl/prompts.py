"""What the policy is asked with: SKILL.md as the system message, or what stands in for it when the skill is
left out, and `--internalize`'s schedule of which prompts carry the skill.

`--internalize` trains the skill into the weights: early rollouts see SKILL.md, later ones less and less
often, the last ones never (after a warm start, which trains with SKILL.md and without it, none: default_floor);
the scorer always sees it (scoring/reward.py builds its own messages from SKILL.md), so the reward still pays
for the skill while the policy learns to do without it. The choice
is made per (run seed, RL step, task), from a hash: every rollout of a group answers the same prompt (a
group compares answers to one prompt), and a resumed run makes the same choices it would have made.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from skill_rl.skills import Skill, Task

# under this key in ART's state.json: the run's --internalize schedule
STATE_KEY = "skill_rl_internalize"
# --without-skill: what replaces SKILL.md
WITHOUT = ("stub", "none", "description")
# --internalize-floor: the share of the last RL steps whose prompts never carry the skill
DEFAULT_FLOOR = 0.3
# its default after a warm start, which trained on every example with SKILL.md and without it
WARM_FLOOR = 1.0


def default_floor(warm_start: bool) -> float:
    """--internalize-floor when not given. After a warm start, 1: no RL prompt carries SKILL.md. The warm start has
    done what the fade's first steps are for (a model that writes the output with SKILL.md in its prompt), and RL
    steps with SKILL.md taught the model to rely on it: on the CPU rehearsal (greedy, 24 val tasks) the floor 0.3
    left the trained model without SKILL.md at 0.742 format / 0.690 overall against 0.974 / 0.809 with it; 1.0 gave
    0.985 / 0.837 against 0.987 / 0.841 (docs/internalize.md). Without a warm start, 0.3: RL's first steps need
    SKILL.md in the prompt to find answers that score at all."""
    return WARM_FLOOR if warm_start else DEFAULT_FLOOR


def stub(skill: Skill) -> str:
    """The one line that names the skill, where SKILL.md is left out (--without-skill stub)."""
    return f"Follow the {skill.name} skill."


def system_prompt(skill: Skill, with_skill: bool = True, without: str = "description") -> str | None:
    """The system message's text; None: no system message at all (--without-skill none)."""
    if with_skill:
        return skill.body
    return {"stub": stub(skill), "description": skill.description, "none": None}[without]


def messages(skill: Skill, task: Task, with_skill: bool = True, without: str = "description") -> list[dict]:
    system = system_prompt(skill, with_skill, without)
    return ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": task.input}
    ]


def estimated_tokens(msgs: list[dict]) -> int:
    """Prompt tokens when no server counted them: 3 characters a token plus 8 a message for the chat
    template, deliberately high as Skill.prompt_tokens is (code and diffs tokenize denser than prose)."""
    return sum(len(m["content"]) // 3 + 8 for m in msgs)


def prompt_tokens(completion, msgs: list[dict]) -> tuple[int, bool]:
    """The prompt's tokens for a chat completion of `msgs`: as the server counted them (its usage), else
    estimated (estimated_tokens); and whether they were estimated."""
    counted = getattr(getattr(completion, "usage", None), "prompt_tokens", None)
    if isinstance(counted, int) and counted > 0:
        return counted, False
    return estimated_tokens(msgs), True


def _uniform(*parts) -> float:
    """A number in [0, 1) fixed by `parts`: the same on every machine and in every process (no hash seed)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class Fade:
    """--internalize's schedule over RL steps 1..steps (the warm start's steps not counted): the
    probability that a task's prompt carries SKILL.md falls linearly from 1 at step 1 to 1/n at the last
    of the first n steps; the last ceil(floor x steps) steps are at 0, so the checkpoints kept at the end
    were trained on prompts without the skill only."""

    steps: int
    floor: float = DEFAULT_FLOOR
    seed: int = 0
    without: str = "stub"

    @property
    def fading(self) -> int:
        """RL steps with a probability above 0."""
        return max(0, self.steps - math.ceil(self.floor * self.steps))

    def probability(self, step: int) -> float:
        """For RL step `step` (1-based)."""
        if step < 1:
            return 1.0
        return max(0.0, (self.fading - step + 1) / self.fading) if self.fading else 0.0

    def carries(self, step: int, task_id: str) -> bool:
        """Whether RL step `step`'s prompt for this task carries SKILL.md."""
        p = self.probability(step)
        return p >= 1.0 or (p > 0.0 and _uniform(self.seed, step, task_id) < p)

    def describe(self, skill: Skill) -> str:
        probs = [self.probability(k) for k in range(1, self.steps + 1)]
        chance = (
            "no RL step (the warm start alone)"
            if not probs
            else ", ".join(f"{p:.2g}" for p in probs)
            if self.steps <= 12
            else f"from 1 at step 1 down to {probs[self.fading - 1]:.2g} at step {self.fading}, then 0 for the last "
            f"{self.steps - self.fading}"
            if self.fading
            else "0 throughout"
        )
        instead = {"stub": f'the line "{stub(skill)}"', "none": "absent", "description": "the skill's description"}[
            self.without
        ]
        return (
            f"--internalize: the chance that a prompt carries SKILL.md, per RL step: {chance}; without it the system "
            f"prompt is {instead}; the reward still scores against SKILL.md"
        )

    def record(self) -> dict:
        """What the run's state and records say of it."""
        return {
            "internalized": True,
            "schedule": "linear",
            "steps": self.steps,
            "floor": self.floor,
            "fading_steps": self.fading,
            "seed": self.seed,
            "without_skill": self.without,
            "probabilities": [round(self.probability(k), 4) for k in range(1, self.steps + 1)],
        }


def serve_lines(skill: Skill, without: str) -> list[str]:
    """How to use a model trained with --internalize: the end of its run says so."""
    sent = {
        "stub": f'the one line "{stub(skill)}" as the system message',
        "none": "no system message",
        "description": "the skill's description as the system message",
    }[without]
    return [
        "internalized (--internalize): this model was trained to follow the skill without SKILL.md in its prompt;",
        f"  for users: serve it as above and send {sent}, then the task as the user message; no SKILL.md",
        f"  for --eval: --baseline --without-skill {without} adds each model's row without SKILL.md, e.g. "
        "--model base@URL --model trained@URL: base and trained, with the skill and without, on the same tasks",
    ]


def internalized(run_dir) -> dict | None:
    """The --internalize record of a run folder's state.json, if it was trained so (for --export)."""
    import json
    from pathlib import Path

    try:
        state = json.loads((Path(run_dir) / "state.json").read_text())
    except (OSError, ValueError):
        return None
    record = state.get(STATE_KEY) if isinstance(state, dict) else None
    return record if isinstance(record, dict) and record.get("without_skill") in WITHOUT else None
