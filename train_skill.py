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
    python train_skill.py --skill git-commit --tasks-from-git ../repo  # tasks from a repository's history
    python train_skill.py --skill git-commit --eval --model gpt-4.1-mini --model local=qwen@http://127.0.0.1:8000/v1
    python train_skill.py --list | --init NAME

Re-running the same command resumes the run (same --run-name); Ctrl-C stops after the step.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import random
import re
import sys
import time
from pathlib import Path

from skill_rl.training import backends, warmstart
from skill_rl import flags, keys, mining
from skill_rl.errors import Exit
from skill_rl.scoring.rubric import checks_only_problem
from skill_rl.runlock import RunLock, Stopper
from skill_rl.skills import SkillError, find_skill, load_skill, skill_dirs

HERE = Path(__file__).resolve().parent


def parse_args(argv=None) -> argparse.Namespace:
    p = flags.Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    s = p.add_argument_group("skill")
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
    j.add_argument("--judge-timeout", type=flags.number(above=0), default=60.0, help="seconds per judge try")

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
    t.add_argument("--seed", type=int, default=0, help="seed for the task order (default 0)")
    warmstart.add_arguments(p)
    mining.add_arguments(p)
    backends.add_arguments(p)
    args = p.parse_args(argv)
    if args.steps == 0 and not args.sft:
        p.error("argument --steps: 0 trains nothing; 0 is for a warm start alone (--sft)")
    if args.context_tokens is not None and args.max_tokens is not None and args.context_tokens <= args.max_tokens:
        p.error(f"--context-tokens {args.context_tokens} leaves no room for a prompt beside --max-tokens {args.max_tokens}")
    return args


def make_judge(args):
    """The judge from flags and environment (the one place secrets and endpoints are read)."""
    from skill_rl.env import judge_env_problem
    from skill_rl.scoring.reward import DEFAULT_JUDGE, Judge

    if args.judge == "none":
        return None
    base_url = args.judge_base_url or os.environ.get("JUDGE_BASE_URL")
    model = args.judge_model or (f"openai/{os.environ.get('JUDGE_MODEL', 'judge')}" if base_url else DEFAULT_JUDGE)
    key = args.judge_api_key or os.environ.get("JUDGE_API_KEY")
    model, problem = judge_env_problem(model, base_url, key)  # any LiteLLM provider, checked before spending
    if problem:
        raise Exit(2, problem)
    return Judge(model=model, base_url=base_url, api_key=key, attempts=args.judge_attempts, timeout=args.judge_timeout)


# ------------------------------------------------------------------ training


def step_means(groups) -> dict[str, float]:
    """Mean of each per-trajectory metric over a step, over the trajectories that have it."""
    sums, counts = {}, {}
    for g in groups:
        for t in g.trajectories:
            for k, v in {"reward": t.reward, **t.metrics}.items():
                sums[k], counts[k] = sums.get(k, 0.0) + v, counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


def fitting(skill, tasks, args) -> list:
    keep, note = skill.fitting(tasks, args.context_tokens, args.max_tokens)
    if note:
        print(note, file=sys.stderr)
    return keep


def fmt(x: float | None) -> str:
    return "  —  " if x is None else f"{x:.3f}"


