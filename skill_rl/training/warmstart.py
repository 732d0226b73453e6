"""`--sft`: a supervised warm start before RL, through ART's `TrainableModel.train_sft`.

A base model that rarely produces a valid output gives RL nothing to rank: its groups score alike
and teach nothing. A short supervised fine-tune on good outputs first gives RL a model to improve.
Each example is a chat of SKILL.md (system), a train task's input (user) and a good output
(assistant), from any mix of three sources (`--sft-from`, repeatable):

  references   the tasks' `reference` fields;
  teacher      `--teacher-samples` outputs per train task from `--teacher SPEC` (as `--eval` takes it);
  FILE         a JSONL of `{"task_id": ..., "output": ...}`, such as the one a warm start writes.

Nothing is trusted unscored: every candidate, whatever its source, is scored with the training
scorer (each task's candidates judged as one group) and dropped below `--teacher-min-reward`;
of the teacher's samples only the best per task is kept. Val tasks never reach SFT. The kept
examples, with their scores, go to `<run dir>/warmstart.jsonl` (a valid `--sft-from FILE`, so a
paid teacher is called once), and the run's state (ART's `state.json`) records the warm start:
it is never applied twice, and one stopped between epochs resumes at the next epoch.

A skill with tools (docs/tools.md) warm-starts from scripted reference episodes instead: its checks.py's
`reference_episode(task)` gives the calls (inspect, then act), which are played for real in a fresh copy of the
task's workspace through the Toolbox (skill_rl/tools/scripted.py), so the tool messages carry real results; its
`final_answer(task)` closes the episode. Each is scored with its episode like a rollout, and the whole chat (the
assistant's calls, the tool results, the answer) is what SFT trains on, with the skill's tools, only the
assistant's turns weighted. Only `--sft-from references` applies to such a skill.

With `--internalize` every example is trained on twice: with SKILL.md and with what `--without-skill` names
in its place (docs/internalize.md says why).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skill_rl import prompts
from skill_rl.endpoints import Endpoint, client, generate, parse_spec
from skill_rl.errors import Exit
from skill_rl.files import atomic_write, read_objects
from skill_rl.keys import MASK, redact
from skill_rl.skills import Skill, SkillError, Task
from skill_rl.text import display, problem, pydantic_problems, show
from skill_rl.tools import scripted
from skill_rl.training import history

# under this key in ART's state.json (model.merge_state)
STATE_KEY = "skill_rl_warm_start"
# in the run's folder
EXAMPLES_FILE = "warmstart.jsonl"
SOURCES = ("references", "teacher")
SOURCE_LABELS = {"reference": "references", "file": "from files", "teacher": "from the teacher"}


# ------------------------------------------------------------------ before anything runs


class Example(BaseModel):
    """One line of an SFT file: an output for one train task. The scores a warm start writes beside
    it are accepted and ignored: every output is scored again before it is used."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    task_id: str = Field(min_length=1)
    output: str = Field(pattern=r"\S")
    source: str | None = None
    reward: float | None = None
    format: float | None = None
    procedure: float | None = None
    correctness: float | None = None
    judged: bool | None = None
    # a skill with tools: the episode's messages after the system prompt and the task (scripted.play)
    messages: list[dict] | None = None


def read_examples(path: Path, skill: Skill, problems: list[str]) -> list[Example]:
    """Every valid line of an SFT file (skill_rl/files.py's strict JSONL reader); one message per bad line in
    `problems`."""
    out, by_id = [], {t.id: t for t in skill.tasks}
    for n, obj in read_objects(path, problems, " with task_id and output"):
        try:
            ex = Example.model_validate(obj)
        except ValidationError as e:
            problems.extend(pydantic_problems(path, e, lambda loc, n=n: n))
            continue
        task = by_id.get(ex.task_id)
        if task is None:
            problems.append(
                problem(path, n, f"field 'task_id' {show(ex.task_id)} is not in {display(skill.tasks_path)}")
            )
        elif task.split != "train":
            problems.append(
                problem(
                    path,
                    n,
                    f"field 'task_id' {show(ex.task_id)} is a {task.split} task; only train tasks may reach SFT",
                )
            )
        else:
            out.append(ex)
    return out


