"""`--score FILE`: score given outputs with the same scorer training uses.

FILE is JSONL. Each line: `task_id` (an id from the skill's tasks.jsonl) or `input` (raw input
text), plus `output` (one string) or `outputs` (a list, judged together as one group), and for a skill with
tools `episodes`, one per output: its calls and the folder of its workspace (docs/tools.md#runs). One JSON
object per output is written as soon as its group is scored; bad lines are reported with their
line number and the other lines are still scored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from skill_rl.errors import Exit
from skill_rl.files import atomic_write, read_objects, read_records
from skill_rl.keys import redact
from skill_rl.progress import bar
from skill_rl.records import Sink, digest, prepare_file, refuse_foreign, skill_files
from skill_rl.scoring import repeats
from skill_rl.scoring.reward import Judge, Scorer
from skill_rl.skills import Skill, Task
from skill_rl.text import display, problem, show
from skill_rl.training.runlock import interrupted_as


class CallItem(BaseModel):
    """One tool call of an episode as a line gives it (docs/tools.md#runs)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    name: str
    # the JSON text of the arguments, as the policy sent it
    arguments: str
    result: str = ""
    error: str | None = None


class EpisodeItem(BaseModel):
    """An output's episode: its calls in order, and the folder holding the workspace as the episode left it
    (relative to the score file's folder; none: a fresh copy of the task's workspace, as before the episode)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    calls: list[CallItem] = []
    workspace: str | None = Field(None, min_length=1)


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    task_id: str | None = Field(None, min_length=1)
    input: str | None = Field(None, min_length=1)
    output: str | None = None
    outputs: list[str] | None = Field(None, min_length=1)
    # one per output, in order: what a skill with tools did before answering
    episodes: list[EpisodeItem] | None = None

    @model_validator(mode="after")
    def _one_of_each(self):
        if (self.task_id is None) == (self.input is None):
            raise ValueError("give exactly one of 'task_id' and 'input'")
        if (self.output is None) == (self.outputs is None):
            raise ValueError("give exactly one of 'output' and 'outputs'")
        if self.episodes is not None and len(self.episodes) != len(self.outputs or [self.output]):
            raise ValueError("'episodes' must hold one episode per output")
        return self


def _workspace_problem(path: Path, n: int, item: Item) -> str | None:
    """A line's first episode workspace that is not a folder, as one error naming the field."""
    for i, episode in enumerate(item.episodes or ()):
        folder = path.parent / episode.workspace if episode.workspace else None
        if folder is not None and (folder.is_symlink() or not folder.is_dir()):
            return problem(path, n, f"field 'episodes.{i}.workspace': {show(episode.workspace)} is not a folder")
    return None


def open_episodes(path: Path, skill: Skill, task: Task, given: list[EpisodeItem] | None) -> tuple[list, list]:
    """Each output's Episode for its checks, its workspace a fresh copy of the folder the line names (or of the
    task's own workspace): (episodes or None, the workspaces to close)."""
    if given is None:
        return None, []
    from skill_rl.tools import Episode, Workspace
    from skill_rl.tools.episodes import records

    workspaces = []
    try:
        for e in given:
            workspaces.append(Workspace.fresh(path.parent / e.workspace if e.workspace else skill.workspace_of(task)))
    except BaseException:
        for w in workspaces:
            w.close()
        raise
    # a tool result the file holds may quote a key: masked before a check or the judge reads it
    episodes = []
    for e, w in zip(given, workspaces):
        calls = [
            c.model_copy(update={"result": redact(c.result), "error": c.error and redact(c.error)}) for c in e.calls
        ]
        episodes.append(Episode(calls=records(calls), workspace=w.path))
    return episodes, workspaces


def read_items(path: Path, skill: Skill, errors: list[str]) -> list[tuple[int, Task, list[str], str | None, list]]:
    """(line, task, outputs, task_id, episodes or None) for every valid line (read as tasks.jsonl is, by skill_rl/files.py's strict
    JSONL reader: a key given twice is an error, not "the last one wins"); one message per bad line in `errors`."""
    items = []
    for n, obj in read_objects(path, errors):
        try:
            item = Item.model_validate(obj)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            where = f"field '{loc}': " if loc else ""
            errors.append(problem(path, n, f"{where}{err['msg'].removeprefix('Value error, ')}"))
            continue
        if bad := _workspace_problem(path, n, item):
            errors.append(bad)
            continue
        if item.task_id is not None:
            task = skill.task(item.task_id)
            if task is None:
                errors.append(
                    problem(path, n, f"field 'task_id' {show(item.task_id)} is not in {display(skill.tasks_path)}")
                )
                continue
        else:
            task = Task(id=f"line-{n}", input=item.input, line=n)
        outputs = item.outputs if item.outputs is not None else [item.output]
        items.append((n, task, outputs, item.task_id, item.episodes))
    return items


def record(line: int, index: int, task_id: str | None, score, ident: dict) -> dict:
    return {
        **ident,
        "line": line,
        "index": index,
        "task_id": task_id,
        "format": score.format,
        "procedure": score.procedure,
        "correctness": score.correctness,
        "reward": round(score.reward, 6),
        "repeated": round(score.repeated, 6),
        "cut": round(score.cut, 6),
        "checks": dict(score.checks),
        "check_errors": dict(score.check_errors),
        "judge": score.judge,
        "judged": score.judged,
    }


def finished(out_path: Path, items) -> set[int]:
    """Input lines whose every output already has a record in `out_path`. The file is rewritten (atomically)
    without partial groups and without a torn last line, so appending to it keeps it valid JSONL."""
    sizes = {line: len(outputs) for line, _, outputs, *_ in items}
    records = read_records(out_path)
    by_line: dict[int, set] = {}
    for r in records:
        by_line.setdefault(r.get("line"), set()).add(r.get("index"))
    done = {line for line, idx in by_line.items() if line in sizes and len(idx) == sizes[line]}
    atomic_write(out_path, "".join(json.dumps(r) + "\n" for r in records if r.get("line") in done))
    return done


async def score_file(
    skill: Skill,
    path: Path,
    judge: Judge | None,
    out: Sink,
    concurrency: int = 8,
    skip: set[int] = frozenset(),
    quiet: bool = False,
) -> dict:
    """Score every line of `path` not in `skip`, writing each group's records to `out` as soon as it is scored."""
    errors: list[str] = []
    every = read_items(path, skill, errors)
    items = [item for item in every if item[0] not in skip]
    # what --resume checks the records against
    ident = {"skill": skill.name, "source": digest(path)}
    scorer = Scorer(skill, judge)
    gate = asyncio.Semaphore(concurrency)
    summary = {
        "lines": len(items) + len(errors),
        "bad_lines": len(errors),
        "outputs": 0,
        "judge_failures": 0,
        "judge_skipped": 0,
        "judge_duplicates": 0,
        "usage": scorer.usage,
        "records": [],
        "errors": errors,
        "judged_dimensions": scorer.judged_dimensions,
    }

    # the file is one step: what repeats across different tasks, their own words masked, is paid for nowhere (repeats.py)
    # resumed too
    flat = [(line, i, task.input, o) for line, task, outputs, *_ in every for i, o in enumerate(outputs)]
    repeated = {
        (line, i): r for (line, i, _, _), r in zip(flat, repeats.shares([(t, o) for _, _, t, o in flat], skill))
    }

    async def one(line: int, task: Task, outputs: list[str], task_id: str | None, given: list | None):
        async with gate:
            episodes, workspaces = open_episodes(path, skill, task, given)
            try:
                result = await scorer.score(task, outputs, episodes)
            finally:
                for w in workspaces:
                    w.close()
        result.scores = [repeats.penalised(s, repeated[line, i]) for i, s in enumerate(result.scores)]
        summary["judge_failures"] += result.judge_failed
        summary["judge_skipped"] += result.judge_skipped
        summary["judge_duplicates"] += result.judge_duplicates
        if result.judge_error:
            errors.append(f"{path}:{line}: judge failed, scored by checks only: {result.judge_error}")
        recs = [record(line, i, task_id, s, ident) for i, s in enumerate(result.scores)]
        # one write per group: no group is half on disk
        out.write("".join(json.dumps(r) + "\n" for r in recs))
        summary["records"] += recs
        summary["outputs"] += len(outputs)
        advance()

    with bar(f"scoring {path.name}", len(items), quiet) as advance:
        await asyncio.gather(*(one(*item) for item in items))
    summary["check_errors"] = sum(scorer.check_errors.values())
    summary["judge_cache"] = scorer.cache_line()
    # checked here, while a check's stray print still goes to stderr (run), never into the JSONL on stdout
    summary["cannot_tell"] = None if judge else cannot_tell(skill, list({id(t): t for _, t, *_ in every}.values()))
    return summary


def print_summary(skill: Skill, summary: dict, judge: Judge | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from skill_rl.console import clean, literal

    for e in summary["errors"]:
        # one line each, never wrapped
        print(clean(e), file=sys.stderr)
    console = Console(stderr=True)
    recs = summary["records"]
    mode = f"judge {judge.model}" if judge else "offline: checks only, judged dimensions are None (--judge none)"
    table = Table(title=literal(f"{skill.name}: {summary['outputs']} outputs scored ({mode})"))
    for col in ("", "format", "procedure", "correctness", "reward"):
        table.add_column(col, justify="right")

    def mean(key):
        vals = [r[key] for r in recs if r[key] is not None]
        return f"{sum(vals) / len(vals):.3f}" if vals else "—"

    table.add_row("mean", mean("format"), mean("procedure"), mean("correctness"), mean("reward"))
    console.print(table)
    if judge:
        # one line, never wrapped
        print(summary["usage"].describe(judge.model), file=sys.stderr)
    if summary.get("judge_cache"):
        print(summary["judge_cache"], file=sys.stderr)
    if summary["bad_lines"] or summary["judge_failures"] or summary["check_errors"]:
        console.print(
            f"{summary['bad_lines']} bad line(s), {summary['judge_failures']} judge failure(s), "
            f"{summary['check_errors']} check error(s)"
        )
    if summary.get("cannot_tell"):
        # one line, never wrapped
        print(summary["cannot_tell"], file=sys.stderr)
    if summary["judge_skipped"] or summary["judge_duplicates"]:
        console.print(
            f"not sent to the judge: {summary['judge_skipped']} group(s) of identical outputs, "
            f"{summary['judge_duplicates']} duplicate output(s) that shared a judgement"
        )


def cannot_tell(skill: Skill, tasks: list[Task]) -> str | None:
    """One line when, with no judge, the checks on these tasks cannot tell a right answer from a wrong one: they
    cover under half of correctness (no `expect`: a commit's type and breaking flag, a review's verdict are
    unknown, and the estimates only cut). None when they can."""
    from skill_rl.scoring.rubric import MIN_CORRECTNESS_COVER, checks_cover

    if not tasks or skill.weights["correctness"] == 0:
        return None
    cover = checks_cover(skill, tasks)["correctness"]
    if cover >= MIN_CORRECTNESS_COVER:
        return None
    return (
        f"note: the reward cannot tell whether these answers are right: with no judge, the checks cover "
        f"{cover:.0%} of correctness on these {len(tasks)} task(s) (no `expect`, or nothing checks it), so the "
        "rewards above say mostly whether the form is kept; score with a judge, or add `expect` to the tasks"
    )


def run(setup, skill: Skill) -> int:
    """--score FILE with the resolved run (config.Run): its --out, --resume and --quiet, and its judge."""
    s = setup.settings
    return score_outputs(skill, s.score, setup.judge, s.out, resume=s.resume, quiet=s.quiet)


def score_outputs(
    skill: Skill, path: Path, judge: Judge | None, out_path: Path | None, resume: bool = False, quiet: bool = False
) -> int:
    if not path.is_file():
        raise Exit(
            2, f"--score {path}: {'is a folder' if path.is_dir() else 'no such file'}; pass a JSONL file of outputs"
        )
    if resume and out_path is None:
        raise Exit(2, "--resume needs --out FILE (the records written so far)")
    if out_path is not None:
        prepare_file(out_path, {path: "the input", **skill_files(skill)})
    skip: set[int] = set()
    if resume and out_path.exists():
        refuse_foreign(read_records(out_path), {"skill": skill.name, "source": digest(path)}, out_path)
        try:
            skip = finished(out_path, read_items(path, skill, []))
        # a full disk: the file is as it was
        except OSError as e:
            raise Exit(1, f"cannot rewrite --out {out_path} to resume: {e.strerror or e}; it is unchanged") from None
        print(f"resuming: {len(skip)} line(s) of {path} already scored in {out_path}", file=sys.stderr)
    stdout = sys.stdout
    out = open(out_path, "a" if resume else "w") if out_path else stdout
    # while scoring, a stray print (a check's, a library's) never lands in the JSONL
    sys.stdout = sys.stderr
    where = f"--out {out_path}; the same command with --resume does the rest" if out_path else "the lines printed"
    try:
        with interrupted_as(f"interrupted: every group scored so far is in {where}"):
            summary = asyncio.run(
                score_file(
                    skill, path, judge, Sink(out, f"--out {out_path}" if out_path else "stdout"), skip=skip, quiet=quiet
                )
            )
    finally:
        sys.stdout = stdout
        if out_path:
            # what could not be written was reported already
            with contextlib.suppress(OSError):
                out.close()
    print_summary(skill, summary, judge)
    return 1 if summary["bad_lines"] or summary["judge_failures"] or summary["check_errors"] else 0
