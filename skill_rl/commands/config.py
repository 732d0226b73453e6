"""A run's settings, resolved once: flags, per-backend presets, the backend, base model, run name and judge.

`resolve` is the one function that turns the parsed flags (a frozen `Settings`, skill_rl/settings/__init__.py) and
the environment into what a command runs with, for every command (`command` names the one the flags pick);
every later function reads the `Run` it returns. Each step returns a changed copy (`dataclasses.replace`),
so the parsed flags stay as parsed. The order of a training run's steps is the order problems are reported
in: a `--judge none` that would pay for form only, the warm start's flags and files, then the backend and
base model, then the judge's key.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from skill_rl.errors import Exit
from skill_rl.scoring.rubric import checks_only_problem
from skill_rl.settings import PRESETS, Settings
from skill_rl.skills import Skill

if TYPE_CHECKING:
    from skill_rl.scoring.reward import Judge
    from skill_rl.training import backends, warmstart

__all__ = ["COMMANDS", "Run", "Settings", "command", "resolve"]

# The commands a command line can pick, in the order it picks one (the first whose flag is given); none: training.
COMMANDS = ("list", "init", "tasks_from_git", "check", "export", "score", "audit", "eval")
# ... and those that run on the flags as given: no presets, no judge (--check and --tasks-from-git need no key)
AS_GIVEN = ("list", "init", "tasks_from_git", "check")


def command(s: Settings) -> str:
    """The command the settings pick: a name of COMMANDS, or "train"."""
    return next((c for c in COMMANDS if getattr(s, c) not in (None, False)), "train")


@dataclass(frozen=True)
class Run:
    """What a command runs with: its settings, resolved, and what resolving them found."""

    settings: Settings
    # None: checks only (--judge none)
    judge: Judge | None = None
    # where it trains (training only)
    plan: backends.Plan | None = None
    # the warm start, if any (training only)
    sft: warmstart.Plan | None = None
    # said on stderr before the run starts, not refused
    notes: tuple[str, ...] = ()
    # config.command's name for it
    command: str = "train"
    # --eval --backend cpu: the run's checkpoint, and why it is the one
    checkpoint: tuple[Path, str] | None = None


def resolve(s: Settings, skill: Skill | None) -> Run:
    """The settings of the command `s` picks, for `skill` (None for --list and --init); Exit(2) or SkillError on a
    problem. `s` itself never changes: each step returns a changed copy."""
    name = command(s)
    if name in AS_GIVEN:
        return Run(s, command=name)
    s = internalize(s)
    if name == "export":
        return Run(export_run(s, skill), command=name)
    if name != "train":
        checkpoint = None
        if s.eval and s.backend == "cpu" and not s.model:
            s, checkpoint = cpu_eval_run(s, skill)
        elif s.checkpoint is not None:
            raise Exit(2, "--checkpoint goes with --export DIR, or with --eval --backend cpu (no --model)")
        s = presets(s, None)
        return Run(s, judge(s), command=name, checkpoint=checkpoint)
    return training(s, skill)


def training(s: Settings, skill: Skill) -> Run:
    """A training run's settings: presets for the backend that runs, the warm start, the backend and base model,
    the KL anchor, the run's name and the judge, in the order their problems are reported."""
    from skill_rl.prompts import default_floor
    from skill_rl.training import backends, warmstart

    if s.internalize and skill.tools:
        raise Exit(2, f"{skill.path / 'SKILL.md'}: --internalize is not supported for a skill with tools yet")
    # the CPU backend may default to both
    by_default, said_none = s.sft is None, s.judge == "none"
    if said_none and not s.format_only_reward and (problem := checks_only_problem(skill, skill.split("train"))):
        raise Exit(2, problem)
    # before pick_backend, whose check of ART's vLLM runtime imports ART
    cache = model_cache(s.backend)
    try:
        picked = backends.pick_backend(s.backend)
    # no way to train: backends.plan says so, after the --sft flags' problems
    except Exit:
        picked = None
    # presets: --backend cpu's short run and warm start
    s = presets(s, picked and picked[0], skill)
    # --sft flags and files: every problem, before anything runs
    sft = warmstart.prepare(s, skill, by_default)
    if s.internalize and s.internalize_floor is None:
        s = replace(s, internalize_floor=default_floor(sft is not None))
    # no way to train, or a base model the backend refuses
    plan = backends.plan(s, skill, picked)
    s = kl_anchor(replace(s, backend=plan.kind, base_model=plan.base_model), sft is not None)
    s = replace(s, run_name=s.run_name or run_name(skill, s.base_model))
    notes = (cache,) if cache else ()
    if s.judge == "none" and not said_none and (problem := checks_only_problem(skill, skill.split("train"))):
        # a CPU rehearsal's default: said, not refused
        notes += (f"note: {problem}",)
        # what the run does, so that its written config.yaml runs it again
        s = replace(s, format_only_reward=True)
    return Run(s, judge(s), plan, sft, notes)