async def train(args, skill, judge, sft) -> int:
    kind = args.backend
    import art
    from art.utils.iterate_dataset import iterate_dataset

    from skill_rl.evaluate import print_table, summarize
    from skill_rl.training.monitor import Monitor
    from skill_rl.training.plots import PLOT_NAME, Plotter
    from skill_rl.scoring.reward import Scorer
    from skill_rl.training.rollout import penalise_repeats, quiet_failed_rollouts, rollout, score_group

    train_tasks, val_tasks = fitting(skill, skill.split("train"), args), fitting(skill, skill.split("val")[:args.limit], args)
    if not train_tasks:
        raise Exit(2, f"{skill.path / 'tasks.jsonl'}: no tasks with split 'train' to train on")
    random.Random(args.seed).shuffle(train_tasks)  # iterate_dataset reshuffles per epoch, deterministically
    tasks = {t.id: t for t in skill.tasks}
    scorer = Scorer(skill, judge)
    temperature = 1.0 if args.temperature is None else args.temperature

    backend = backends.make_backend(kind)
    model = backends.make_model(args, name=f"skill-{skill.name}")
    lock = RunLock(Path(model._get_output_dir())).acquire()  # another process training this run: exit 2, naming it
    await backends.register(model, backend, kind)
    monitor = Monitor.resume(Path(model._get_output_dir()) / "history.jsonl")  # reward-hacking signs, per step
    stopper = Stopper()  # Ctrl-C or SIGTERM: stop after this step; again: abandon it
    stop = stopper.requested
    quiet_failed_rollouts(asyncio.get_running_loop())

    def group_of(task, n):
        return art.TrajectoryGroup(
            rollout(model, skill, task, temperature=temperature, max_tokens=args.max_tokens, timeout=args.request_timeout)
            for _ in range(n))

    val_results: list = []
    plot = Plotter()
    totals = {"steps": 0, "judge_failures": 0, "rollout_errors": 0, "dropped": 0, "no_variance": 0, "warm_start_failures": 0,
              "check_errors": 0}

    async def gather(batch_tasks, desc):
        stats = {"judge_failures": 0, "dropped": 0, "no_variance": 0, "rollout_errors": 0, "check_errors": 0}
        mark = scorer.usage.copy()

        async def after_each(group):
            stats["rollout_errors"] += len(group.exceptions)
            if len(group.trajectories) < 2:  # nothing to compare within the group
                stats["dropped"] += 1
                return None
            group = await score_group(group, scorer, tasks)
            stats["judge_failures"] += int(group.trajectories[0].metrics["judge_failed"])
            stats["check_errors"] += int(sum(t.metrics["check_errors"] for t in group.trajectories))
            stats["no_variance"] += len({round(t.reward, 6) for t in group.trajectories}) == 1
            return group

        try:
            groups = await art.gather_trajectory_groups(
                (group_of(t, args.rollouts_per_group) for t in batch_tasks),
                pbar_desc=None if args.quiet else desc, max_exceptions=args.max_exceptions, after_each=after_each,
                max_metrics=0)  # metrics are filled in by scoring, after the bar has seen them
        except Exception as e:  # over the --max-exceptions budget: ART re-raises the rollout's error
            raise Exit(1, f"{desc}: more rollouts failed than --max-exceptions {args.max_exceptions} allows "
                          f"({type(e).__name__}: {keys.redact(str(e))[:200]}); nothing was trained on this batch, "
                          "run the same command to resume")
        stats["dropped"] = len(batch_tasks) - len(groups)  # lost to rollout errors, or with < 2 rollouts left
        penalise_repeats(groups)  # text repeated across the step's tasks is paid for nowhere (repeats.py)
        for k, v in stats.items():  # training and validation alike
            totals[k] += v
        return groups, stats, scorer.usage.since(mark)  # the judge's tokens and cost for this batch

    async def validate(step: int) -> float | None:
        if not val_tasks:
            return None
        groups, stats, used = await gather(val_tasks, f"val @ {step}")
        await model.log(groups, metrics={**{f"val_{k}": float(v) for k, v in stats.items()}, **used.metrics("eval")}, step=step, split="val")
        await plot.draw(Path(model._get_output_dir()), f"{skill.name}: {args.run_name}")  # <run dir>/rewards.png, off the step's path
        scores = [t for g in groups for t in g.trajectories]
        mean = sum(t.reward for t in scores) / len(scores) if scores else None
        print(f"val  {step:>4} | reward {fmt(mean)} | {len(groups)} tasks x {args.rollouts_per_group} | judge failures {stats['judge_failures']}"
              + (" | the base model, before the warm start" if step == 0 else ""), flush=True)
        val_results.append((step, groups))
        return mean

    epochs, step = max(1, math.ceil(args.steps * args.groups_per_step / len(train_tasks))), 0
    try:
        if sft and await model.get_step() == 0 and not (model.read_state() or {}).get(warmstart.STATE_KEY):
            await validate(0)  # the base model, to see what the warm start does
        warm = await warmstart.run(args, sft, model, scorer, train_tasks, stop)  # --sft: before the first RL step, once
        totals["warm_start_failures"] = warm.failures
        step, last = await model.get_step(), args.steps + warm.steps  # the warm start's checkpoints count as steps
        if warm.trained:
            await validate(step)
        print(f"run {args.project}/{args.run_name}: starting at step {step} of {last} on backend {kind}", flush=True)
        for batch in iterate_dataset(train_tasks, args.groups_per_step, epochs, initial_step=step - warm.steps, use_tqdm=False):
            if step >= last or stop.is_set():
                break
            start = time.perf_counter()
            groups, stats, used = await gather(batch.items, f"step {step + 1}")
            if not groups:
                print(f"step {step + 1}: every group failed; nothing to train on", file=sys.stderr)
                continue
            with stopper.shielded():  # a step is trained and logged whole, or not at all
                result = await backend.train(model, groups, learning_rate=args.learning_rate)
                step = result.step
                totals["steps"] += 1
                m, (watch, warning) = step_means(groups), monitor.step(groups)
                await model.log(groups, metrics={**result.metrics, **{k: float(v) for k, v in stats.items()}, **watch,
                                                 **used.metrics("train")},
                                step=step, split="train")
            print(f"step {step:>4} | reward {fmt(m.get('reward'))} | format {fmt(m.get('format'))} procedure {fmt(m.get('procedure'))} "
                  f"correctness {fmt(m.get('correctness'))} | judge failures {stats['judge_failures']} | rollout errors "
                  f"{stats['rollout_errors']} | dropped {stats['dropped']} | no variance {stats['no_variance']} "
                  f"| judge {used.brief()} (so far {scorer.usage.brief()}) | {time.perf_counter() - start:.2f} s"
                  + (f" | warning: {warning}" if warning else ""), flush=True)
            if totals["steps"] == 1:  # all imported by now (ART, torch, litellm: ~900k objects): no full GC scans them again
                gc.collect()
                gc.freeze()
            if step % args.eval_every == 0 and step < last:
                await validate(step)
        if not val_results or val_results[-1][0] != step:
            await validate(step)
        await plot.done()
        kept = await backends.keep_best_and_latest(model, step)  # ART's order: delete, then close
    except asyncio.CancelledError:
        if not stopper.aborted:
            raise
        raise Exit(stopper.exit_code(1), f"stopped at once during step {step + 1}: nothing of it was trained; "
                      f"the same command resumes at step {step + 1}") from None
    finally:
        await backend.close()
        lock.release()

    if val_results:
        last_step, groups = val_results[-1]
        rows = [summarize(f"{model.name}@{last_step}", [t.metrics for g in groups for t in g.trajectories], scorer)]
        print_table(skill, rows, title=f"{skill.name}: validation of the trained model (step {last_step})")
    print("\n" + "\n".join(backends.ending_lines(kind, args, model.name, kept)))
    if (kept.where / PLOT_NAME).exists():
        print(f"reward plot: {kept.where / PLOT_NAME}")
    print(f"resume or extend: the same command with --steps N; stopped early: {'yes' if stop.is_set() else 'no'}")
    print("this run: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in totals.items()))
    failed = any(totals[k] for k in ("judge_failures", "rollout_errors", "dropped", "warm_start_failures", "check_errors"))
    return stopper.exit_code(1 if failed else 0)  # stopped by a signal: 130 (Ctrl-C) or 143 (SIGTERM)


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
    keys.collect(*(v for k, v in vars(args).items() if k.endswith("api_key")))
    if argv is None:  # the command itself (script, -m, console script): redact until the process ends
        keys.redact_process_output()
    with keys.redacted_output():  # whatever is printed from here on, by us or a library, names no key
        return run(args)


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
        if args.score or args.eval:
            backends.fill_defaults(args, None)
        if args.score:
            from skill_rl import score

            return score.run(skill, args.score, make_judge(args), args.out, resume=args.resume, quiet=args.quiet)
        if args.eval:
            from skill_rl import evaluate

            return evaluate.run(skill, args, make_judge(args))
        by_default = args.sft is None
        said_none = args.judge == "none"  # asked for; the CPU backend may also default to it (fill_defaults)
        if said_none and not args.format_only_reward and (problem := checks_only_problem(skill, skill.split("train"))):
            raise Exit(2, problem)
        try:
            picked = backends.pick_backend(args.backend)
        except Exit:  # no way to train: backends.plan says so, after the --sft flags' problems
            picked = None
        backends.fill_defaults(args, picked and picked[0], skill)  # --backend cpu warm-starts by default
        sft = warmstart.prepare(args, skill, by_default)  # --sft flags and files: every problem, before anything runs
        plan = backends.plan(args, skill, picked)  # no way to train, or a base model the backend refuses: exit 2
        args.backend, args.base_model = plan.kind, plan.base_model
        if args.judge == "none" and not said_none and (problem := checks_only_problem(skill, skill.split("train"))):
            print(f"note: {problem}", file=sys.stderr)  # a CPU rehearsal's default: said, not refused
        judge = make_judge(args)
        args.run_name = args.run_name or f"{skill.name}-{re.sub(r'[^a-z0-9._-]+', '-', args.base_model.split('/')[-1].lower())}"
        print(plan.describe())
        cli.print_config(args, judge)
        return asyncio.run(train(args, skill, judge, sft))
    except SkillError as e:
        print("\n".join(e.problems), file=sys.stderr)
        return 2
    except Exit as e:
        print(f"error: {e}" if e.code else str(e), file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
