"""What a CPU rehearsal is set up with: the short run's defaults, LoRA and batching, and the lines that
say what the run is and how long it should take. Imports nothing heavy.
"""

from __future__ import annotations

import os
from pathlib import Path

from skill_rl.cpu.weights import TINY_MODEL, busy_cores, locate, precision, quiet_threads, threads
from skill_rl.prompts import Fade
from skill_rl.settings.defaults import CPU_DEFAULTS, CPU_TOOL_DEFAULTS

# Short runs that finish on two CPU cores; every one can be overridden by its flag. The tiny base model
# never writes a Conventional Commits header (0 of 192 samples), so RL alone has nothing to rank: a
# warm start on the train tasks' references comes first, at a rate that teaches the format in one epoch
# (at 5e-5 or 2e-4 it does not; README, "Learning on CPU"). Validation takes the first 6 val tasks.
# RL's rate, 3e-4, was picked, not tuned: the one run measured (README) is all we know of it.
DEFAULTS = CPU_DEFAULTS
# a skill with tools: these over DEFAULTS
TOOL_DEFAULTS = CPU_TOOL_DEFAULTS


LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


# completions generated together
GEN_BATCH = 16


# how long the server waits for another request before generating: each arrival keeps the batch open this long again,
# up to BATCH_WAIT_S after its first. A tool episode's next requests come back as their calls finish: 16 of a
# git-commit-agent step's, after its first turn, over 0.7 s with gaps of up to 0.17 s (a /tmp probe of the server's
# queue); with a window counted from the first request only, one of them went alone, or 9 and then 8 (27 + 26 s)
BATCH_WINDOW_S = 0.2
BATCH_WAIT_S = 2.0


# bytes of earlier prompts' keys and values the sampler keeps for a next turn that begins with one (prefixes.py):
# SmolLM2-135M's are 46 kB a token in float32, so ~45k tokens, a step's 16 tool episodes' chats at 1.5-2.5k each
PREFIX_BYTES = 2 << 30


# bytes a group's rows may hold for their backward pass at once (backend.py, CPUBackend._chunks): a training forward
# keeps every token's activations until the backward pass, so a group of long tool episodes holds gigabytes (6 rows
# of 1,267 tokens: 21.4 GB, a /tmp probe on the 2-core EPYC). Past this, its rows are backpropagated in chunks, one
# after another, with the same gradient (each chunk's own loss; with the KL penalty, the group's logprobs first,
# without gradients, then each chunk's share of the loss's gradient: one more forward pass of the group). A group
# whose rows go on alike counts each stretch once (the tree CPUBackend._tree runs): a git-commit-agent group's 4
# episodes, the same calls and results then their own commit, are ~1,800 tokens as a tree against ~3,800 whole
# (bench/cpu_group_train.py); 8 GiB (~2,700 tokens) lets most run as one tree on a 24 GB machine, where the half of
# the memory available that _budget also caps it at is 9-10 GB when a step starts.
TRAIN_GROUP_BYTES = 8 << 30
# what a token run with gradients holds until the backward pass, float32 (the layers' activations, the logits and
# their log-softmax over 49,152 words): 2.4-3.7 MB measured on SmolLM2-135M, one to four rows of 400-2,400 tokens
TRAIN_TOKEN_BYTES = 3 << 20


# Measured on git-commit with the README's first command on the quiet 2-core machine (docs/cpu-learning.md,
# "How long the rehearsal takes"; 925 s in all): seconds an RL step took with the defaults above (40-64 s, mean
# 49 over 10 steps), seconds per val task in a validation of 4 rollouts each (25-29 s for 6 tasks), seconds per
# warm-start example (296 s for 64), and the rest (imports, loading the model, the last checkpoint's report).
STEP_SECONDS, VAL_TASK_SECONDS, SFT_EXAMPLE_SECONDS, STARTUP_SECONDS = 49, 4.5, 4.6, 30
# An RL step whose prompts leave SKILL.md out (--internalize), as a share of one whose prompts carry it: the
# prefill and the training pass read the whole prompt, the decoding steps do not shrink (bench/internalize.py on
# the same quiet machine: 33.2 s a step without SKILL.md, against STEP_SECONDS; docs/internalize.md).
WITHOUT_SKILL_STEP_SHARE = 0.68