def kl_anchor(s: Settings, warm_start: bool) -> Settings:
    """--kl-coef: refused where the backend ignores it; left out, its default (training/anchor.py)."""
    from skill_rl.training import anchor

    anchor.check_flags(s)
    return s if s.kl_coef is not None else replace(s, kl_coef=anchor.default_coef(s.backend, warm_start))


def internalize(s: Settings) -> Settings:
    """--internalize and --without-skill: where they apply, and their defaults (docs/internalize.md); the floor's
    default waits for the warm start's plan (resolve)."""
    internal, without, floor, baseline = s.internalize, s.without_skill, s.internalize_floor, s.eval and s.baseline
    command = "--export" if s.export is not None else "--score" if s.score else "--eval" if s.eval else None
    if internal and command:
        raise Exit(
            2,
            f"--internalize trains a run; {command} does not train (--eval compares a model with and "
            "without SKILL.md with --baseline --without-skill stub|none)",
        )
    if floor is not None and not internal:
        raise Exit(2, "--internalize-floor goes with --internalize")
    if without is not None and not internal and not baseline:
        raise Exit(2, "--without-skill applies to --eval --baseline and to --internalize")
    if internal:
        return replace(s, without_skill=without or "stub")
    if baseline:
        # what --baseline always sent
        return replace(s, without_skill=without or "description")
    return s


def run_name(skill: Skill, base_model: str) -> str:
    """A run's default name: `<skill>-<base model's last path part, lower case>`."""
    return f"{skill.name}-{re.sub(r'[^a-z0-9._-]+', '-', base_model.split('/')[-1].lower())}"


def export_run(s: Settings, skill: Skill) -> Settings:
    """--export: the run named as training names it (--run-name, else the skill and the base model training would
    pick: --base-model, else the default of --backend, `auto` picked as training picks it) and the checkpoint
    (default best). Refuses a W&B Serverless or Tinker run, whose weights are not on this machine."""
    from skill_rl.training import backends

    kind = s.backend
    if kind in ("serverless", "tinker"):
        raise Exit(2, backends.REMOTE_WEIGHTS[kind])
    if kind == "auto" and not s.run_name and not s.base_model:
        try:
            # the merge needs no vLLM runtime
            kind = backends.pick_backend("auto", to_train=False)[0]
        # no backend here: the run is named by the flags alone
        except Exit:
            kind = None
    base_model = s.base_model or backends.DEFAULT_BASE_MODEL.get(kind or "")
    if not s.run_name and not base_model:
        raise Exit(
            2,
            "--export: no backend is set up here to pick the default base model, so the run's name is "
            "unknown; pass the --run-name (or --base-model, or --backend) the training used",
        )
    # --base-model stays as given: the run's records name it
    return replace(s, checkpoint=s.checkpoint or "best", run_name=s.run_name or run_name(skill, base_model))


