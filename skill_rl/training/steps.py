"""The parts of a training run that train_skill.py's `train` tells the story of: setting up the model and
its backend, gathering and scoring a batch of groups, logging a step, validating, and the final report.

ART's `gather_trajectory_groups` runs the rollouts; each finished group is scored at once (`after_each`),
so the judge overlaps the other groups' rollouts. A group left with fewer than two rollouts has nothing to
compare and is dropped; what repeats across a step's tasks, their own words masked, is paid for nowhere.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import art

from skill_rl import keys, progress, prompts
from skill_rl.console import clean
from skill_rl.errors import Exit
from skill_rl.scoring import categories
from skill_rl.scoring.report import gates_passed, print_table, summarize, wilson
from skill_rl.scoring.reward import Scorer
from skill_rl.settings import configfile
from skill_rl.skills import DIMENSIONS, Skill, Task
from skill_rl.tools.episodes import Episodes
from skill_rl.tools.episodes import keys as episode_keys
from skill_rl.training import backends, history
from skill_rl.training.anchor import Anchor
from skill_rl.training.monitor import Monitor
from skill_rl.training.plots import PLOT_NAME, Plotter
from skill_rl.training.rollout import episode_rollout, quiet_failed_rollouts, rollout, score_group
from skill_rl.training.runlock import RunLock, Stopper
from skill_rl.training.trajectories import output_of, penalise_repeats

# a type only: the commands import training, never the other way
if TYPE_CHECKING:
    from skill_rl.commands.config import Run

# exit 1 if any
FAILURES = ("judge_failures", "rollout_errors", "dropped", "warm_start_failures", "check_errors")


@dataclass
class Stats:
    """What a batch of groups (a training step, or a validation) lost or could not score."""

    judge_failures: int = 0
    # groups lost to rollout errors, or left with fewer than 2 rollouts
    dropped: int = 0
    # groups whose rollouts all scored alike: nothing to learn from
    no_variance: int = 0
    rollout_errors: int = 0
    check_errors: int = 0

    def metrics(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": float(v) for k, v in asdict(self).items()}


@dataclass
class Totals:
    """The run's counts, printed last ("this run: ...") and deciding the exit status."""

    steps: int = 0
    judge_failures: int = 0
    rollout_errors: int = 0
    dropped: int = 0
    no_variance: int = 0
    warm_start_failures: int = 0
    check_errors: int = 0

    def add(self, stats: Stats, training: bool = True) -> None:
        """A batch's counts; "no variance" from training steps only, as the step lines count it (a validation's
        groups train nothing, and no line of it says how many scored alike)."""
        for f in fields(Stats):
            if training or f.name != "no_variance":
                setattr(self, f.name, getattr(self, f.name) + getattr(stats, f.name))

    def line(self, judged: bool = True, warm_start: bool = True) -> str:
        """The counts, naming what did not happen rather than counting it as 0 (no judge, no warm start)."""
        left_out = {"judge_failures": not judged, "warm_start_failures": not warm_start}
        counts = [f"{k.replace('_', ' ')} {v}" for k, v in asdict(self).items() if not left_out.get(k)]
        return "this run: " + ", ".join(counts + ["no judge"] * (not judged) + ["no warm start"] * (not warm_start))

    def failed(self) -> bool:
        return any(getattr(self, k) for k in FAILURES)


def fmt(x: float | None) -> str:
    return "  —  " if x is None else f"{x:.3f}"


def step_means(groups) -> dict[str, float]:
    """Mean of each per-trajectory metric over a step, over the trajectories that have it."""
    sums, counts = {}, {}
    for g in groups:
        for t in g.trajectories:
            for k, v in {"reward": t.reward, **t.metrics}.items():
                sums[k], counts[k] = sums.get(k, 0.0) + v, counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


def fitting(skill: Skill, tasks: list[Task], s) -> list[Task]:
    keep, note = skill.fitting(tasks, s.context_tokens, s.max_tokens)
    if note:
        print(note, file=sys.stderr)
    return keep


