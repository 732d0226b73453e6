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

import argparse
import asyncio
import errno
import gc
import os
import sys
import time
from pathlib import Path

from skill_rl import config, configfile, export, flags, keys, mining, progress, prompts
from skill_rl.training import anchor, backends, warmstart
from skill_rl.errors import Exit
from skill_rl.scoring import audit
from skill_rl.skills import SkillError, find_skill, load_skill, skill_dirs

HERE = Path(__file__).resolve().parent


def parse_args(argv=None) -> argparse.Namespace:
    p = flags.Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    s = p.add_argument_group("skill")
    s.add_argument("--config", type=Path, metavar="FILE",
                   help="flags from a YAML file, keyed by the flags' names (a run folder's config.yaml runs it again); flags given here win")
    s.add_argument("--skill", type=flags.skill_name, help="skill folder name under --skills-dir")
    s.add_argument("--skills-dir", type=Path, default=None,
                   help="where skills live (default: ./skills if present, then the shipped skills; --init: ./skills)")
    s.add_argument("--list", action="store_true", help="list the skills with their descriptions")
    s.add_argument("--init", type=flags.skill_name, metavar="NAME", help="start a new skill NAME from the template")
    s.add_argument("--check", action="store_true", help="validate SKILL.md and tasks.jsonl, print a summary")
    s.add_argument("--score", type=Path, metavar="FILE", help="score the outputs in a JSONL file")
    s.add_argument("--eval", action="store_true", help="compare --model endpoints on the skill's held-out tasks")
    s.add_argument("--out", type=Path, help="--score: JSONL file (default stdout); --eval: output folder; --tasks-from-git: tasks file")
    s.add_argument("--resume", action="store_true", help="--score/--eval: keep what --out already holds, do only the rest")
    s.add_argument("--quiet", action="store_true", help="no progress bars (they are off anyway when output is not a terminal)")

    j = p.add_argument_group("judge (RULER)")
    j.add_argument("--judge", choices=("ruler", "none"), default=None,
                   help="'none' scores offline: checks only (default ruler; --backend cpu: none unless a judge is set up)")
    j.add_argument("--format-only-reward", action="store_true",
                   help="train with --judge none even when the checks cover little of correctness (raw tasks without "
                        "`expect`, a markdown-only skill): the reward then pays mostly for form")
    j.add_argument("--judge-model", default=None, help="LiteLLM model id (default openai/gpt-4.1-mini; with --judge-base-url, openai/<served name>)")
    j.add_argument("--judge-base-url", type=flags.url, default=None, help="OpenAI-compatible judge endpoint (vLLM, Ollama, ...); env JUDGE_BASE_URL")
    j.add_argument("--judge-api-key", default=None, help="judge API key; env JUDGE_API_KEY, else OPENAI_API_KEY")
    j.add_argument("--judge-attempts", type=flags.count(), default=3, help="tries per judge call before the group is scored by checks only")
    j.add_argument("--no-judge-cache", action="store_true",
                   help="judge every group afresh: neither read nor write the judge cache ($XDG_CACHE_HOME/skill-rl, else ~/.cache/skill-rl)")
    j.add_argument("--judge-timeout", type=flags.number(above=0), default=60.0, help="seconds per judge try")
    j.add_argument("--audit", action="store_true",
                   help="the judge audit alone: the skill's exploit families and the references of --audit-tasks train tasks "
                        "scored as one group each by the configured reward (judge included, cached); exit 2 when the reward "
                        "does not rank the reference above a family on more than 10 %% of them (docs/scoring.md)")
    j.add_argument("--audit-tasks", type=flags.count(0), default=8, metavar="N",
                   help="train tasks the judge audit scores, with --audit and before every training run with a judge "
                        "(default 8; 0: no audit before training)")
    j.add_argument("--accept-exploits", action="store_true",
                   help="train (or end --audit with 0) even when the judge audit finds exploit families the reward does not "
                        "rank below the reference: they are named in a warning")

    e = p.add_argument_group("evaluation (--eval)")
    e.add_argument("--model", type=flags.model_spec, action="append", default=[], metavar="SPEC", help="model id at --base-url, or label=ID@URL; repeatable")
    e.add_argument("--base-url", type=flags.url, default=None, help="default endpoint for --model (env OPENAI_BASE_URL)")
    e.add_argument("--api-key", default=None, help="key for --base-url (env OPENAI_API_KEY)")
    e.add_argument("--split", choices=("train", "val", "all"), default="val", help="tasks to evaluate on (default val)")
    e.add_argument("--limit", type=flags.count(), default=None, help="--eval: the first N tasks only; training: validate on the first N val tasks (default all; cpu 6); "
                        "--tasks-from-git: the newest N commits of --rev")
    e.add_argument("--samples", type=flags.count(), default=1, help="outputs per model per task (default 1)")
    e.add_argument("--concurrency", type=flags.count(), default=8, help="requests in flight per model (default 8)")
    e.add_argument("--baseline", action="store_true", help="also score each model without the SKILL.md, in the same judge groups")
    e.add_argument("--without-skill", choices=prompts.WITHOUT, default=None,
                   help="what replaces SKILL.md as the system prompt where it is left out: stub (one line naming the skill), "
                        "none (no system message) or description (the frontmatter's); in --eval --baseline's arms (default "
                        "description) and --internalize's prompts and served model (default stub)")

    t = p.add_argument_group("training")
    t.add_argument("--backend", default="auto", help="auto | local | serverless | tinker | cpu | MODULE:CLASS (default auto)")
    t.add_argument("--base-model", default=None, help=backends.BASE_MODEL_HELP)
    t.add_argument("--steps", type=flags.count(0), default=None, help="training steps in all, counting resumed ones (default 50; cpu 10)")
    t.add_argument("--groups-per-step", type=flags.count(), default=None, help="tasks per step (default 8; cpu 4)")
    t.add_argument("--rollouts-per-group", type=flags.count(2, " (RL compares answers within a group)"), default=None, help="answers per task; RULER ranks them together (default 8; cpu 4)")
    t.add_argument("--learning-rate", type=flags.number(above=0), default=None, help="default 1e-5; cpu 3e-4")
    t.add_argument("--eval-every", type=flags.count(), default=10, help="validate every N steps, and at the end (default 10)")
    t.add_argument("--temperature", type=flags.number(minimum=0), default=None, help="sampling temperature (default 1.0 training, 0.0 --eval)")
    t.add_argument("--max-tokens", type=flags.count(), default=None, help="completion length limit (default 1024; cpu 48)")
    t.add_argument("--max-exceptions", type=flags.number(minimum=0), default=0.1,
                   help="rollouts that may fail per step: a fraction below 1, or a count (default 0.1)")
    t.add_argument("--request-timeout", type=flags.number(above=0), default=600.0, help="seconds one policy completion may take (default 600)")
    t.add_argument("--context-tokens", type=flags.count(), default=None,
                   help="model context; tasks whose prompt (estimated at 3 characters a token) plus --max-tokens "
                        "exceed it are skipped up front and listed (default 32768, Qwen2.5; cpu 4096, bounding its memory)")
    t.add_argument("--run-name", type=flags.path_part, default=None, help="run to create or resume (default <skill>-<base model>)")
    t.add_argument("--project", type=flags.path_part, default="skill-rl", help="ART project (default skill-rl)")
    t.add_argument("--seed", type=int, default=0, help="seed for the task order and --internalize's schedule (default 0)")
    t.add_argument("--internalize", action="store_true",
                   help="train the skill into the weights: the warm start trains each example with SKILL.md and without it, then RL's "
                        "prompts leave it out (without a warm start, the chance that a prompt carries it falls from 1 to 0 over the RL "
                        "steps); the reward still scores against it (docs/internalize.md)")
    t.add_argument("--internalize-floor", type=flags.number(minimum=0, maximum=1), default=None, metavar="F",
                   help=f"--internalize: the share of the last RL steps whose prompts never carry SKILL.md (default {prompts.WARM_FLOOR:g} "
                        f"after a warm start: every RL step; {prompts.DEFAULT_FLOOR:g} without one)")
    t.add_argument("--kl-coef", type=flags.number(minimum=0), default=None, metavar="F",
                   help="KL anchor: each sampled token's advantage is lowered by F x its KL to the reference (ART's "
                        f"kl_penalty_coef; default {anchor.DEFAULT_COEF:g} after a warm start, else 0; docs/cpu-learning.md)")
    t.add_argument("--kl-ref-step", type=flags.count(0), default=None, metavar="N",
                   help="the KL anchor's reference checkpoint (default: the warm start's last step, else the base model); "
                        "with --kl-coef 0 the CPU backend measures the KL to it and changes nothing")
    t.add_argument("--prune-collapsed", action="store_true",
                   help="while one of the skill's categorical fields (a commit's type, a review's verdict) has been the same "
                        "across different tasks for 3 steps, delete at each validation the checkpoints worse on it than the best")
    warmstart.add_arguments(p)
    mining.add_arguments(p)
    backends.add_arguments(p)
    export.add_arguments(p)
    args = p.parse_args(argv)
    if args.config is not None:
        try:
            args = configfile.apply(p, argv, args)
        except Exit as e:
            p.exit(2, f"error: {e}\n")
    if args.steps == 0 and not args.sft:
        p.error("argument --steps: 0 trains nothing; 0 is for a warm start alone (--sft)")
    if args.export is None and (given := [f for f, v in (("--checkpoint", None if args.eval else args.checkpoint),
                                                         ("--card-eval", args.card_eval), ("--gguf", args.gguf),
                                                         ("--push-to-hub", args.push_to_hub)) if v is not None]):
        p.error(f"{given[0]} goes with --export DIR" + (" or --eval --backend cpu" if given[0] == "--checkpoint" else ""))
    if args.context_tokens is not None and args.max_tokens is not None and args.context_tokens <= args.max_tokens:
        p.error(f"--context-tokens {args.context_tokens} leaves no room for a prompt beside --max-tokens {args.max_tokens}")
    return args