def cpu_eval_run(s: Settings, skill: Skill) -> tuple[Settings, tuple[Path, str]]:
    """--eval --backend cpu without --model: the CPU run named as training names it, its checkpoint (--checkpoint,
    default best) evaluated in this process against its base model (skill_rl/commands/cpu_evaluation.py), with the run's own
    generation settings (max tokens, temperature, context) where the command line gives none. Returns the settings
    and (the checkpoint's folder, why it is the one)."""
    from skill_rl.commands import cpu_evaluation as evaluation
    from skill_rl.cpu.weights import TINY_MODEL

    s = replace(s, run_name=s.run_name or run_name(skill, s.base_model or TINY_MODEL))
    where = evaluation.run_folder(s.project, s.run_name)
    s = replace(s, **{key: value for key, value in evaluation.run_settings(where).items() if getattr(s, key) is None})
    s = default_judge(replace(s, base_model=s.base_model or TINY_MODEL), "cpu")
    checkpoint, why = evaluation.pick(where, s.checkpoint or "best")
    return s, (Path(checkpoint), why)


def model_cache(backend: str) -> str | None:
    """For a local GPU run (--backend local, or auto on a machine with a GPU and ART's backend extra): HF_HOME,
    when unset, set to the user's cache (`$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`), and a note
    saying so; None otherwise.

    With HF_HOME and XDG_CACHE_HOME unset, ART 0.5.23 points its vLLM runtime's HF_HOME at
    `/tmp/art-cache/huggingface` (art/utils/cache_dirs.py, configure_model_cache_env), where a reboot loses the
    base model's weights, while Unsloth in this process downloads them again into huggingface_hub's own default.
    Set before ART is imported, both read that default, which outlives a reboot; --export (transformers, in its
    own process) finds the weights there without being told."""
    from skill_rl.training import backends

    local = backend == "local" or (backend == "auto" and backends.has_gpu() and backends.backend_extra())
    if not local or os.environ.get("HF_HOME"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.environ["HF_HOME"] = home = os.path.join(base, "huggingface")
    return (
        f"note: HF_HOME was unset, so it is {home} for this run: the base model is downloaded there once, "
        "for vLLM and Unsloth alike, and kept across reboots (set HF_HOME to choose another folder)"
    )


def presets(s: Settings, kind: str | None, skill: Skill | None = None) -> Settings:
    """The flags left out filled in, for the backend that runs (None: a command that does not train): the CPU's
    short run (cpu.DEFAULTS) or the GPU's (each field's `preset`, settings.PRESETS). The CPU warm-starts by default
    when the tasks have references (or --sft-from names another source), and scores with checks only unless a
    judge is set up: a rehearsal needs no key."""
    from skill_rl import cpu

    if kind == "cpu" and s.sft is None and skill and not s.sft_from:
        s = replace(s, sft=any(t.reference for t in skill.split("train")))
    table = PRESETS
    if kind == "cpu":
        table = {**PRESETS, **cpu.DEFAULTS, **(cpu.TOOL_DEFAULTS if skill and skill.tools else {})}
    return default_judge(replace(s, **{k: v for k, v in table.items() if getattr(s, k) is None}), kind)


def default_judge(s: Settings, kind: str | None) -> Settings:
    """--judge when not given: ruler, except on the CPU, which scores with checks only unless a judge is set up."""
    if s.judge is not None:
        return s
    configured = (
        s.judge_base_url
        or s.judge_model
        or any(os.environ.get(k) for k in ("JUDGE_BASE_URL", "JUDGE_API_KEY", "OPENAI_API_KEY"))
    )
    return replace(s, judge="none" if kind == "cpu" and not configured else "ruler")


def judge(s: Settings) -> Judge | None:
    """The RULER judge from the settings and the environment (the one place its endpoint and key are read)."""
    from skill_rl.scoring.cache import default_path
    from skill_rl.scoring.reward import DEFAULT_JUDGE, Judge
    from skill_rl.settings.env import judge_env_problem

    if s.judge == "none":
        return None
    base_url = s.judge_base_url or os.environ.get("JUDGE_BASE_URL")
    model = s.judge_model or (f"openai/{os.environ.get('JUDGE_MODEL', 'judge')}" if base_url else DEFAULT_JUDGE)
    key = s.judge_api_key or os.environ.get("JUDGE_API_KEY")
    # any LiteLLM provider, checked before spending
    model, problem = judge_env_problem(model, base_url, key)
    if problem:
        raise Exit(2, problem)
    cache = None if s.no_judge_cache else str(default_path())
    return Judge(
        model=model, base_url=base_url, api_key=key, attempts=s.judge_attempts, timeout=s.judge_timeout, cache=cache
    )