class Trainer:
    """One training run's model, backend and bookkeeping (see `start`)."""

    def __init__(self, run: Run, skill: Skill):
        s = self.s = run.settings
        self.skill, self.kind = skill, s.backend
        self.train_tasks = fitting(skill, skill.split("train"), s)
        self.val_tasks = fitting(skill, skill.split("val")[: s.limit], s)
        if not self.train_tasks:
            raise Exit(2, f"{skill.tasks_path}: no tasks with split 'train' to train on")
        # iterate_dataset reshuffles per epoch, deterministically
        random.Random(s.seed).shuffle(self.train_tasks)
        self.tasks = {t.id: t for t in skill.tasks}
        self.scorer = Scorer(skill, run.judge)
        self.temperature = 1.0 if s.temperature is None else s.temperature
        self.totals, self.val_results, self.plot = Totals(), [], Plotter()
        # the last validation's categorical fields: value -> answers (scoring/categories.py)
        self.val_categories: dict = {}
        # the KL anchor, resolved after the warm start (training/anchor.py)
        self.anchor = Anchor()
        # a failing categories() in checks.py is reported once
        self.said_categories = False
        self.fade = prompts.Fade(s.steps, s.internalize_floor, s.seed, s.without_skill) if s.internalize else None
        # a skill with tools: each rollout's episode (workspace and calls) until its group is scored
        self.episodes = Episodes() if skill.tools else None

    @classmethod
    async def start(cls, run: Run, skill: Skill) -> Trainer:
        """The backend and the registered model; the run's lock held; Ctrl-C and SIGTERM stop after a step."""
        t = cls(run, skill)
        t.backend = backends.make_backend(t.kind, t.s.quiet)
        t.model = backends.make_model(t.s, name=f"skill-{skill.name}")
        t.dir = Path(t.model._get_output_dir())
        # another process training this run: exit 2, naming it
        t.lock = RunLock(t.dir).acquire()
        try:
            # before config.yaml: a refused command leaves the run's records as they were
            t.record_fade()
            # a last line cut short by a crash: what ART logs next is read
            history.mend(t.dir / history.NAME)
        except Exit:
            t.lock.release()
            raise
        # the resolved settings beside the records: --config reruns the run
        configfile.write(t.s, t.dir)
        await backends.register(t.model, t.backend, t.kind)
        t.monitor = Monitor.resume(t.dir / history.NAME, t.read_categories if categories.reader(skill) else None)
        # Ctrl-C or SIGTERM: stop after this step; again: abandon it
        t.stopper = Stopper()
        t.stop = t.stopper.requested
        quiet_failed_rollouts(asyncio.get_running_loop())
        return t

    def read_categories(self, outputs: list[str]) -> list[dict]:
        """Each output's categorical fields (scoring/categories.py); the reader's first failure said once."""
        rows, failure = categories.read_all(self.skill, outputs)
        if failure and not self.said_categories:
            self.said_categories = True
            print(
                f"warning: {self.skill.path / 'checks.py'}: categories() failed ({clean(failure)}); the collapse "
                "monitor skips those answers",
                file=sys.stderr,
            )
        return rows

    def record_fade(self) -> None:
        """--internalize: the schedule in the run's state (its config.yaml has the flags). A run begun with it and
        resumed without it would be served the skill again: refused."""
        before = (self.model.read_state() or {}).get(prompts.STATE_KEY)
        if before and not self.fade:
            raise Exit(
                2,
                f"run {self.s.run_name} was trained with --internalize (its state.json says so): resume it "
                "with --internalize, or start another --run-name",
            )
        if self.fade:
            if before and before.get("steps") != self.fade.steps:
                print(
                    f"note: --internalize: --steps {self.fade.steps}, not {before.get('steps')}: the schedule of the "
                    "steps not yet trained follows the new total",
                    file=sys.stderr,
                )
            if before and before.get("floor") not in (None, self.fade.floor):
                print(
                    f"note: --internalize: --internalize-floor {self.fade.floor:g}, not {before['floor']:g}: the steps not "
                    "yet trained follow the new schedule",
                    file=sys.stderr,
                )
            self.model.merge_state({prompts.STATE_KEY: self.fade.record()})
            print(self.fade.describe(self.skill), flush=True)

    def carries(self, rl_step: int):
        """Whether RL step `rl_step`'s prompt for a task carries SKILL.md (always, without --internalize)."""
        return (lambda task: True) if self.fade is None else (lambda task: self.fade.carries(rl_step, task.id))

    def epochs(self) -> int:
        return max(1, -(-self.s.steps * self.s.groups_per_step // len(self.train_tasks)))

    def _group(self, task: Task, with_skill: bool) -> art.TrajectoryGroup:
        if self.episodes is not None:
            return art.TrajectoryGroup(
                episode_rollout(
                    self.model,
                    self.skill,
                    task,
                    self.episodes,
                    temperature=self.temperature,
                    max_tokens=self.s.max_tokens,
                    max_turns=self.s.max_turns,
                    timeout=self.s.request_timeout,
                )
                for _ in range(self.s.rollouts_per_group)
            )
        return art.TrajectoryGroup(
            rollout(
                self.model,
                self.skill,
                task,
                temperature=self.temperature,
                max_tokens=self.s.max_tokens,
                timeout=self.s.request_timeout,
                with_skill=with_skill,
                without=self.fade and self.fade.without,
            )
            for _ in range(self.s.rollouts_per_group)
        )

    async def gather(self, batch: list[Task], desc: str, carries=lambda task: True, training: bool = True):
        """The batch's groups, scored; what went wrong; the judge's tokens and cost for this batch."""
        stats, mark = Stats(), self.scorer.usage.copy()

        async def after_each(group):
            stats.rollout_errors += len(group.exceptions)
            # ART writes a kept group's errors to the step's trajectories: a 401 may quote the key
            for e in group.exceptions:
                e.message, e.traceback = keys.redact(e.message), keys.redact(e.traceback)
            # nothing to compare within the group
            if len(group.trajectories) < 2:
                if self.episodes is not None:
                    self.episodes.close(*episode_keys(group.trajectories))
                return None
            group = await score_group(group, self.scorer, self.tasks, self.episodes)
            stats.judge_failures += int(group.trajectories[0].metrics["judge_failed"])
            stats.check_errors += int(sum(t.metrics["check_errors"] for t in group.trajectories))
            stats.no_variance += len({round(t.reward, 6) for t in group.trajectories}) == 1
            return group

        async def counted(group):
            kept = await after_each(group)
            advance()
            return kept

        # progress.phase, not ART's bar: a bar on a terminal, periodic lines when piped
        try:
            with progress.phase(f"{desc}: rollouts", len(batch), "groups", self.s.quiet) as advance:
                groups = await art.gather_trajectory_groups(
                    (self._group(t, carries(t)) for t in batch),
                    pbar_desc=None,
                    max_exceptions=self.s.max_exceptions,
                    # metrics are filled in by scoring
                    after_each=counted,
                    max_metrics=0,
                )
        # over the --max-exceptions budget: ART re-raises the rollout's error
        except Exception as e:
            raise Exit(
                1,
                f"{desc}: more rollouts failed than --max-exceptions {self.s.max_exceptions} allows "
                f"({type(e).__name__}: {keys.redact(str(e))[:200]}); nothing was trained on this batch, "
                "run the same command to resume",
            )
        finally:
            # the workspaces of groups dropped, failed or cancelled: none outlives its batch
            if self.episodes is not None:
                self.episodes.close_all()
        # lost to rollout errors, or with < 2 rollouts left
        stats.dropped = len(batch) - len(groups)
        # what repeats across the step's tasks is paid for nowhere (scoring/repeats.py)
        penalise_repeats(groups, self.skill)
        # training and validation alike, but for "no variance"
        self.totals.add(stats, training)
        return groups, stats, self.scorer.usage.since(mark)

    async def log_step(self, groups, result, stats: Stats, used, step: int) -> tuple[dict, str | None]:
        """Log a trained step (ART's metrics, ours, the monitor's, the judge's); its means and a warning."""
        self.totals.steps += 1
        means, (watch, warning) = step_means(groups), self.monitor.step(groups)
        # the KL anchor's (training/anchor.py), by ART's name
        if "loss/kl_policy_ref" in result.metrics:
            means["kl"] = result.metrics["loss/kl_policy_ref"]
        await self.model.log(
            groups,
            metrics={**result.metrics, **stats.metrics(), **watch, **used.metrics("train")},
            step=step,
            split="train",
        )
        return means, warning

    def step_line(self, step: int, m: dict, stats: Stats, used, seconds: float, warning: str | None) -> str:
        return (
            f"step {step:>4} | reward {fmt(m.get('reward'))} | format {fmt(m.get('format'))} procedure "
            f"{fmt(m.get('procedure'))} correctness {fmt(m.get('correctness'))} | judge failures {stats.judge_failures} "
            f"| rollout errors {stats.rollout_errors} | dropped {stats.dropped} | no variance {stats.no_variance} "
            f"| judge {used.brief()} (so far {self.scorer.usage.brief()}) | "
            + (
                f"SKILL.md in {m['with_skill']:.0%} of prompts, {m['prompt_tokens']:.0f} prompt tokens | "
                if "with_skill" in m
                else ""
            )
            + (f"KL {m['kl']:.4f} | " if "kl" in m else "")
            + f"{seconds:.2f} s"
            + (f" | warning: {warning}" if warning else "")
        )

    async def validate_base(self, sft) -> None:
        """Validate the base model (step 0) before a warm start or an internalized run, unless that ran already."""
        from skill_rl.training.warmstart import STATE_KEY

        started = (self.model.read_state() or {}).get(STATE_KEY)
        if (sft or self.fade) and await self.model.get_step() == 0 and not started:
            await self.validate(0)

    async def validate(self, step: int) -> float | None:
        """Score the val tasks at this step, log them, redraw the reward plot; their mean reward.

        With --internalize, twice: without SKILL.md (the prompt the model will be served with: its scores are the
        val split, so the plot and the best checkpoint follow them) and with it (logged as val/skill/...)."""
        if not self.val_tasks:
            return None
        mark, arm, started = self.scorer.usage.copy(), {}, time.perf_counter()
        groups, stats, _ = await self.gather(
            self.val_tasks, f"val @ {step}", lambda task: self.fade is None, training=False
        )
        if self.fade:
            on, more, _ = await self.gather(self.val_tasks, f"val @ {step} with SKILL.md", training=False)
            stats = Stats(**{f.name: getattr(stats, f.name) + getattr(more, f.name) for f in fields(Stats)})
            # as val/reward: after the repeats' cut
            rewards = [t.reward for g in on for t in g.trajectories]
            means = {**step_means(on), "reward": sum(rewards) / len(rewards) if rewards else None}
            arm = {f"skill/{k}": means[k] for k in ("reward", *DIMENSIONS, "prompt_tokens") if means.get(k) is not None}
            print(
                f"val  {step:>4} | reward {fmt(means.get('reward'))} | with SKILL.md, {means.get('prompt_tokens', 0):.0f} "
                f"prompt tokens | {len(on)} tasks x {self.s.rollouts_per_group}",
                flush=True,
            )
        used = self.scorer.usage.since(mark)
        await self.model.log(
            groups, metrics={**stats.metrics("val_"), **used.metrics("eval"), **arm}, step=step, split="val"
        )
        # <run dir>/rewards.png, off the step's path
        await self.plot.draw(self.dir, f"{self.skill.name}: {self.s.run_name}")
        scores = [t for g in groups for t in g.trajectories]
        mean = sum(t.reward for t in scores) / len(scores) if scores else None
        without = (
            f" | without SKILL.md, {step_means(groups).get('prompt_tokens', 0):.0f} prompt tokens" if self.fade else ""
        )
        cut = sum(t.metrics.get("truncated", 0.0) for t in scores)
        print(
            f"val  {step:>4} | reward {fmt(mean)}{without} | {len(groups)} tasks x {self.s.rollouts_per_group} | judge failures "
            f"{stats.judge_failures}"
            + (f" | cut at --max-tokens {int(cut)} of {len(scores)}" if cut else "")
            + (" | the base model" + (", before the warm start" if self.s.sft else "") if step == 0 else "")
            + f" | {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        if self.skill.tools and scores:
            print(self.gates_line(step, scores), flush=True)
        self.val_results.append((step, groups))
        await self.answers(step, groups)
        return mean

    def gates_line(self, step: int, scores) -> str:
        """A tool skill's validation: how many episodes passed every gate (git-commit-agent: exactly one commit with a
        Conventional Commits message), with the share's 95 % interval, the figure a rehearsal should raise."""
        gates, passed = gates_passed([t.metrics for t in scores], self.scorer)
        low, high = wilson(passed, len(scores))
        return (
            f"val  {step:>4} | every gate passed ({', '.join(gates) or 'none'}): {passed} of {len(scores)} episodes, "
            f"{passed / len(scores):.2f} (95 % {low:.2f}-{high:.2f})"
        )

    async def answers(self, step: int, groups) -> None:
        """The validation's categorical fields (a commit's types, a review's verdicts), printed beside its reward; with --prune-collapsed, while the monitor sees a field constant, the checkpoints worse on
        validation than the best are deleted (not the latest, which training goes on from, nor the KL anchor's)."""
        rows = self.read_categories([output_of(t).strip() for g in groups for t in g.trajectories])
        counts = categories.distributions(rows)
        self.val_categories = counts
        if counts:
            print(clean(f"val  {step:>4} | answers: {categories.describe(counts)}"), flush=True)
        if self.s.prune_collapsed and self.monitor.collapsed and step:
            means = backends.validated(self.dir / history.NAME)
            best = max(means.values(), default=None)
            worse = {k for k, v in means.items() if best is not None and v < best} - {step} - self.anchor.keep()
            present = set(backends.checkpoint_steps(self.dir))
            if gone := sorted(worse & present):
                await self.backend._delete_checkpoint_files(self.model, sorted(present - worse))
                print(
                    f"val  {step:>4} | {', '.join(self.monitor.collapsed)} collapsed: checkpoints "
                    f"{', '.join(map(str, gone))} (worse on validation than the best) deleted",
                    flush=True,
                )

    async def close(self) -> None:
        await self.backend.close()
        self.lock.release()

    def report(self, kept: backends.Kept) -> int:
        """The validation table, where the run is, and the exit status: 1 if anything failed, 130/143 if stopped."""
        if self.val_results:
            last_step, groups = self.val_results[-1]
            rows = [
                summarize(
                    f"{self.model.name}@{last_step}", [t.metrics for g in groups for t in g.trajectories], self.scorer
                )
            ]
            print_table(
                self.skill,
                rows,
                title=f"{self.skill.name}: validation of the trained model (step {last_step})"
                + (", without SKILL.md" if self.fade else ""),
            )
            if line := cut_warning([t for g in groups for t in g.trajectories], self.s.max_tokens, last_step):
                print(line)
            if self.fade:
                print_arms(self.skill, arms(self.dir / history.NAME, last_step), last_step)
        print("\n" + "\n".join(backends.ending_lines(self.kind, self.s, self.model.name, kept)))
        if self.fade:
            print("\n".join(prompts.serve_lines(self.skill, self.fade.without)))
        if (kept.where / PLOT_NAME).exists():
            print(f"reward plot: {kept.where / PLOT_NAME}")
        for name, c in self.val_categories.items():
            if len(c) == 1 and sum(c.values()) > 1:
                value, n = c.most_common(1)[0]
                print(
                    clean(
                        f"warning: the last validation's answers collapsed to one {name}: {value!r} in all {n} of them "
                        "(the reward may pay for the form more than for this choice; see the step lines' warnings)"
                    )
                )
        print(
            f"resume or extend: the same command with --steps N; stopped early: {'yes' if self.stop.is_set() else 'no'}"
        )
        print(self.totals.line(judged=self.scorer.judge is not None, warm_start=bool(self.s.sft)))
        if line := self.scorer.cache_line():
            print(line)
        # stopped by a signal: 130 (Ctrl-C) or 143 (SIGTERM)
        return self.stopper.exit_code(1 if self.totals.failed() else 0)


def cut_warning(trajectories, max_tokens: int, step: int) -> str | None:
    """A warning when a validation's answers ran into --max-tokens: their scores are of unfinished answers."""
    cut = int(sum(t.metrics.get("truncated", 0.0) for t in trajectories))
    if not cut:
        return None
    return (
        f"warning: {cut} of {len(trajectories)} validation answers at step {step} were cut at --max-tokens {max_tokens} "
        "(finish_reason length): the scores above are of unfinished answers; raise --max-tokens to see whole ones"
    )


ARM_KEYS = ("format", "procedure", "correctness", "reward", "prompt_tokens")


def arms(path: Path, last_step: int) -> list[dict]:
    """--internalize's validation arms from the run's history (so a resumed run has its step 0 too): the base
    model (step 0) and the model at `last_step`, each with and without SKILL.md; an arm not validated is left out."""
    rows: dict[int, dict] = {}
    for h in history.rows(path):
        if "val/reward" in h and h["step"] in (0, last_step):
            rows[h["step"]] = h
    out = []
    for step, who in [(0, "base model")] + ([(last_step, f"trained @{last_step}")] if last_step else []):
        h = rows.get(step, {})
        for prefix, prompt in (("val/skill/", "with SKILL.md"), ("val/", "without SKILL.md")):
            if f"{prefix}reward" in h:
                out.append(
                    {
                        "arm": f"{who}, {prompt}",
                        "step": step,
                        "with_skill": prefix != "val/",
                        **{k: h.get(prefix + k) for k in ARM_KEYS},
                    }
                )
    return out


def print_arms(skill: Skill, rows: list[dict], last_step: int) -> None:
    """The side-by-side table of the arms, and the prompt tokens a request saves without SKILL.md."""
    from rich.console import Console
    from rich.table import Table

    from skill_rl.console import literal

    if not rows:
        return
    table = Table(title=literal(f"{skill.name}: --internalize, validation arms on the same tasks"))
    for i, h in enumerate(("arm", "format", "procedure", "correctness", "overall", "prompt tokens / request")):
        table.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(
            literal(r["arm"]),
            *(fmt(r[k]) for k in ARM_KEYS[:4]),
            "—" if r["prompt_tokens"] is None else f"{r['prompt_tokens']:.0f}",
        )
    console = Console()
    # never wrap an arm's name or shorten a figure to fit a narrow pipe
    console.width = max(console.width, 120)
    console.print(table)
    on = [r["prompt_tokens"] for r in rows if r["with_skill"] and r["prompt_tokens"]]
    off = [r["prompt_tokens"] for r in rows if not r["with_skill"] and r["prompt_tokens"]]
    if on and off:
        saved = on[-1] - off[-1]
        print(f"prompt tokens saved per request without SKILL.md: {saved:.0f} of {on[-1]:.0f} ({saved / on[-1]:.0%})")
