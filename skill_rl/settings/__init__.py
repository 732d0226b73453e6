"""Every setting of a run, declared once: a frozen dataclass whose fields carry their type, default, help,
flag, group, validator (skill_rl/settings/flags.py), choices and metavar. The command-line parser, the GPU presets and
docs/cli.md's flag tables are generated from it (TRL's `GRPOConfig` pattern).

    s = Settings.from_flags(["--skill", "git-commit", "--steps", "5"])   # what the command line makes
    s = dataclasses.replace(s, steps=10)                                 # a changed copy; `s` never changes

A field left `None` is filled in by config.resolve: its `preset` (a training run's default on a GPU, Serverless
or Tinker) or cpu.DEFAULTS (a CPU rehearsal's), and the settings a command runs with are the resolved copy.
"""

from __future__ import annotations

import argparse
import builtins
import html
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from skill_rl import prompts
from skill_rl.errors import Exit
from skill_rl.settings import configfile, defaults, flags


def option(group: str):
    """A declarer of the flags of one `--help` group: `name: type = flag(default, help, type=..., ...)`."""

    def flag(default: Any = None, help: str = "", *, preset: Any = None, see: str = "", **argparse_kwargs) -> Any:
        """One flag, `--<field name with dashes>`: `default` as the parser leaves it, `help` as `--help` prints it,
        `preset` (a training run's default where `default` is None), `see` (a docs link, docs/cli.md's alone), and
        argparse's own `type`, `choices`, `metavar`, `action`, `nargs`, `const`."""
        meta = {"group": group, "help": help, "preset": preset, "see": see, "argparse": argparse_kwargs}
        if isinstance(default, list):
            return field(default_factory=list, metadata=meta)
        return field(default=default, metadata=meta)

    return flag


SKILL = option("skill")
JUDGE = option("judge (RULER)")
EVAL = option("evaluation (--eval)")
TRAIN = option("training")
WARM = option("warm start (--sft): supervised fine-tuning before the first RL step")
GIT = option("tasks from git history (--tasks-from-git; --out and --limit apply too)")
GPU = option(
    "fitting a GPU (--backend local; --context-tokens, at most the model's context, is also the sequence "
    "length ART trains and serves with)"
)
EXPORT = option(
    "export (--export; the run is named as training names it: --run-name, --project, --base-model, --backend)"
)
ON = {"action": "store_true"}
KL = "[The KL anchor on each backend](backends.md#the-kl-anchor-on-each-backend)"
FIT = "[Fitting a GPU](backends.md#fitting-a-gpu)"