# A skill with tools (TOOL_DEFAULTS), measured the same way on git-commit-agent (docs/cpu-learning.md, "A skill that
# acts"; 2,730 s in all): an RL step of 16 episodes of up to 4 turns of 160 tokens, each turn reading a chat of
# 1.5-3k tokens (148-392 s, mean 287 over 6 steps), a val task's 4 episodes after the warm start (208 s and 273 s
# for 6 tasks), the base model's (72 s for 6: it writes no call, so its episodes end at the first turn), a
# warm-start example's epoch (3 epochs of 22 in 436 s).
TOOL_STEP_SECONDS, TOOL_VAL_TASK_SECONDS, TOOL_BASE_VAL_TASK_SECONDS, TOOL_SFT_EXAMPLE_SECONDS = 287, 40.1, 12.0, 6.6


# The constants above are a CPU's that multiplies bf16 natively (AMX), where the base is held in bf16. On one that
# does not, the base is held in float32 (weights.precision()) and every part takes longer; the text rehearsal measured
# the same way on such a machine (a 2-core AMD EPYC with AVX2, quiet; README's first command, commit e93c395;
# docs/cpu-learning.md, "How long the rehearsal takes"; 1,510 s in all): seconds an RL step took (49-120 s, mean
# 68 over 10 steps), seconds per val task (38-45 s for 6 tasks), seconds per warm-start example (644 s for 64).
FLOAT32_STEP_SECONDS, FLOAT32_VAL_TASK_SECONDS, FLOAT32_SFT_EXAMPLE_SECONDS = 68, 7.0, 10.1
# A skill with tools measured the same way on that machine (git-commit-agent with TOOL_DEFAULTS and its commit tool;
# docs/cpu-learning.md, "A skill that acts"; a clean clone of commit 3da6709, 2,201 s in all): seconds an RL step took
# (132-276 s, mean 212 over 6 steps), a val task's 4 episodes after the warm start (136.1 and 128.5 s for 6 tasks), the
# base model's (56.4 s for 6), a warm-start epoch per train task (3 epochs in 581 s; 16 of the 22 train tasks' reference
# episodes fit --max-tokens 160 and are trained on, so this counts the ones dropped as the run did).
FLOAT32_TOOL_STEP_SECONDS, FLOAT32_TOOL_VAL_TASK_SECONDS = 212, 22.1
FLOAT32_TOOL_BASE_VAL_TASK_SECONDS, FLOAT32_TOOL_SFT_EXAMPLE_SECONDS = 9.4, 8.8


def estimated_seconds(
    args, val_tasks: int, train_tasks: int, tools: bool = False, precision: str = "bfloat16"
) -> float:
    """How long a CPU run with these settings takes on the quiet 2-core machine the constants above were measured
    on: startup, the warm start's examples, the RL steps (cheaper without SKILL.md), the validations; `tools`: a
    skill with tools, whose episodes take turns; `precision`: the base's dtype (weights.precision()), float32 where
    the CPU has no native bf16. Each of the four (text or tools, bf16 or float32) has its own measured figures."""
    step, val_task, base_val_task, sft_example = {
        (False, False): (STEP_SECONDS, VAL_TASK_SECONDS, VAL_TASK_SECONDS, SFT_EXAMPLE_SECONDS),
        (True, False): (TOOL_STEP_SECONDS, TOOL_VAL_TASK_SECONDS, TOOL_BASE_VAL_TASK_SECONDS, TOOL_SFT_EXAMPLE_SECONDS),
        (False, True): (
            FLOAT32_STEP_SECONDS,
            FLOAT32_VAL_TASK_SECONDS,
            FLOAT32_VAL_TASK_SECONDS,
            FLOAT32_SFT_EXAMPLE_SECONDS,
        ),
        (True, True): (
            FLOAT32_TOOL_STEP_SECONDS,
            FLOAT32_TOOL_VAL_TASK_SECONDS,
            FLOAT32_TOOL_BASE_VAL_TASK_SECONDS,
            FLOAT32_TOOL_SFT_EXAMPLE_SECONDS,
        ),
    }[tools, precision == "float32"]
    per_step = (
        args.groups_per_step * args.rollouts_per_group / (DEFAULTS["groups_per_step"] * DEFAULTS["rollouts_per_group"])
    )
    # the warm start's checkpoint is a step
    warm = 1 if args.sft else 0
    last = warm + args.steps
    # validates with and without SKILL.md, the base model too
    internal = args.internalize
    # steps cost less as SKILL.md leaves their prompts (prompts.Fade: the expected share carrying it)
    if internal:
        fade = Fade(args.steps, args.internalize_floor)
        carried = sum(fade.probability(s) for s in range(1, args.steps + 1)) / max(1, args.steps)
        per_step *= carried + (1 - carried) * WITHOUT_SKILL_STEP_SHARE
    validations = (
        (2 * warm if warm else int(internal)) + sum(s % args.eval_every == 0 for s in range(warm + 1, last)) + 1
    )
    rows = min(val_tasks, args.limit or val_tasks) * args.rollouts_per_group / DEFAULTS["rollouts_per_group"]
    val = rows * val_task * (2 if internal else 1)
    # the base model's validation (step 0), before a warm start or an internalized run
    base = rows * (base_val_task - val_task) * (2 if internal else 1) if (warm or internal) else 0.0
    return (
        STARTUP_SECONDS
        + args.steps * step * per_step
        + validations * val
        + base
        + warm * train_tasks * args.sft_epochs * sft_example * (2 if internal else 1)
    )


