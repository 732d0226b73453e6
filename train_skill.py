"""Train a small model to follow a markdown skill, with RL (OpenPipe ART + RULER).

A skill is a folder: `skills/<name>/SKILL.md` (procedure, output format, rules), `tasks.jsonl`
(inputs, with optional expectations) and, optionally, `checks.py` (deterministic checks). Each
training step samples `--rollouts-per-group` answers per task with SKILL.md as the system prompt,
scores every group with the rubric (format 30 %, procedure 40 %, correctness 30 % by default:
code checks what code can check, RULER judges the rest, relatively, within the group), and
trains with `backend.train`. The group-relative advantage is GRPO's; unlike textbook GRPO, the
reward is a weighted rubric whose judged part is itself relative (RULER ranks the group at once).

    python train_skill.py --skill git-commit                    # train (GPU, W&B serverless, Tinker; else a CPU rehearsal)
    python train_skill.py --skill git-commit --sft              # a supervised warm start first (see warmstart.py)
    python train_skill.py --skill git-commit --check            # lint the skill and its tasks
    python train_skill.py --skill git-commit --score out.jsonl  # score given outputs
    python train_skill.py --skill git-commit --audit            # does the configured judge pay for the skill's exploits?
    python train_skill.py --skill git-commit --tasks-from-git ../repo  # tasks from a repository's history
    python train_skill.py --skill git-commit --eval --model gpt-4.1-mini --model local=qwen@http://127.0.0.1:8000/v1
    python train_skill.py --skill git-commit --export out/      # hand on a checkpoint: adapter, merged model, card
    python train_skill.py --list | --init NAME

Re-running the same command resumes the run (same --run-name); Ctrl-C stops after the step.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import sys
import time
from pathlib import Path

from skill_rl import export, keys, mining, progress, settings
from skill_rl.commands import cli, config, evaluate, score
from skill_rl.errors import Exit
from skill_rl.scoring import audit
from skill_rl.settings import Settings
from skill_rl.skills import SkillError, find_skill, load_skill, skill_dirs
from skill_rl.training import anchor, backends, warmstart

HERE = Path(__file__).resolve().parent


def parse_args(argv=None) -> Settings:
    """The command line as typed settings (skill_rl/settings/__init__.py declares every flag); exit 2 on a bad one."""
    return settings.parse(argv, description=__doc__.split("\n\n")[0])


# ------------------------------------------------------------------ training


async def train(run: config.Run, skill) -> int:
    """Warm start (--sft), then steps of: gather and score groups, train, log, validate now and then."""
    from art.utils.iterate_dataset import iterate_dataset

    from skill_rl.training.steps import Trainer

    # a judge that pays for an exploit: exit 2 before anything runs
    await audit.guard(run.settings, skill, run.judge)
    s, t = run.settings, await Trainer.start(run, skill)
    step = 0
    try:
        # the base model, to see what the warm start does
        await t.validate_base(run.sft)
        # --sft: before the first RL step, once
        turns = backends.turn_tokens(t.backend, s.base_model) if run.sft and t.skill.tools else None
        warm = await warmstart.run(s, run.sft, t.model, t.scorer, t.train_tasks, t.stop, turns)
        t.totals.warm_start_failures = warm.failures
        # the warm start's checkpoints count as steps
        step, last = await t.model.get_step(), s.steps + warm.steps
        if warm.trained:
            await t.validate(step)
        # kept on resume
        t.anchor = anchor.resolve(s, t.model, t.backend, step)
        print(
            f"run {s.project}/{s.run_name}: starting at step {step} of {last} on backend {t.kind}"
            + (f"; {t.anchor.describe()}" if t.anchor.active else ""),
            flush=True,
        )
        for batch in iterate_dataset(
            t.train_tasks, s.groups_per_step, t.epochs(), initial_step=step - warm.steps, use_tqdm=False
        ):
            if step >= last or t.stop.is_set():
                break
            start = time.perf_counter()
            groups, stats, used = await t.gather(batch.items, f"step {step + 1}", t.carries(step + 1 - warm.steps))
            if not groups:
                print(f"step {step + 1}: every group failed; nothing to train on", file=sys.stderr)
                continue
            # a step is trained and logged whole, or not at all
            with t.stopper.shielded():
                result = await t.backend.train(t.model, groups, learning_rate=s.learning_rate, **t.anchor.kwargs())
                step = result.step
                means, warning = await t.log_step(groups, result, stats, used, step)
            print(t.step_line(step, means, stats, used, time.perf_counter() - start, warning), flush=True)
            # all imported by now (ART, torch, litellm: ~900k objects): no full GC scans them again
            if t.totals.steps == 1:
                gc.collect()
                gc.freeze()
            if step % s.eval_every == 0 and step < last:
                await t.validate(step)
        if not t.val_results or t.val_results[-1][0] != step:
            await t.validate(step)
        await t.plot.done()
        # ART's order: delete, then close
        kept = await backends.keep_best_and_latest(t.model, step, t.anchor.keep())
    except asyncio.CancelledError:
        if not t.stopper.aborted:
            raise
        raise Exit(
            t.stopper.exit_code(1),
            f"stopped at once during step {step + 1}: nothing of it was trained; "
            f"the same command resumes at step {step + 1}",
        ) from None
    finally:
        await t.close()
    return t.report(kept)


# ------------------------------------------------------------------ entry point


def main(argv=None) -> int:
    args = parse_args(argv)
    from skill_rl.settings.env import load_env, loopback_without_proxy

    try:
        # ./.env (or a parent's), then beside this script; the shell's variables win
        load_env(HERE)
    except Exit as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    # the process's own endpoints on 127.0.0.1 never go through a proxy
    loopback_without_proxy()
    # no network fetch of litellm's price map
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    keys.collect(*(v for k, v in vars(args).items() if k.endswith("api_key")), *keys.url_passwords(vars(args).values()))
    # the command itself (script, -m, console script): redact until the process ends
    if argv is None:
        keys.redact_process_output()
        # other libraries' tqdm bars too (loading GGUF weights), as ours and ART's
        if not progress.shown(args.quiet):
            # read when tqdm is first imported: before ART, transformers
            os.environ.setdefault("TQDM_DISABLE", "1")
    try:
        # whatever is printed from here on, by us or a library, names no key
        with keys.redacted_output():
            code = run(args)
            # a pipe's buffer: its reader's absence shows here, not at the interpreter's exit
            sys.stdout.flush()
            return code
    # stdout's reader went away (`| head`), or a disk filled up: one line, no traceback
    except OSError as e:
        # Python flushes stdout once more at exit: point it at nothing first
        if e.errno == errno.EPIPE:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            print("error: stdout was closed by its reader; stopped", file=sys.stderr)
            return 1
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            print(f"error: {e.strerror}{f': {e.filename}' if e.filename else ''}; stopped", file=sys.stderr)
            return 1
        raise


def training(run: config.Run, skill) -> int:
    """The default command: say where it trains and with what, then train."""
    for note in run.notes:
        print(note, file=sys.stderr)
    print(run.plan.describe())
    cli.print_config(run.settings, run.judge)
    return asyncio.run(train(run, skill))


# Every command, by the name config.command gives it: each takes the resolved run and its skill (None for --list
# and --init), and returns the exit status.
COMMANDS = {
    "list": cli.list_command,
    "init": cli.init_command,
    "tasks_from_git": mining.run,
    "check": cli.check_command,
    "export": export.run,
    "score": score.run,
    "audit": audit.run,
    "eval": evaluate.run,
    "train": training,
}


def load(s: Settings, command: str):
    """The skill a command works on: None for --list and --init; --tasks-from-git reads no tasks."""
    if command in ("list", "init"):
        return None
    if not s.skill:
        raise Exit(2, "pass --skill NAME (see --list), or --list / --init NAME")
    return load_skill(find_skill(skill_dirs(s.skills_dir), s.skill), with_tasks=command != "tasks_from_git")


def run(s: Settings) -> int:
    try:
        skill = load(s, config.command(s))
        # every setting, once; problems exit 2 before anything runs
        setup = config.resolve(s, skill)
        return COMMANDS[setup.command](setup, skill)
    except SkillError as e:
        print("\n".join(e.problems), file=sys.stderr)
        return 2
    except Exit as e:
        print(f"error: {e}" if e.code else str(e), file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