# ------------------------------------------------------------------ training


async def train(run: config.Run, skill) -> int:
    """Warm start (--sft), then steps of: gather and score groups, train, log, validate now and then."""
    from art.utils.iterate_dataset import iterate_dataset

    from skill_rl.training.steps import Trainer

    await audit.guard(run.settings, skill, run.judge)  # a judge that pays for an exploit: exit 2 before anything runs
    s, t = run.settings, await Trainer.start(run, skill)
    step = 0
    try:
        if (run.sft or t.fade) and await t.model.get_step() == 0 and not (t.model.read_state() or {}).get(warmstart.STATE_KEY):
            await t.validate(0)  # the base model, to see what the warm start does
        warm = await warmstart.run(s, run.sft, t.model, t.scorer, t.train_tasks, t.stop)  # --sft: before the first RL step, once
        t.totals.warm_start_failures = warm.failures
        step, last = await t.model.get_step(), s.steps + warm.steps  # the warm start's checkpoints count as steps
        if warm.trained:
            await t.validate(step)
        t.anchor = anchor.resolve(s, t.model, t.backend, step)  # kept on resume
        print(f"run {s.project}/{s.run_name}: starting at step {step} of {last} on backend {t.kind}"
              + (f"; {t.anchor.describe()}" if t.anchor.active else ""), flush=True)
        for batch in iterate_dataset(t.train_tasks, s.groups_per_step, t.epochs(), initial_step=step - warm.steps, use_tqdm=False):
            if step >= last or t.stop.is_set():
                break
            start = time.perf_counter()
            groups, stats, used = await t.gather(batch.items, f"step {step + 1}", t.carries(step + 1 - warm.steps))
            if not groups:
                print(f"step {step + 1}: every group failed; nothing to train on", file=sys.stderr)
                continue
            with t.stopper.shielded():  # a step is trained and logged whole, or not at all
                result = await t.backend.train(t.model, groups, learning_rate=s.learning_rate, **t.anchor.kwargs())
                step = result.step
                means, warning = await t.log_step(groups, result, stats, used, step)
            print(t.step_line(step, means, stats, used, time.perf_counter() - start, warning), flush=True)
            if t.totals.steps == 1:  # all imported by now (ART, torch, litellm: ~900k objects): no full GC scans them again
                gc.collect()
                gc.freeze()
            if step % s.eval_every == 0 and step < last:
                await t.validate(step)
        if not t.val_results or t.val_results[-1][0] != step:
            await t.validate(step)
        await t.plot.done()
        kept = await backends.keep_best_and_latest(t.model, step, t.anchor.keep())  # ART's order: delete, then close
    except asyncio.CancelledError:
        if not t.stopper.aborted:
            raise
        raise Exit(t.stopper.exit_code(1), f"stopped at once during step {step + 1}: nothing of it was trained; "
                      f"the same command resumes at step {step + 1}") from None
    finally:
        await t.close()
    return t.report(kept)