@dataclass
class Plan:
    """What `--sft` asked for, checked before anything runs."""

    sources: list[str]
    teacher: Endpoint | None = None
    from_files: list[Example] = field(default_factory=list)
    # the backend's default (--backend cpu), not --sft: a run trained without one stays so
    by_default: bool = False


def prepare(args, skill: Skill, by_default: bool = False) -> Plan | None:
    """Check the warm-start flags and read every `--sft-from FILE`; raise SkillError listing every problem."""
    problems: list[str] = []
    if not args.sft:
        if args.sft_from or args.teacher:
            raise SkillError(["error: --sft-from and --teacher apply only with --sft"])
        return None
    plan = Plan(sources=list(dict.fromkeys(args.sft_from or ["references"])), by_default=by_default)
    if args.backend == "tinker":
        problems.append(
            "error: --sft: ART 0.5.23's Tinker backend cannot fine-tune (its train_sft raises NotImplementedError); use --backend local or serverless"
        )
    if "teacher" in plan.sources:
        key = os.environ.get("TEACHER_API_KEY") or args.api_key or os.environ.get("OPENAI_API_KEY")
        try:
            plan.teacher = parse_spec(args.teacher or "", args.base_url or os.environ.get("OPENAI_BASE_URL"), key)
        except ValueError:
            problems.append(
                f"error: --sft-from teacher needs --teacher SPEC (a model id, or label=ID@URL), got {args.teacher!r}"
            )
    elif args.teacher:
        problems.append("error: --teacher is used only with --sft-from teacher")
    if scripted.has_script(skill) and (plan.teacher or plan.sources != ["references"] or args.teacher):
        problems.append(
            f"error: --sft-from: {skill.name} acts with tools: it warm-starts from its scripted reference episodes "
            "only (--sft-from references; docs/tools.md)"
        )
    if "references" in plan.sources and not any(t.reference for t in skill.split("train")):
        problems.append(f"{display(skill.tasks_path)}: --sft-from references: no train task has a 'reference'")
    for source in plan.sources:
        if source not in SOURCES:
            plan.from_files += read_examples(Path(source), skill, problems)
    if problems:
        raise SkillError(problems)
    return plan


# ------------------------------------------------------------------ candidates, scored


def quotes_key(output: str, source: str) -> bool:
    """Whether an output quotes one of this process's keys, or (from a file or the teacher, whose answers are
    redacted as they arrive) holds the mask `***` that stands for one: a masked example would teach the model
    to write `***`, and the unmasked one would put the key in the model and in ART's logs."""
    return redact(output) != output or (source != "reference" and MASK in output)


@dataclass
class Candidate:
    output: str
    sources: list[str]
    # rubric.Score, once scored
    score: object = None
    # a scripted episode (skill_rl/tools/scripted.py Played), for a skill with tools
    played: object = None


async def sample_teacher(
    args, plan: Plan, skill: Skill, tasks: list[Task]
) -> tuple[dict[str, list[tuple[str, str | None]]], list[str]]:
    """The teacher's outputs per task id, and one line per task it failed on (after the client's retries)."""
    ep, gate = plan.teacher, asyncio.Semaphore(args.concurrency)
    teacher = client(ep, args.request_timeout)
    try:
        outs = await asyncio.gather(
            *(
                generate(teacher, ep, skill, t, args.teacher_samples, args.teacher_temperature, args.max_tokens, gate)
                for t in tasks
            ),
            return_exceptions=True,
        )
    finally:
        await teacher.close()
    served = {t.id: o for t, o in zip(tasks, outs) if not isinstance(o, BaseException)}
    failed = [
        f"teacher {ep.label}: {t.id}: {type(o).__name__}: {redact(str(o))[:160]}"
        for t, o in zip(tasks, outs)
        if isinstance(o, BaseException)
    ]
    return served, failed