@dataclass(frozen=True)
class Settings:
    """Every flag of a run; read-only. `from_flags` parses a command line; config.resolve fills in the rest.
    (`builtins.list`: inside this class, `list` is the --list field.)"""

    # skill
    config: Path | None = SKILL(
        help="flags from a YAML file, keyed by the flags' names (a run folder's config.yaml "
        "runs it again); flags given here win",
        type=Path,
        metavar="FILE",
        see="[A config file](#a-config-file)",
    )
    skill: str | None = SKILL(help="skill folder name under --skills-dir", type=flags.skill_name)
    skills_dir: Path | None = SKILL(
        help="where skills live (default: ./skills if present, then the shipped skills; --init: ./skills)", type=Path
    )
    list: bool = SKILL(False, "list the skills with their descriptions", **ON)
    init: str | None = SKILL(help="start a new skill NAME from the template", type=flags.skill_name, metavar="NAME")
    check: bool = SKILL(False, "validate SKILL.md and tasks.jsonl, print a summary", **ON)
    score: Path | None = SKILL(
        help="score the outputs in a JSONL file",
        type=Path,
        metavar="FILE",
        see="[Scoring and evaluating](#scoring-and-evaluating)",
    )
    eval: bool = SKILL(False, "compare --model endpoints on the skill's held-out tasks", **ON)
    out: Path | None = SKILL(
        help="--score: JSONL file (default stdout); --eval: output folder; --tasks-from-git: tasks file", type=Path
    )
    resume: bool = SKILL(False, "--score/--eval: keep what --out already holds, do only the rest", **ON)
    quiet: bool = SKILL(False, "no progress bars (they are off anyway when output is not a terminal)", **ON)

    # judge (RULER)
    judge: str | None = JUDGE(
        help="'none' scores offline: checks only (default ruler; --backend cpu: none unless a judge is set up)",
        choices=("ruler", "none"),
    )
    format_only_reward: bool = JUDGE(
        False,
        "train with --judge none even when the checks cover little of correctness (raw tasks without "
        "`expect`, a markdown-only skill): the reward then pays mostly for form",
        **ON,
    )
    judge_model: str | None = JUDGE(
        help="LiteLLM model id (default openai/gpt-4.1-mini; with --judge-base-url, openai/<served name>)"
    )
    judge_base_url: str | None = JUDGE(
        help="OpenAI-compatible judge endpoint (vLLM, Ollama, ...); env JUDGE_BASE_URL", type=flags.url
    )
    judge_api_key: str | None = JUDGE(help="judge API key; env JUDGE_API_KEY, else OPENAI_API_KEY")
    judge_attempts: int = JUDGE(3, "tries per judge call before the group is scored by checks only", type=flags.count())
    no_judge_cache: bool = JUDGE(
        False,
        "judge every group afresh: neither read nor write the judge cache "
        "($XDG_CACHE_HOME/skill-rl, else ~/.cache/skill-rl)",
        **ON,
        see="[The judge cache](scoring.md#the-judge-cache)",
    )
    judge_timeout: float = JUDGE(60.0, "seconds per judge try", type=flags.number(above=0))
    audit: bool = JUDGE(
        False,
        "the judge audit alone: the skill's exploit families and the references of "
        "--audit-tasks train tasks scored as one group each by the configured reward (judge "
        "included, cached); exit 2 when the reward does not rank the reference above a family "
        "on more than 10 %% of them (docs/scoring.md)",
        **ON,
        see="[The judge audit](scoring.md#the-judge-audit)",
    )
    audit_tasks: int = JUDGE(
        8,
        "train tasks the judge audit scores, with --audit and before every training run with a "
        "judge (default 8; 0: no audit before training)",
        type=flags.count(0),
        metavar="N",
    )
    accept_exploits: bool = JUDGE(
        False,
        "train (or end --audit with 0) even when the judge audit finds exploit "
        "families the reward does not rank below the reference: they are named in a "
        "warning",
        **ON,
    )

    # evaluation (--eval)
    model: builtins.list[str] = EVAL(
        [],
        "model id at --base-url, or label=ID@URL; repeatable",
        type=flags.model_spec,
        action="append",
        metavar="SPEC",
    )
    base_url: str | None = EVAL(help="default endpoint for --model (env OPENAI_BASE_URL)", type=flags.url)
    api_key: str | None = EVAL(help="key for --base-url (env OPENAI_API_KEY)")
    split: str = EVAL("val", "tasks to evaluate on (default val)", choices=("train", "val", "all"))
    limit: int | None = EVAL(
        help="--eval: the first N tasks only; training: validate on the first N val tasks "
        "(default all; cpu 6); --tasks-from-git: the newest N commits of --rev",
        type=flags.count(),
    )
    samples: int = EVAL(1, "outputs per model per task (default 1)", type=flags.count())
    concurrency: int = EVAL(8, "requests in flight per model (default 8)", type=flags.count())
    baseline: bool = EVAL(False, "also score each model without the SKILL.md, in the same judge groups", **ON)
    without_skill: str | None = EVAL(
        help="what replaces SKILL.md as the system prompt where it is left out: stub (one line naming the skill), "
        "none (no system message) or description (the frontmatter's); in --eval --baseline's arms (default "
        "description) and --internalize's prompts and served model (default stub)",
        choices=prompts.WITHOUT,
        see="[Internalizing a skill](internalize.md)",
    )

    # training
    backend: str = TRAIN(
        "auto", "auto | local | serverless | tinker | cpu | MODULE:CLASS (default auto)", see="[Backends](backends.md)"
    )
    base_model: str | None = TRAIN(help=defaults.BASE_MODEL_HELP, see="[Base models](backends.md#base-models)")
    steps: int | None = TRAIN(
        help="training steps in all, counting resumed ones (default 50; cpu 10; a skill with tools on cpu "
        f"{defaults.CPU_TOOL_DEFAULTS['steps']})",
        type=flags.count(0),
        preset=50,
    )
    groups_per_step: int | None = TRAIN(help="tasks per step (default 8; cpu 4)", type=flags.count(), preset=8)
    rollouts_per_group: int | None = TRAIN(
        help="answers per task; RULER ranks them together (default 8; cpu 4)",
        type=flags.count(2, " (RL compares answers within a group)"),
        preset=8,
    )
    learning_rate: float | None = TRAIN(help="default 1e-5; cpu 3e-4", type=flags.number(above=0), preset=1e-5)
    eval_every: int = TRAIN(10, "validate every N steps, and at the end (default 10)", type=flags.count())
    temperature: float | None = TRAIN(
        help="sampling temperature (default 1.0 training, 0.0 --eval)", type=flags.number(minimum=0)
    )
    max_tokens: int | None = TRAIN(
        help="completion length limit, of each turn with tools (default 1024; cpu 48; a skill with tools on cpu "
        f"{defaults.CPU_TOOL_DEFAULTS['max_tokens']})",
        type=flags.count(),
        preset=1024,
    )
    max_turns: int | None = TRAIN(
        help="policy calls per episode of a skill with tools: the episode ends at a final answer or after this many "
        f"(default 6; a skill with tools on cpu {defaults.CPU_TOOL_DEFAULTS['max_turns']}; docs/tool-rollouts.md)",
        type=flags.count(),
        preset=6,
    )
    max_exceptions: float = TRAIN(
        0.1,
        "rollouts that may fail per step: a fraction below 1, or a count (default 0.1)",
        type=flags.number(minimum=0),
    )
    request_timeout: float = TRAIN(
        600.0,
        "seconds one policy completion may take (default 600)",
        type=flags.number(above=0),
        see="[Reliability](reliability.md)",
    )
    context_tokens: int | None = TRAIN(
        help="model context; tasks whose prompt (estimated at 3 characters a token) plus --max-tokens exceed it are "
        "skipped up front and listed (default 32768, Qwen2.5; cpu 4096, bounding its memory)",
        type=flags.count(),
        preset=32768,
    )
    run_name: str | None = TRAIN(help="run to create or resume (default <skill>-<base model>)", type=flags.path_part)
    project: str = TRAIN("skill-rl", "ART project (default skill-rl)", type=flags.path_part)
    seed: int = TRAIN(0, "seed for the task order and --internalize's schedule (default 0)", type=int)
    internalize: bool = TRAIN(
        False,
        "train the skill into the weights: the warm start trains each example with SKILL.md and without it, "
        "then RL's prompts leave it out (without a warm start, the chance that a prompt carries it falls from "
        "1 to 0 over the RL steps); the reward still scores against it (docs/internalize.md)",
        **ON,
        see="[Internalizing a skill](internalize.md)",
    )
    internalize_floor: float | None = TRAIN(
        help=f"--internalize: the share of the last RL steps whose prompts never carry SKILL.md (default "
        f"{prompts.WARM_FLOOR:g} after a warm start: every RL step; {prompts.DEFAULT_FLOOR:g} without one)",
        type=flags.number(minimum=0, maximum=1),
        metavar="F",
        see="[Internalizing a skill](internalize.md)",
    )
    kl_coef: float | None = TRAIN(
        help="KL anchor: each sampled token's advantage is lowered by F x its KL to the reference (ART's "
        f"kl_penalty_coef; default {defaults.DEFAULT_COEF:g} after a warm start, else 0; docs/cpu-learning.md)",
        type=flags.number(minimum=0),
        metavar="F",
        see=KL,
    )
    kl_ref_step: int | None = TRAIN(
        help="the KL anchor's reference checkpoint (default: the warm start's last step, else the base model); "
        "with --kl-coef 0 the CPU backend measures the KL to it and changes nothing",
        type=flags.count(0),
        metavar="N",
        see=KL,
    )
    prune_collapsed: bool = TRAIN(
        False,
        "while one of the skill's categorical fields (a commit's type, a review's verdict) has been the same "
        "across different tasks for 3 steps, delete at each validation the checkpoints worse on it than the "
        "best",
        **ON,
        see="[Categorical fields](skills.md#categorical-fields), "
        "[Watching a run](scoring.md#watching-a-run-for-reward-hacking)",
    )

    # warm start (--sft)
    sft: bool | None = WARM(
        help="fine-tune on good outputs before RL; once per run, recorded in its state (default "
        "off; --backend cpu: on, since its tiny base model never writes a skill's format)",
        action=argparse.BooleanOptionalAction,
        preset=False,
        see="[Warm start](warm-start.md)",
    )
    sft_from: builtins.list[str] = WARM(
        [],
        "references | teacher | FILE (JSONL of {task_id, output}); repeatable (default references)",
        action="append",
        metavar="SOURCE",
        see="[Warm start](warm-start.md)",
    )
    teacher: str | None = WARM(
        help="the teacher for --sft-from teacher: a model id at --base-url, or label=ID@URL; "
        "key: env TEACHER_API_KEY, else --api-key / OPENAI_API_KEY",
        type=flags.model_spec,
        metavar="SPEC",
    )
    teacher_samples: int = WARM(
        4, "teacher outputs per train task; the best one is kept (default 4)", type=flags.count(), metavar="K"
    )
    teacher_temperature: float = WARM(
        1.0, "teacher sampling temperature (default 1.0)", type=flags.number(minimum=0), metavar="T"
    )
    teacher_min_reward: float = WARM(
        defaults.DEFAULT_MIN_REWARD,
        "every SFT example, whatever its source, must score at least this reward "
        f"(default {defaults.DEFAULT_MIN_REWARD})",
        type=flags.number(minimum=0, maximum=1, what=" (a reward)"),
        metavar="R",
    )
    sft_epochs: int | None = WARM(
        help="passes over the examples, one train_sft call each (default 1, as ART's SFT helpers; a skill with "
        f"tools on cpu {defaults.CPU_TOOL_DEFAULTS['sft_epochs']})",
        type=flags.count(),
        metavar="N",
        preset=1,
    )
    sft_learning_rate: float | None = WARM(
        help=f"default {defaults.DEFAULT_LEARNING_RATE:g}, ART's TrainSFTConfig default; --backend cpu "
        f"{defaults.CPU_DEFAULTS['sft_learning_rate']:g}",
        type=flags.number(above=0, below=1),
        metavar="LR",
        preset=defaults.DEFAULT_LEARNING_RATE,
    )
    sft_batch_size: int | str = WARM(
        "auto",
        "examples per gradient step, or auto: the backend's default (default auto)",
        type=flags.count_or_auto,
        metavar="N|auto",
    )

    # tasks from git history
    tasks_from_git: str | None = GIT(
        help="mine tasks for --skill from this git repository's commits",
        metavar="REPO",
        see="[Tasks from git history](tasks-from-git.md)",
    )
    rev: str = GIT("HEAD", "revision or range to walk, e.g. v1.0..main (default HEAD)", metavar="RANGE")
    val_fraction: float = GIT(
        0.2, "share of commits (by a hash of the sha) put in val (default 0.2)", type=flags.number(minimum=0, below=1)
    )
    max_diff_chars: int = GIT(12_000, "skip commits whose diff is longer (default 12000)", type=flags.count())
    clean_ratio: float = GIT(
        1.0,
        "clean examples (code-review: approve tasks) kept per other task, chosen by a hash of the sha (default 1)",
        type=flags.number(minimum=0),
    )
    clean_window: int = GIT(
        50,
        "later commits a hook may look at (code-review: a change is clean when none of the "
        "next N commits fixes its lines; default 50)",
        type=flags.count(),
    )
    workspaces: bool = GIT(
        False,
        "also write a git workspace per task into workspaces/ beside --out: the touched files at the parent, the "
        "earlier commits' messages, the change staged (docs/tools.md)",
        **ON,
    )
    force: bool = GIT(False, "replace --out when it exists", **ON)

    # fitting a GPU
    gpu_memory: float | None = GPU(
        help="share of GPU memory vLLM may take, in (0, 1] (default: vLLM's own); lower it "
        "if vLLM runs out of memory at start-up",
        type=flags.number(above=0, maximum=1),
        metavar="F",
        see=FIT,
    )
    lora_rank: int | None = GPU(
        help="LoRA rank (default: ART's, 8); --backend tinker too", type=int, choices=defaults.LORA_RANKS, see=FIT
    )

    # export
    export: Path | None = EXPORT(
        help="write a trained checkpoint to DIR: adapter, merged model, model card "
        "(docs/export.md); with --force, replace an earlier export there",
        type=Path,
        metavar="DIR",
        see="[Export](export.md)",
    )
    checkpoint: str | int | None = EXPORT(
        help="--export, --eval --backend cpu: which checkpoint (default best: the "
        "highest mean val/reward, as ART keeps it)",
        type=flags.checkpoint_spec,
        metavar="STEP|best|latest",
    )
    gguf: str | None = EXPORT(
        help="--export: also write the merged model as one GGUF file, f16 (default) or q8_0, for "
        "llama.cpp and Ollama (Llama/SmolLM2 and Qwen2; the Modelfile then loads it)",
        nargs="?",
        const="f16",
        choices=("f16", "q8_0"),
        metavar="TYPE",
        see="[GGUF](export.md#gguf-llamacpp-lm-studio-ollama)",
    )
    card_eval: Path | None = EXPORT(
        help="--export: the --out folder of an --eval run (results.json, chart.png) whose "
        "table of models and judge go into the model card",
        type=Path,
        metavar="DIR",
        see="[The --eval table in the card](export.md#the---eval-table-in-the-card)",
    )
    push_to_hub: str | None = EXPORT(
        help="--export: then upload DIR to the Hugging Face Hub repository REPO "
        "(owner/name; created private if missing), with HF_TOKEN or a `hf auth "
        "login` token",
        metavar="REPO",
        see="[Uploading](export.md#uploading-to-the-hugging-face-hub)",
    )

    @classmethod
    def from_flags(cls, argv: list[str] | None = None) -> Settings:
        """The settings a command line gives (sys.argv when None); exits 2 with one line on a bad flag."""
        return parse(argv)