# ------------------------------------------------------------------ entry point


def main(argv=None) -> int:
    args = parse_args(argv)
    from skill_rl.env import load_env, loopback_without_proxy

    try:
        load_env(HERE)  # ./.env (or a parent's), then beside this script; the shell's variables win
    except Exit as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    loopback_without_proxy()  # the process's own endpoints on 127.0.0.1 never go through a proxy
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of litellm's price map
    keys.collect(*(v for k, v in vars(args).items() if k.endswith("api_key")), *keys.url_passwords(vars(args).values()))
    if argv is None:  # the command itself (script, -m, console script): redact until the process ends
        keys.redact_process_output()
        if not progress.shown(args.quiet):  # other libraries' tqdm bars too (loading GGUF weights), as ours and ART's
            os.environ.setdefault("TQDM_DISABLE", "1")  # read when tqdm is first imported: before ART, transformers
    try:
        with keys.redacted_output():  # whatever is printed from here on, by us or a library, names no key
            code = run(args)
            sys.stdout.flush()  # a pipe's buffer: its reader's absence shows here, not at the interpreter's exit
            return code
    except OSError as e:  # stdout's reader went away (`| head`), or a disk filled up: one line, no traceback
        if e.errno == errno.EPIPE:  # Python flushes stdout once more at exit: point it at nothing first
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            print("error: stdout was closed by its reader; stopped", file=sys.stderr)
            return 1
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            print(f"error: {e.strerror}{f': {e.filename}' if e.filename else ''}; stopped", file=sys.stderr)
            return 1
        raise