async def candidates(
    args, plan: Plan, skill: Skill, tasks: list[Task], counts: dict, turn_tokens=None
) -> tuple[dict[str, list[Candidate]], list[str]]:
    """Every source's outputs per train task, duplicates merged (same task, same text once stripped); `turn_tokens`
    (training/backends.py) measures a scripted episode's turns against --max-tokens."""
    by_task: dict[str, list[Candidate]] = {t.id: [] for t in tasks}
    # (task id, stripped output) -> its candidate: one look-up per line
    seen: dict[tuple[str, str], Candidate] = {}

    def add(task_id: str, output: str, source: str) -> None:
        # a train task skipped as too long for --context-tokens
        if task_id not in by_task:
            counts["too long"] += 1
            return
        counts[source] += 1
        # never scored (the judge would read it), never trained on, never written
        if quotes_key(output, source):
            counts["quoting an API key"] += 1
            return
        same = seen.get((task_id, output.strip()))
        if same:
            counts["duplicates"] += 1
            same.sources.append(source)
        else:
            by_task[task_id].append(seen.setdefault((task_id, output.strip()), Candidate(output, [source])))

    for t in tasks if "references" in plan.sources else []:
        if scripted.has_script(skill):
            await _add_episode(t, skill, by_task, counts, args.max_tokens, turn_tokens)
        elif t.reference:
            add(t.id, t.reference, "reference")
    for ex in plan.from_files:
        add(ex.task_id, ex.output, "file")
    failed: list[str] = []
    if plan.teacher:
        served, failed = await sample_teacher(args, plan, skill, tasks)
        for task_id, outs in served.items():
            for text, finish in outs:
                if finish == "length":
                    counts["cut by --max-tokens"] += 1
                else:
                    add(task_id, text, "teacher")
    return by_task, failed


async def _add_episode(
    task: Task, skill: Skill, by_task: dict[str, list[Candidate]], counts: dict, max_tokens: int, turn_tokens=None
) -> None:
    """The task's scripted reference episode as a candidate, played for real (in a thread: tools are synchronous),
    unless one of its turns is longer than `max_tokens` by `turn_tokens` (None: not measured). A rollout's turn stops
    there, and a tool call cut before its end is no call at all: the commit a long message would make never happens,
    and an example of it teaches the policy to start calls it cannot finish."""
    if task.id not in by_task:
        counts["too long"] += 1
        return
    played = await asyncio.to_thread(scripted.reference, skill, task)
    if played is None:
        return
    counts["reference"] += 1
    if turn_tokens is not None and max_tokens and turn_tokens(played.messages) > max_tokens:
        counts["cut by --max-tokens"] += 1
        played.close()
        return
    if quotes_key(json.dumps(played.messages), "reference"):
        counts["quoting an API key"] += 1
        played.close()
        return
    by_task[task.id].append(Candidate(played.output, ["reference"], played=played))


def select(cands: list[Candidate], min_reward: float, counts: dict) -> list[Candidate]:
    """The scored candidates to keep for one task: all that reach `min_reward`, but of those only
    the teacher proposed, only the best."""
    keep = [c for c in cands if c.score.reward >= min_reward]
    counts["below the minimum reward"] += len(cands) - len(keep)
    teacher_only = [c for c in keep if set(c.sources) == {"teacher"}]
    best = max(teacher_only, key=lambda c: c.score.reward, default=None)
    counts["teacher samples below their task's best"] += max(0, len(teacher_only) - 1)
    return [c for c in keep if c is best or c not in teacher_only]