PRESETS = {f.name: f.metadata["preset"] for f in fields(Settings) if f.metadata["preset"] is not None}


def default(f) -> Any:
    """A field's default as the parser leaves it (a fresh list for a repeatable flag)."""
    return f.default_factory() if f.default is MISSING else f.default


def parser(description: str = "") -> flags.Parser:
    """The command line, generated from Settings: one argparse group per field group, in declaration order."""
    p = flags.Parser(description=description or None, formatter_class=argparse.RawDescriptionHelpFormatter)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in fields(Settings):
        meta = f.metadata
        group = groups.get(meta["group"]) or groups.setdefault(meta["group"], p.add_argument_group(meta["group"]))
        group.add_argument(
            "--" + f.name.replace("_", "-"), dest=f.name, default=default(f), help=meta["help"], **meta["argparse"]
        )
    return p


def parse(argv: list[str] | None = None, description: str = "") -> Settings:
    """Parse (and `--config FILE`'s values), then the checks across flags; exit 2 with one line on a problem."""
    p = parser(description)
    args = p.parse_args(argv)
    if args.config is not None:
        try:
            args = configfile.apply(p, argv, args)
        except Exit as e:
            p.exit(2, f"error: {e}\n")
    if args.steps == 0 and not args.sft:
        p.error("argument --steps: 0 trains nothing; 0 is for a warm start alone (--sft)")
    if args.export is None and (
        given := [
            f
            for f, v in (
                ("--checkpoint", None if args.eval else args.checkpoint),
                ("--card-eval", args.card_eval),
                ("--gguf", args.gguf),
                ("--push-to-hub", args.push_to_hub),
            )
            if v is not None
        ]
    ):
        p.error(
            f"{given[0]} goes with --export DIR" + (" or --eval --backend cpu" if given[0] == "--checkpoint" else "")
        )
    if args.context_tokens is not None and args.max_tokens is not None and args.context_tokens <= args.max_tokens:
        p.error(
            f"--context-tokens {args.context_tokens} leaves no room for a prompt beside --max-tokens {args.max_tokens}"
        )
    return Settings(**vars(args))


# ------------------------------------------------------------------ docs/cli.md's flag tables


def markdown(text: str) -> str:
    """Text for a markdown table cell: `|` escaped, `<`, `>` and `&` as entities."""
    return html.escape(text, quote=False).replace("|", "\\|")


def reference() -> str:
    """docs/cli.md's "Every flag" tables: one per `--help` group, each flag as `--help` names it and its help as
    `--help` prints it (before wrapping), with a docs link where the field has one."""
    p = parser()
    formatter, see = p._get_formatter(), {f.name: f.metadata["see"] for f in fields(Settings)}
    out = []
    for group in p._action_groups:
        actions = [a for a in group._group_actions if a.dest != "help"]
        if not actions:
            continue
        out += [f"### {group.title}", "", "| flag | meaning | see |", "|---|---|---|"]
        for a in actions:
            flag = formatter._format_action_invocation(a).replace("|", "\\|")
            out.append(f"| `{flag}` | {markdown(formatter._expand_help(a))} | {see[a.dest]} |")
        out.append("")
    # a blank line before cog's end marker: the table ends there
    return "\n".join(out) + "\n"