def run(args) -> int:
    from skill_rl import cli

    try:
        if args.list:
            return cli.list_skills(skill_dirs(args.skills_dir))
        if args.init is not None:
            return cli.init_skill(args.skills_dir or Path("skills"), args.init)  # the user's ./skills, never the install
        if not args.skill:
            raise Exit(2, "pass --skill NAME (see --list), or --list / --init NAME")
        folder = find_skill(skill_dirs(args.skills_dir), args.skill)
        if args.tasks_from_git is not None:
            return mining.run(load_skill(folder, with_tasks=False), args)
        skill = load_skill(folder)
        if args.check:
            return cli.print_check(skill)
        setup = config.resolve(args, skill)  # every setting, once; problems exit 2 before anything runs
        if args.export is not None:
            return export.run(skill, setup)
        if args.score:
            from skill_rl import score

            return score.run(skill, args.score, setup.judge, args.out, resume=args.resume, quiet=args.quiet)
        if args.audit:
            return audit.run(skill, setup.settings, setup.judge)
        if args.eval:
            from skill_rl import evaluate

            return evaluate.run(skill, setup.settings, setup.judge)
        for note in setup.notes:
            print(note, file=sys.stderr)
        print(setup.plan.describe())
        cli.print_config(setup.settings, setup.judge)
        return asyncio.run(train(setup, skill))
    except SkillError as e:
        print("\n".join(e.problems), file=sys.stderr)
        return 2
    except Exit as e:
        print(f"error: {e}" if e.code else str(e), file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