async def collect(args, plan: Plan, scorer, tasks: list[Task], turn_tokens=None) -> tuple[list[dict], int]:
    """The kept examples as records (task order), and the number of failures (teacher tasks, judge groups);
    `turn_tokens`: see candidates."""
    counts = dict.fromkeys(
        (
            "reference",
            "file",
            "teacher",
            "duplicates",
            "too long",
            "cut by --max-tokens",
            "quoting an API key",
            "below the minimum reward",
            "teacher samples below their task's best",
        ),
        0,
    )
    by_task, failed = await candidates(args, plan, scorer.skill, tasks, counts, turn_tokens)
    for line in failed:
        print(line, file=sys.stderr, flush=True)
    gate, judge_failures = asyncio.Semaphore(args.concurrency), 0

    async def score(task: Task):
        nonlocal judge_failures
        cands = by_task[task.id]
        episodes = [c.played.episode if c.played else None for c in cands] if any(c.played for c in cands) else None
        async with gate:
            try:
                result = await scorer.score(task, [c.output for c in cands], episodes)
            finally:
                for c in cands:
                    if c.played:
                        c.played.close()
        judge_failures += result.judge_failed
        for c, s in zip(by_task[task.id], result.scores):
            c.score = s

    await asyncio.gather(*(score(t) for t in tasks if by_task[t.id]))
    records = [
        {
            "task_id": t.id,
            "output": c.output,
            "source": "+".join(dict.fromkeys(c.sources)),
            "reward": round(c.score.reward, 6),
            "format": c.score.format,
            "procedure": c.score.procedure,
            "correctness": c.score.correctness,
            "judged": c.score.judged,
            **({"messages": c.played.messages} if c.played else {}),
        }
        for t in tasks
        for c in select(by_task[t.id], args.teacher_min_reward, counts)
    ]
    found = ", ".join(f"{counts[k]} {label}" for k, label in SOURCE_LABELS.items() if counts[k])
    dropped = ", ".join(f"{v} {k}" for k, v in counts.items() if v and k not in SOURCE_LABELS)
    # none asked: none failed
    teacher = f"{len(failed)} teacher task failure(s)" if plan.teacher else "no teacher"
    judged = f"{judge_failures} judge failure(s)" if scorer.judge is not None else "no judge (checks only)"
    print(
        f"warm start: candidates {found or 'none'}; {teacher}; {judged}; dropped: {dropped or 'nothing'} "
        f"(--teacher-min-reward {args.teacher_min_reward:g})"
    )
    print(
        f"warm start: kept {len(records)} example(s) for {len({r['task_id'] for r in records})} of {len(tasks)} train tasks",
        flush=True,
    )
    return records, len(failed) + judge_failures


# ------------------------------------------------------------------ the warm start


@dataclass
class Outcome:
    # ART steps (checkpoints) the warm start took, in this invocation or an earlier one
    steps: int = 0
    # fine-tuned in this invocation
    trained: bool = False
    # teacher tasks and judge groups that failed while collecting examples
    failures: int = 0


def _trajectories(skill: Skill, records: list[dict], without: str | None = None):
    """One chat per example; `without` (--internalize): two, with SKILL.md and with that in its place."""
    import art

    tools = [t.schema() for t in skill.tools] or None
    return [
        art.Trajectory(
            messages_and_choices=[
                *prompts.messages(skill, skill.task(r["task_id"]), with_skill, without or "stub"),
                *(r.get("messages") or [{"role": "assistant", "content": r["output"]}]),
            ],
            tools=tools if r.get("messages") else None,
            reward=r["reward"] or 0.0,
            metadata={"task_id": r["task_id"], "source": r["source"] or "file"},
        )
        for r in records
        for with_skill in ((True, False) if without else (True,))
    ]


def _logged(model, step: int) -> dict:
    """What ART logged for the SFT checkpoint at `step` (train split; none when the backend logs remotely)."""
    rows = history.rows(Path(model._get_output_dir()) / history.NAME)
    return next((r for r in reversed(rows) if r["step"] == step and "data/step_num_gradient_steps" in r), {})


def _fmt(x) -> str:
    return "  —  " if x is None else f"{x:.3g}"


async def _epochs(
    model, skill: Skill, records: list[dict], state: dict, seed: int, stop: asyncio.Event, without: str | None = None
) -> int:
    """Run the epochs `state` has not done yet, one `train_sft` call (one checkpoint) each; return how many ran."""
    import art

    examples, ran = _trajectories(skill, records, without), 0
    config = art.TrainSFTConfig(learning_rate=state["learning_rate"], batch_size=state["batch_size"])
    while state["epochs_done"] < state["epochs"] and not stop.is_set():
        epoch, start, before = state["epochs_done"] + 1, time.perf_counter(), await model.get_step()
        order = random.Random(seed + epoch).sample(examples, len(examples))
        try:
            await model.train_sft(order, config)
        except NotImplementedError as e:
            raise Exit(2, f"--sft: this backend cannot fine-tune in ART 0.5.23: {e}")
        step = await model.get_step()
        if step == before:
            raise Exit(
                1,
                f"sft epoch {epoch}: the backend trained nothing (no trainable tokens? examples longer than "
                "the model's context are dropped); the run is unchanged",
            )
        model.merge_state({STATE_KEY: {"epochs_done": epoch, "step": step}})
        state.update(epochs_done=epoch, step=step)
        ran += 1
        m = _logged(model, step)
        print(
            f"sft  {epoch}/{state['epochs']} | step {step} | examples {len(order)} | batches "
            f"{_fmt(m.get('data/step_num_gradient_steps'))} | loss {_fmt(m.get('loss/train'))} | learning rate "
            f"{_fmt(m.get('loss/learning_rate'))} | {time.perf_counter() - start:.2f} s",
            flush=True,
        )
    return ran


