"""`--eval`: compare OpenAI-compatible models on a skill's held-out tasks with the training scorer.

RULER's scores are relative within a group, so a judge score only compares outputs judged
together. For each task, every model's outputs are judged in ONE group (one judge call per judged
dimension per task): the procedure and correctness columns compare models head to head on the same
input. Deterministic checks are absolute and need no such care.

With `--baseline`, each model also answers every task without the SKILL.md: its system prompt is
then only the skill's frontmatter `description` (what an agent knows of a skill before it loads
it; `--without-skill stub|none`: one line naming the skill, or no system message). Those outputs join
the same judge groups, so the difference between a model's two rows is what the SKILL.md body buys
that model. Each row also says the prompt tokens per request (as the server counted them, else
estimated: marked ~), and each model with a baseline row what leaving SKILL.md out saves: with a model
trained by `--internalize`, base and trained models with --baseline are its three arms (and the base
model without the skill) side by side.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from skill_rl import prompts
from skill_rl.console import clean
from skill_rl.endpoints import Endpoint, client, generate, parse_spec, spec_of, with_baselines
from skill_rl.errors import Exit
from skill_rl.files import atomic_write, read_records
from skill_rl.keys import redact
from skill_rl.progress import bar, phase
from skill_rl.records import Sink, digest, prepare_folder, refuse_foreign, skill_files
from skill_rl.scoring.report import (
    bar_chart,
    markdown_table,
    print_table,
    saving,
    saving_lines,
    summarize,
    uplift,
    uplift_lines,
)
from skill_rl.scoring.reward import Judge, Scorer
from skill_rl.skills import Skill, Task
from skill_rl.tools.episodes import Episodes
from skill_rl.training import turns
from skill_rl.training.runlock import interrupted_as

# characters of an output kept in records (it is scored whole); --max-tokens keeps most far shorter
MAX_KEPT_OUTPUT = 100_000
# characters of a tool call's arguments and of its result kept in records
MAX_KEPT_CALL = 4_000


# ------------------------------------------------------------------ the run


def complete(done: list[dict], samples: int) -> dict[str, dict[str, list[dict]]]:
    """task id -> model label -> its records, for the models with every sample of that task scored in `done`
    (the last record of a (task, model, sample) wins); errors and cut-short records do not count."""
    last: dict[tuple, dict] = {}
    for r in done:
        if "error" not in r:
            last[r["task_id"], r["model"], r["sample"]] = r
    out: dict[str, dict[str, list[dict]]] = {}
    for (task_id, label, _), r in sorted(last.items(), key=lambda kv: kv[0][2]):
        out.setdefault(task_id, {}).setdefault(label, []).append(r)
    for labels in out.values():
        for label in [
            k
            for k, recs in labels.items()
            if [r["sample"] for r in recs] != list(range(samples)) or any(r.get("output_cut") for r in recs)
        ]:
            del labels[label]
    return out


async def evaluate(
    skill: Skill,
    endpoints: list[Endpoint],
    tasks: list[Task],
    judge: Judge | None,
    *,
    samples: int = 1,
    temperature: float = 0.0,
    max_tokens: int = 1024,
    concurrency: int = 8,
    timeout: float = 120.0,
    done: list[dict] = (),
    sink=None,
    ident: dict | None = None,
    quiet: bool = False,
    answers: dict | None = None,
    max_turns: int = 6,
) -> dict:
    """Generate with every endpoint and judge each task's outputs from all models as one group.

    `done` holds the records of an earlier, interrupted run of this same command (see run): a model
    with every sample of a task there is not asked again; the others (a model added since, one whose
    endpoint failed) are, and that task's group is scored again with every model's outputs, old and
    new, so that the judged columns still compare the models within one group. Each finished task's
    records (outputs, scores, or the error of a model that failed) go to `sink` at once. `answers`: the outputs
    already generated, (task id, label) -> (outputs, prompt tokens) (a CPU run decoded in this process:
    skill_rl/commands/cpu_evaluation.py), in place of asking the endpoints. A skill with tools: each sample is an
    episode (`episodes`) of at most `max_turns` policy calls, scored with its calls and workspace."""
    scorer = Scorer(skill, judge)
    # a skill with tools: every sample an episode in its own workspace, open until its task is scored
    store = Episodes() if skill.tools else None
    clients = {} if answers is not None else {ep.label: client(ep, timeout) for ep in endpoints}
    gates = {ep.label: asyncio.Semaphore(concurrency) for ep in endpoints}
    kept = complete(list(done), samples)
    by_task = {
        t: [r for recs in labels.values() for r in recs]
        for t, labels in kept.items()
        if all(ep.label in labels for ep in endpoints)
    }
    judge_failures = 0

    async def one(task: Task):
        nonlocal judge_failures
        # an episode's workspace is gone once scored: a tool skill's task is run again whole
        have = kept.get(task.id, {}) if store is None else {}
        todo = [ep for ep in endpoints if ep.label not in have]
        counted = {ep.label: [] for ep in todo}

        def asked(ep: Endpoint):
            if answers is not None:
                return _given(answers, task, ep, counted[ep.label])
            common = (clients[ep.label], ep, skill, task, samples, temperature, max_tokens, gates[ep.label])
            if store is not None:
                return episodes(*common, max_turns, store)
            return generate(*common, counted[ep.label])

        fresh = await asyncio.gather(*(asked(ep) for ep in todo), return_exceptions=True)
        outs = {
            **{ep.label: out for ep, out in zip(todo, fresh)},
            **{
                label: [(r["output"], "length" if r["truncated"] else "stop") for r in recs]
                for label, recs in have.items()
            },
        }
        tokens = {
            **{label: n[0] for label, n in counted.items() if n},
            **{
                label: recs[0]["prompt_tokens"] * (-1 if recs[0].get("prompt_estimated") else 1)
                for label, recs in have.items()
                if recs[0].get("prompt_tokens") is not None
            },
        }
        new, failed = await _score_task(scorer, task, endpoints, outs, ident or {}, tokens, store)
        judge_failures += failed
        by_task[task.id] = new
        if sink:
            sink(new)
        advance()

    todo = [t for t in tasks if t.id not in by_task]
    try:
        with bar("evaluating", len(todo), quiet) as advance:
            await asyncio.gather(*(one(t) for t in todo))
    finally:
        # the workspaces of tasks that failed or were interrupted
        if store is not None:
            store.close_all()
    for c in clients.values():
        await c.close()
    return {
        **tabulate([r for recs in by_task.values() for r in recs], endpoints, scorer, judge_failures),
        "judge_usage": scorer.usage,
        "judge_cache": scorer.cache_tally,
    }


async def _given(answers: dict, task: Task, ep: Endpoint, counted: list) -> list[tuple[str, str]]:
    outs, tokens = answers[task.id, ep.label]
    counted.append(tokens)
    return outs


async def episodes(
    client, ep: Endpoint, skill: Skill, task: Task, samples: int, temperature, max_tokens, gate, max_turns, store
) -> list[tuple[str, str | None, dict]]:
    """`samples` episodes of one endpoint on one task, each in a fresh copy of the task's workspace kept open in
    `store` (skill_rl/tools Episodes): (final answer, finish_reason, what the record keeps of the episode)."""
    tools = [t.schema() for t in skill.tools]
    messages = prompts.messages(skill, task, ep.with_skill, ep.without)
    ask = turns.asker(client, ep.model, temperature=temperature, max_tokens=max_tokens, timeout=float(client.timeout))
    outs = []
    for _ in range(samples):
        key, toolbox = store.open(skill, task)
        try:
            async with gate:
                history = await turns.take_turns(ask, messages, tools, toolbox.run, max_turns)
        except BaseException:
            store.close(key)
            raise
        store.keep(key, history.calls)
        last = history.last
        episode = {
            "episode": key,
            "turns": history.turns,
            "ran_out": history.ran_out,
            "tool_errors": sum(c.error is not None for c in history.calls),
            "calls": [
                {
                    "name": c.name,
                    "arguments": c.arguments[:MAX_KEPT_CALL],
                    "result": c.result[:MAX_KEPT_CALL],
                    "error": c.error,
                }
                for c in history.calls
            ],
        }
        outs.append((redact(last.message.content or ""), last.finish_reason, episode))
    return outs


async def _score_task(
    scorer: Scorer,
    task: Task,
    endpoints: list[Endpoint],
    outs: dict,
    ident: dict,
    tokens: dict | None = None,
    store: Episodes | None = None,
) -> tuple[list[dict], bool]:
    """One task's records: every model's outputs judged as one group, or the error of a model that failed.
    `tokens`: label -> the prompt's tokens (negative: estimated), as `generate` gives them. `store`: the episodes
    of a skill with tools (each output's third item names its own), closed once scored."""
    tokens = tokens or {}
    group, owners, new = [], [], []
    for ep in endpoints:
        out, mine = outs[ep.label], {**ident, "spec": spec_of(ep), "task_id": task.id, "model": ep.label}
        if isinstance(out, Exception):
            new.append({**mine, "error": f"{type(out).__name__}: {redact(str(out))[:300]}"})
            continue
        group += [text for text, *_ in out]
        if ep.label in tokens:
            mine = {**mine, "prompt_tokens": abs(tokens[ep.label]), "prompt_estimated": tokens[ep.label] < 0}
        owners += [(mine, i, finish, *extra) for i, (_, finish, *extra) in enumerate(out)]
    # each output's episode (a skill with tools), by the id its record carries
    ids = [owner[3]["episode"] if len(owner) > 3 else None for owner in owners]
    try:
        result = await scorer.score(task, group, store.of(ids) if store else None) if group else None
    finally:
        if store is not None:
            store.close(*ids)
    for (mine, i, finish, *extra), text, s in zip(owners, group, result.scores if result else []):
        new.append(
            {
                **mine,
                **({k: v for k, v in extra[0].items() if k != "episode"} if extra else {}),
                "sample": i,
                "output": text[:MAX_KEPT_OUTPUT],
                "output_cut": len(text) > MAX_KEPT_OUTPUT,
                "truncated": finish == "length",
                "format": s.format,
                "procedure": s.procedure,
                "correctness": s.correctness,
                "reward": s.reward,
                "checks": dict(s.checks),
                "check_errors": dict(s.check_errors),
                "judge": s.judge,
                "judged": s.judged,
                "metrics": s.metrics(),
            }
        )
    return new, bool(result and result.judge_failed)


def tabulate(records: list[dict], endpoints: list[Endpoint], scorer: Scorer, judge_failures: int) -> dict:
    records = sorted(records, key=lambda r: (r["task_id"], r["model"], r.get("sample", -1)))
    scored = [r for r in records if "error" not in r]
    errors = {
        ep.label: [f"{r['task_id']}: {r['error']}" for r in records if r["model"] == ep.label and "error" in r]
        for ep in endpoints
    }
    rows = []
    for ep in endpoints:
        mine = [r for r in scored if r["model"] == ep.label]
        row = summarize(ep.label, [r["metrics"] for r in mine], scorer, len(errors[ep.label]))
        row["truncated"] = sum(r["truncated"] for r in mine)
        # a skill with tools: policy calls per episode, and calls answered with an error
        if any("turns" in r for r in mine):
            row["turns"] = sum(r["turns"] for r in mine) / len(mine)
            row["tool_errors"] = sum(r["tool_errors"] for r in mine)
        row["baseline"] = not ep.with_skill
        counted = [r for r in mine if r.get("prompt_tokens") is not None]
        row["prompt_tokens"] = sum(r["prompt_tokens"] for r in counted) / len(counted) if counted else None
        row["prompt_estimated"] = any(r.get("prompt_estimated") for r in counted)
        rows.append(row)
    check_errors: dict[str, int] = {}
    for r in scored:
        for name in r.get("check_errors", {}):
            check_errors[name] = check_errors.get(name, 0) + 1
    without = next((ep.without for ep in endpoints if not ep.with_skill), None)
    return {
        "rows": rows,
        "uplift": uplift(rows),
        "saving": saving(rows),
        "without": without,
        "records": scored,
        "errors": errors,
        "judge_failures": judge_failures,
        "check_errors": check_errors,
        "judged_dimensions": scorer.judged_dimensions,
    }


def write_results(skill: Skill, result: dict, out: Path, judge: Judge | None, split: str) -> None:
    """results.md, results.json and chart.png, each written whole or not at all."""
    mode = f"judge `{judge.model}`" if judge else "offline (`--judge none`): judged columns are empty"
    title = f"{skill.name} on {split} tasks"
    md = [
        f"## {title}",
        "",
        markdown_table(result["rows"]),
        "",
        f"Scored with {mode}; procedure and correctness from the judge compare the models on the same "
        "tasks (one judge group per task). `overall` is the weighted reward; the interval is a 95 % bootstrap "
        "over outputs.",
        "",
    ]
    md += [f"- {line}" for line in uplift_lines(result) + saving_lines(result)] + ([""] if result["uplift"] else [])
    if judge:
        md += [f"Judge use in this invocation: {result['judge_usage'].describe(judge.model)}.", ""]
        md += [f"{result['judge_cache'].describe()}.", ""] if result.get("judge_cache") else []
    atomic_write(out / "results.md", "\n".join(md))
    records = [{k: v for k, v in r.items() if k != "metrics"} for r in result["records"]]
    payload = {
        "skill": skill.name,
        "split": split,
        "judge": judge.public() if judge else None,
        "judged_dimensions": list(result["judged_dimensions"]),
        "models": result["rows"],
        "uplift": result["uplift"],
        "prompt_saving": result.get("saving", {}),
        "judge_usage": result["judge_usage"].as_dict() if judge else None,
        "judge_cache": result["judge_cache"].as_dict() if result.get("judge_cache") else None,
        "errors": result["errors"],
        "judge_failures": result["judge_failures"],
        "check_errors": result["check_errors"],
        "records": records,
    }
    atomic_write(out / "results.json", json.dumps(payload, indent=1))
    bar_chart(result["rows"], out / "chart.png", title)


def _endpoints(args) -> list[Endpoint]:
    if not args.model:
        raise Exit(2, "--eval needs at least one --model SPEC (an id at --base-url, or label=ID@URL)")
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL")
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY")
    try:
        endpoints = [parse_spec(s, base_url, api_key) for s in args.model]
    except ValueError as e:
        raise Exit(2, str(e)) from None
    endpoints = with_baselines(endpoints, args.without_skill or "description") if args.baseline else endpoints
    if len({e.label for e in endpoints}) != len(endpoints):
        raise Exit(2, "two --model specs share a label; name them label=ID@URL")
    return endpoints


def _tasks(skill: Skill, args) -> list[Task]:
    tasks = list(skill.tasks) if args.split == "all" else skill.split(args.split)
    tasks = tasks[: args.limit] if args.limit else tasks
    tasks, note = skill.fitting(tasks, args.context_tokens, args.max_tokens)
    if note:
        print(note, file=sys.stderr)
    if not tasks:
        raise Exit(2, f"{skill.tasks_path} has no {args.split} tasks")
    return tasks


def _report(skill: Skill, result: dict, title: str, judge: Judge | None) -> int:
    """The table on stdout, what failed on stderr; the exit status."""
    print_table(skill, result["rows"], title)
    for row in result["rows"]:
        errs = result["errors"][row["model"]]
        for err in errs[:3]:
            print(clean(f"{row['model']}: {err}"), file=sys.stderr)
        if len(errs) > 3:
            print(clean(f"{row['model']}: ... {len(errs) - 3} more failures"), file=sys.stderr)
        if row["truncated"]:
            print(
                clean(f"{row['model']}: {row['truncated']} output(s) cut by --max-tokens (finish_reason length)"),
                file=sys.stderr,
            )
    for line in uplift_lines(result) + saving_lines(result):
        print(clean(line))
    if judge:
        print(result["judge_usage"].describe(judge.model))
    if result.get("judge_cache"):
        print(result["judge_cache"].describe())
    if result["judge_failures"]:
        print(f"{result['judge_failures']} task group(s) scored by checks only: the judge failed", file=sys.stderr)
    if result["check_errors"]:
        print(
            f"{sum(result['check_errors'].values())} check error(s), scored as failing: "
            + ", ".join(f"{k} on {v} output(s)" for k, v in result["check_errors"].items()),
            file=sys.stderr,
        )
    return 1 if any(result["errors"].values()) or result["judge_failures"] or result["check_errors"] else 0


def _in_process(skill: Skill, args, picked: tuple[Path, str], tasks: list[Task], done: list[dict]) -> dict:
    """--eval --backend cpu: the run's checkpoint (`picked`: its folder, and why it is the one) and base model as
    arms, every answer not in `done` decoded here."""
    from skill_rl.commands import cpu_evaluation as evaluation

    checkpoint, why = picked
    endpoints, adapter = evaluation.arms(checkpoint, args.base_model, args.baseline, args.without_skill)
    kept = complete(done, args.samples)
    todo = {ep.label: [t for t in tasks if ep.label not in kept.get(t.id, {})] for ep in endpoints}
    temperature = 0.0 if args.temperature is None else args.temperature
    print(
        f"evaluating {checkpoint} ({why}) against its base model in this process: {len(endpoints)} arms x "
        f"{len(tasks)} tasks, at most {args.max_tokens} tokens at temperature {temperature:g}",
        file=sys.stderr,
    )
    policy = evaluation.load(checkpoint, args.base_model)
    answers = {}
    with phase("decoding", sum(map(len, todo.values())), "answers", args.quiet) as advance:
        for ep in endpoints:
            answers.update(
                evaluation.decode_all(
                    policy, skill, todo[ep.label], [ep], adapter, args.samples, temperature, args.max_tokens, advance
                )
            )
    return answers


def _arms(args, picked: tuple[Path, str] | None) -> list[Endpoint]:
    """--eval --backend cpu: the CPU run's arms (config.cpu_eval_run picked its checkpoint); else the --model endpoints."""
    if picked is None:
        return _endpoints(args)
    from skill_rl.commands import cpu_evaluation as evaluation

    return evaluation.arms(picked[0], args.base_model, args.baseline, args.without_skill)[0]


def run(setup, skill: Skill) -> int:
    """--eval with the resolved run (config.Run): its settings, judge and, for --backend cpu, checkpoint."""
    args, judge, picked = setup.settings, setup.judge, setup.checkpoint
    if picked and skill.tools:
        raise Exit(
            2,
            f"{skill.path / 'SKILL.md'}: --eval --backend cpu of a skill with tools is not supported yet: serve the "
            "checkpoint (python -m skill_rl.cpu) and --eval it at its URL",
        )
    endpoints, tasks = _arms(args, picked), _tasks(skill, args)
    out = args.out or Path("results") / skill.name
    prepare_folder(out, skill_files(skill))
    log = out / "records.jsonl"
    ident = {"skill": skill.name, "tasks": digest(skill.tasks_path), "samples": args.samples}
    done = read_records(log) if args.resume else []
    refuse_foreign(done, ident, log, {ep.label: spec_of(ep) for ep in endpoints})
    whole = {
        t: labels for t, labels in complete(done, args.samples).items() if all(ep.label in labels for ep in endpoints)
    }
    if args.resume:
        print(f"resuming: {len(whole)} task(s) already done in {log}", file=sys.stderr)
    # only tasks every model finished stay on disk; the others are redone, judged as one group again
    try:
        atomic_write(
            log, "".join(json.dumps(r) + "\n" for labels in whole.values() for recs in labels.values() for r in recs)
        )
        f = open(log, "a")
    except OSError as e:
        raise Exit(2, f"cannot write --out {out}: {e.strerror or e}") from None
    temperature = 0.0 if args.temperature is None else args.temperature
    with (
        f,
        interrupted_as(f"interrupted: every finished task is in {log}; the same command with --resume does the rest"),
    ):
        answers = _in_process(skill, args, picked, tasks, done) if picked else None
        sink = Sink(f, f"--out {log}")
        result = asyncio.run(
            evaluate(
                skill,
                endpoints,
                tasks,
                judge,
                samples=args.samples,
                temperature=temperature,
                max_tokens=args.max_tokens,
                concurrency=args.concurrency,
                done=done,
                sink=lambda recs: sink.write("".join(json.dumps(r) + "\n" for r in recs)),
                timeout=args.request_timeout,
                ident=ident,
                quiet=args.quiet,
                answers=answers,
                max_turns=args.max_turns,
            )
        )
    try:
        write_results(skill, result, out, judge, args.split)
    except OSError as e:
        raise Exit(1, f"cannot write --out {out}: {e.strerror or e}; records.jsonl holds every record") from None
    mode = f"judge {judge.model}" if judge else "offline: checks only"
    code = _report(
        skill, result, f"{skill.name}: {len(tasks)} {args.split} tasks x {args.samples} sample(s) ({mode})", judge
    )
    print(f"wrote {out}/results.md, results.json, chart.png, records.jsonl")
    return code