# the constants above were measured with two torch threads on two idle cores
MEASURED_CORES = 2


def slowdown(busy: float, threads: int, cores: int) -> float:
    """How much longer than on MEASURED_CORES idle cores a run takes with `threads` torch threads while other work
    keeps `busy` cores busy: the cores it gets against MEASURED_CORES. Its threads get a core each while the cores
    go round; past that the scheduler shares the cores out by runnable thread, so its threads get
    cores x threads / (busy + threads). Never below 1: more cores than measured are not assumed to help."""
    gets = threads if busy + threads <= cores else cores * threads / (busy + threads)
    return max(1.0, MEASURED_CORES / gets)


def clock(args, seconds: float, busy: float, threads_: int, cores: int) -> str:
    """`about N min ...`: on a loaded machine the longer figure, the load and the threads; else the plain one."""
    base = max(1, round(seconds / 60))
    factor = slowdown(busy, threads_, cores)
    if factor < 1.1:
        return f"about {base} min on {MEASURED_CORES} cores ({threads_} torch thread{'s' * (threads_ != 1)})"
    return (
        f"about {max(1, round(seconds * factor / 60))} min here: other work keeps {busy:.1f} of {cores} cores busy, "
        f"so it runs on {threads_} torch thread{'s' * (threads_ != 1)} ({base} min on {MEASURED_CORES} idle cores)"
    )


def rehearsal(args, base_model: str, val_tasks: int, train_tasks: int, tools: bool = False) -> str:
    """The first lines of a CPU run: what it is, how long it should take here (the cores busy now measured once), how
    to run the real thing.

    Exits 2 first when the base model's weights are not on this machine."""
    locate(base_model)
    quiet_threads()
    busy = busy_cores()
    seconds = estimated_seconds(args, val_tasks, train_tasks, tools, precision())
    model = "SmolLM2-135M-Instruct, 135M parameters" if base_model == TINY_MODEL else base_model
    first = (
        f"a supervised warm start ({args.sft_epochs} epoch(s) at {args.sft_learning_rate:g}), then " if args.sft else ""
    )
    return (
        f"backend cpu: a rehearsal, not the real run: {first}RL of a small model ({model}) on this CPU, "
        f"{args.steps} steps of {args.groups_per_step} tasks x {args.rollouts_per_group} answers of at most "
        f"{args.max_tokens} tokens: {clock(args, seconds, busy, threads(busy), os.cpu_count() or 1)}. A model this "
        "small learns "
        "an output's format, not its content.\n"
        "the real run: a CUDA GPU (--backend local), W&B Serverless (WANDB_API_KEY) or Tinker (TINKER_API_KEY); "
        "see README, 'Quick start'"
    )


def serve_hint(checkpoint: Path, args, eval_flags: str = "") -> str:
    """How to evaluate a CPU run's checkpoint against its base model: in this process (commands/cpu_evaluation.py), or served.
    `eval_flags`: added to the --eval command (an --internalize run's: its arms with and without SKILL.md). Both
    commands carry the run's --max-tokens: --eval's own default (1,024) lets a 135M model loop for minutes."""
    extra = "" if args.base_model == TINY_MODEL else f" --base-model {args.base_model}"
    project = "" if args.project == "skill-rl" else f" --project {args.project}"
    step = int(checkpoint.name)
    return (
        f"evaluate it against its base model, in this process: python train_skill.py --skill {args.skill} --eval "
        f"--backend cpu --run-name {args.run_name}{project}{extra} --checkpoint {step} --max-tokens {args.max_tokens}"
        f"{eval_flags}\n"
        f"  or serve it, and its base model as `base`: python -m skill_rl.cpu --checkpoint {checkpoint}{extra}\n"
        f'  then, with its key: OPENAI_API_KEY="$(cat .art/cpu-server-8000.key)" ... --eval --judge none '
        f"--max-tokens {args.max_tokens}{eval_flags} --model base@http://127.0.0.1:8000/v1 "
        "--model trained@http://127.0.0.1:8000/v1"
    )