async def _begin(
    args, plan: Plan, model, scorer, tasks: list[Task], path: Path, turn_tokens=None
) -> tuple[list[dict], dict, int]:
    """Collect and score the examples, write them to `path`, and record the warm start in the run's state."""
    step = await model.get_step()
    if step > 0:
        raise Exit(
            2,
            f"--sft: run {args.run_name} already has {step} training step(s); a warm start goes before "
            "the first RL step: pass another --run-name",
        )
    records, failures = await collect(args, plan, scorer, tasks, turn_tokens)
    if not records:
        raise Exit(1, "warm start: no example to fine-tune on; nothing was trained (see the counts above)")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_write(path, "".join(json.dumps(r) + "\n" for r in records))
    except OSError as e:
        raise Exit(1, f"warm start: cannot write {path}: {e.strerror or e}; nothing was trained") from None
    print(f"warm start: examples and scores in {path} (reuse them: --sft-from {path})")
    state = {
        "start_step": step,
        "step": step,
        "epochs": args.sft_epochs,
        "epochs_done": 0,
        "examples": len(records),
        "sources": plan.sources,
        "learning_rate": args.sft_learning_rate,
        "batch_size": args.sft_batch_size,
        "min_reward": args.teacher_min_reward,
    }
    model.merge_state({STATE_KEY: state})
    return records, state, failures


def _resumed(path: Path, skill: Skill, state: dict) -> list[dict]:
    """The examples of a warm start that stopped between epochs, as it wrote them."""
    problems: list[str] = []
    records = [ex.model_dump() for ex in read_examples(path, skill, problems)]
    if problems or not records:
        raise Exit(2, f"cannot resume the warm start: {problems[0] if problems else f'{path} is empty'}")
    print(f"warm start: resuming at epoch {state['epochs_done'] + 1} of {state['epochs']} ({path})")
    return records


async def run(
    args, plan: Plan | None, model, scorer, tasks: list[Task], stop: asyncio.Event, turn_tokens=None
) -> Outcome:
    """The warm start of this run: done now, resumed, or recorded earlier (its steps offset RL's); `turn_tokens`
    (training/backends.py): a scripted episode's longest turn in the policy's tokens."""
    state = (model.read_state() or {}).get(STATE_KEY)
    step = await model.get_step()
    if state and state["step"] < step and state["epochs_done"] < state["epochs"]:
        # stopped after train_sft saved, before the record
        state.update(epochs_done=state["epochs_done"] + 1, step=step)
    done = bool(state) and state["epochs_done"] >= state["epochs"]
    if state is None and plan is None:
        return Outcome()
    if done or plan is None:
        if not done:
            raise Exit(
                2,
                f"this run's warm start stopped after epoch {state['epochs_done']} of {state['epochs']}: "
                "run the same command with --sft to finish it, or start another --run-name",
            )
        if plan:
            print(
                f"warm start: done earlier in this run ({state['examples']} examples, {state['epochs']} epoch(s)); not again"
            )
        return Outcome(steps=state["step"] - state["start_step"])
    path, failures = Path(model._get_output_dir()) / EXAMPLES_FILE, 0
    # a run begun with --no-sft, or before the default
    if state is None and plan.by_default and step > 0:
        return Outcome()
    if state is None:
        records, state, failures = await _begin(args, plan, model, scorer, tasks, path, turn_tokens)
    else:
        records = _resumed(path, scorer.skill, state)
    without = args.without_skill if args.internalize else None
    ran = await _epochs(model, scorer.skill, records, state, args.seed, stop, without)
    return Outcome(steps=state["step"] - state["start_step"], trained=ran > 0, failures=failures)
