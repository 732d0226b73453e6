"""The cost of everything around the GPU: step overhead, judge cost, scorer speed, start-up, input scale.

    python bench/bench.py [--quick] [--judge-only] [--step-only] [--json bench/out/bench.json]

Everything runs on this machine against a local OpenAI-compatible server (tests/openai_server.py)
that answers policy calls after Lp seconds and judge calls after Lj seconds; training uses the CPU
stand-in backend. GPU generation and training throughput are not measured here.

The training step is measured twice in one process, on the same server: train_skill.py's own loop
(its train() coroutine, unchanged; its phases timed by wrapping the functions it calls) and the same
step written directly against ART 0.5.23 ("bare ART": gather, RULER, the same stand-in train,
model.log). The two alternate, fresh runs each, so that the load of a shared machine falls on both;
the table holds medians, and every step's time is printed below it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TQDM_DISABLE", "1")

from openai_server import FakeOpenAI  # noqa: E402

from skill_rl import config  # noqa: E402
from skill_rl.scoring.checks import run_checks, run_checks_group
from skill_rl.scoring.derived import derive, view  # noqa: E402
from skill_rl.scoring.reward import Judge, Scorer, rubric  # noqa: E402
from skill_rl.scoring.rubric import skill_checks  # noqa: E402
from skill_rl.skills import list_skills, load_skill  # noqa: E402


def answers(skill):
    """A policy that answers with the skill's reference outputs, in turn: realistic lengths and variety."""
    refs = [t.reference for t in skill.tasks if t.reference]
    counter = iter(range(10**9))
    return lambda request: refs[next(counter) % len(refs)]


# ------------------------------------------------------------------ step overhead: ours against bare ART


# pydantic TypeAdapters built so far, while `counting_adapters` is on
ADAPTERS = [0]


@contextlib.contextmanager
def counting_adapters():
    """Count pydantic schema building: ART 0.5.23's Trajectory.messages() builds a TypeAdapter on each call."""
    import pydantic

    init = pydantic.TypeAdapter.__init__

    def counted(self, *a, **k):
        ADAPTERS[0] += 1
        init(self, *a, **k)

    pydantic.TypeAdapter.__init__ = counted
    try:
        yield
    finally:
        pydantic.TypeAdapter.__init__ = init


STEP_LINE = re.compile(r"^step +\d+ \|.*\| ([\d.]+) s(?: \|.*)?$", re.M)


@contextlib.contextmanager
def phase_timers(buckets: list[dict], plots: list[float]):
    """Time the phases of train_skill.py's loop, unchanged, by wrapping the functions it calls. Each gather opens
    a bucket ("train" or "val"); what runs until the next gather (train, monitor, log, waiting for the plot) is added
    to it. The plot's own drawing time goes to `plots`."""
    from unittest import mock

    import art

    import skill_rl.scoring.reward
    import skill_rl.training.plots
    import skill_rl.training.rollout
    import skill_rl.training.steps
    from skill_rl.training.dryrun import DryRunBackend
    from skill_rl.training.monitor import Monitor

    # into the bucket open when the call started (the plot is drawn in a thread, later)
    def timed(phase, fn):
        if asyncio.iscoroutinefunction(fn):

            async def wrapper(*a, **k):
                bucket, start = buckets[-1] if buckets else {}, time.perf_counter()
                try:
                    return await fn(*a, **k)
                finally:
                    name = phase(k) if callable(phase) else phase
                    bucket[name] = bucket.get(name, 0.0) + time.perf_counter() - start
        else:

            def wrapper(*a, **k):
                bucket, start = buckets[-1] if buckets else {}, time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    bucket[phase] = bucket.get(phase, 0.0) + time.perf_counter() - start

        return wrapper

    gather0, rollout0, plot0 = (
        art.gather_trajectory_groups,
        skill_rl.training.rollout.rollout,
        skill_rl.training.plots.reward_plot,
    )

    # in a worker thread, while later buckets open: every drawing in order, in a bucket of its own
    def drawn(*a, **k):
        start = time.perf_counter()
        try:
            return plot0(*a, **k)
        finally:
            plots.append(time.perf_counter() - start)

    async def gather(*a, pbar_desc=None, **k):
        buckets.append({"kind": "val" if str(pbar_desc).startswith("val") else "train", "adapters": -ADAPTERS[0]})
        start = time.perf_counter()
        try:
            return await gather0(*a, pbar_desc=pbar_desc, **k)
        finally:
            end, b = time.perf_counter(), buckets[-1]
            last = b.pop("last_answer", start)
            b.update(gather=end - start, rollouts=last - start, judge_tail=end - last)

    # the same name: the loop tells its rollouts' errors apart by it
    async def rollout(*a, **k):
        traj = await rollout0(*a, **k)
        buckets[-1]["last_answer"] = time.perf_counter()
        return traj

    with contextlib.ExitStack() as stack:
        for target, name, new in [
            (art, "gather_trajectory_groups", gather),
            (skill_rl.training.steps, "rollout", rollout),
            (skill_rl.scoring.reward, "run_checks_group", timed("checks", skill_rl.scoring.reward.run_checks_group)),
            (Monitor, "step", timed("monitor", Monitor.step)),
            (DryRunBackend, "train", timed("train", DryRunBackend.train)),
            (
                art.TrainableModel,
                "log",
                timed(lambda k: "log" if k.get("split") == "train" else "val_log", art.TrainableModel.log),
            ),
            (skill_rl.training.plots, "reward_plot", drawn),
            (skill_rl.training.plots.Plotter, "draw", timed("plot_wait", skill_rl.training.plots.Plotter.draw)),
        ]:
            stack.enter_context(mock.patch.object(target, name, new))
        yield


def ours_run(url: str, skill, groups: int, rollouts: int, steps: int, run_name: str, workdir: Path) -> list[dict]:
    """One fresh run of train_skill.py's loop (its own train() coroutine, in this process): `steps` steps, validating
    (`groups` val tasks) half-way and at the end. One bucket of phase seconds per step and per validation."""
    import train_skill

    args = train_skill.parse_args(
        [
            "--skill",
            skill.name,
            "--backend",
            "skill_rl.training.dryrun:DryRunBackend",
            "--steps",
            str(steps),
            "--groups-per-step",
            str(groups),
            "--rollouts-per-group",
            str(rollouts),
            "--eval-every",
            str(max(1, steps // 2)),
            "--limit",
            str(groups),
            "--judge-base-url",
            url,
            "--judge-api-key",
            "bench",
            "--run-name",
            run_name,
        ]
    )
    # what main() does: every setting once (no warm start with this backend)
    setup = config.resolve(args, skill)
    buckets: list[dict] = []
    plots: list[float] = []
    out, cwd = io.StringIO(), os.getcwd()
    os.chdir(workdir)
    try:
        with contextlib.redirect_stdout(out), phase_timers(buckets, plots):
            asyncio.run(train_skill.train(setup, skill))
    finally:
        os.chdir(cwd)
    for b, seconds in zip(
        [b for b in buckets if b["kind"] == "train"], map(float, STEP_LINE.findall(out.getvalue())), strict=True
    ):
        # as the loop prints it: gather to log
        b["step"] = seconds
    for b, after in zip(buckets, [*buckets[1:], {"adapters": -ADAPTERS[0]}]):
        # built from this bucket's gather to the next one's
        b["adapters"] -= after["adapters"]
    for b, seconds in zip([b for b in buckets if b["kind"] == "val"], plots, strict=True):
        b["plot"] = seconds
    return buckets


async def _bare_run(
    url: str, skill, groups: int, rollouts: int, steps: int, run_name: str, workdir: Path
) -> list[dict]:
    """The same steps written directly against ART 0.5.23, no skill-rl code in the loop: gather with
    art.gather_trajectory_groups, RULER via art.rewards.ruler_score_group (one call per dimension our scorer
    judges, with the same rubric text), the same stand-in train, model.log."""
    import art
    from art.rewards import ruler_score_group

    # the stand-in for the GPU's train call, the same on both sides
    from skill_rl.training.dryrun import DryRunBackend

    backend = DryRunBackend()
    model = art.TrainableModel(
        name="bare", run_name=run_name, project="bench", base_model="x", base_path=str(workdir / ".art")
    )
    await model.register(backend)
    tasks = skill.split("train")
    rubrics = [rubric(skill, d) for d in Scorer(skill, Judge()).judged_dimensions]
    params = {"api_base": url, "api_key": "bench", "num_retries": 0}
    last = [0.0]

    async def rollout(task):
        traj = art.Trajectory(
            messages_and_choices=[{"role": "system", "content": skill.body}, {"role": "user", "content": task.input}],
            reward=0.0,
        )
        completion = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(), messages=traj.messages(), logprobs=True
        )
        traj.messages_and_choices.append(completion.choices[0])
        last[0] = time.perf_counter()
        return traj

    async def judge(group):
        return (await asyncio.gather(*(ruler_score_group(group, "openai/judge", params, rubric=r) for r in rubrics)))[0]

    buckets = []
    for step in range(steps):
        batch = [tasks[(step * groups + i) % len(tasks)] for i in range(groups)]
        t0, built = time.perf_counter(), ADAPTERS[0]
        gs = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(rollout(t) for _ in range(rollouts)) for t in batch), after_each=judge, pbar_desc=None
        )
        t1 = time.perf_counter()
        result = await backend.train(model, gs, learning_rate=1e-5)
        t2 = time.perf_counter()
        await model.log(gs, metrics=result.metrics, step=result.step, split="train")
        t3 = time.perf_counter()
        buckets.append(
            {
                "kind": "train",
                "step": t3 - t0,
                "gather": t1 - t0,
                "rollouts": last[0] - t0,
                "judge_tail": t1 - last[0],
                "train": t2 - t1,
                "log": t3 - t2,
                "adapters": ADAPTERS[0] - built,
            }
        )
    return buckets


LAZY_IMPORTS = """
import time
import art
start = time.perf_counter()
import litellm, art.rewards  # RULER
from weave.trace.settings import override_settings  # ART's inference client, at its first call
print(time.perf_counter() - start)
"""


def first_step_imports() -> float:
    """Seconds of the imports that the first step of any ART 0.5.23 loop pays, in a fresh process after `import art`."""
    out = subprocess.run(
        [sys.executable, "-c", LAZY_IMPORTS],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    return float(out.stdout.split()[-1])


def step_overhead(
    skill, groups: int, rollouts: int, lp: float, lj: float, workdir: Path, rounds: int, steps: int
) -> dict:
    """Ours and bare ART, alternating, `rounds` fresh runs each of `steps` steps, on one server. Medians over the
    steady steps (the second and later of every run); the first step's extra cost apart."""
    import statistics

    import art  # noqa: F401  paid here, before either side's first step (start-up, not a step)

    median = statistics.median
    ours, bare = [], []
    with FakeOpenAI(policy_fn=answers(skill), policy_latency=lp, judge_latency=lj) as server, counting_adapters():
        os.environ["SKILL_RL_POLICY_BASE_URL"] = server.url
        for r in range(rounds):
            ours.append(ours_run(server.url, skill, groups, rollouts, steps, f"ours-{groups}x{rollouts}-{r}", workdir))
            # what train_skill.py froze out of the garbage collector's scans: bare ART runs without it
            gc.unfreeze()
            bare.append(
                asyncio.run(
                    _bare_run(server.url, skill, groups, rollouts, steps, f"bare-{groups}x{rollouts}-{r}", workdir)
                )
            )

    def steady(runs, key):
        return median([b.get(key, 0.0) for run in runs for b in [b for b in run if b["kind"] == "train"][1:]])

    keys = ("step", "gather", "rollouts", "judge_tail", "checks", "monitor", "train", "log", "adapters")
    out = {
        "groups": groups,
        "rollouts": rollouts,
        "rounds": rounds,
        "steps": steps,
        "ours": {k: steady(ours, k) for k in keys},
        "bare": {k: steady(bare, k) for k in keys if k not in ("checks", "monitor")},
    }
    for side, runs in (("ours", ours), ("bare", bare)):
        out[side]["all_steps"] = [b["step"] for run in runs for b in run if b["kind"] == "train"]
        # ours ran first
        out[side]["first_extra_process"] = runs[0][0]["step"] - out[side]["step"] if side == "ours" else None
        out[side]["first_extra_run"] = (
            median([run[0]["step"] for run in runs[1:]] or [0.0]) - out[side]["step"] if rounds > 1 else None
        )
    vals = [b for run in ours for b in run if b["kind"] == "val"]
    after = [run[i + 1]["step"] for run in ours for i, b in enumerate(run[:-1]) if b["kind"] == "val"]
    out["ours"].update(
        validation=median([b["gather"] + b.get("val_log", 0.0) + b.get("plot_wait", 0.0) for b in vals]),
        plot=median([b.get("plot", 0.0) for b in vals]),
        plot_first=vals[0].get("plot", 0.0),
        plot_wait=median([b.get("plot_wait", 0.0) for b in vals]),
        after_validation=median(after) if after else None,
    )
    out["ratio"] = out["ours"]["step"] / out["bare"]["step"]
    out["first_step_imports"] = first_step_imports()
    return out


# ------------------------------------------------------------------ judge cost


def judge_cost(skill, model: str = "openai/gpt-4.1-mini") -> dict:
    """Judge calls and prompt characters per group of 8, over every val task, against the floor: the
    SKILL.md, the task input, every output and each judged dimension's rubric, each sent once per call.
    Tokens are those the test server reports (tiktoken's encoding for `model`, counted as OpenAI counts a
    chat prompt); the cost is LiteLLM's price map for `model` applied to them. The prompt is exactly what a
    real judge receives; the completion is the test server's terse answer (a real judge writes more)."""
    refs = [t.reference for t in skill.tasks]
    sent = floor = calls = groups = 0
    with FakeOpenAI() as server:
        scorer = Scorer(skill, Judge(model=model, base_url=server.url, api_key="bench"))
        for k, task in enumerate(skill.split("val")):
            outputs = [refs[(k * 8 + i) % len(refs)] for i in range(8)]
            server.requests.clear()
            asyncio.run(scorer.score(task, outputs))
            requests = [r for r in server.requests if "Grading standards" in r["messages"][0]["content"]]
            calls += len(requests)
            sent += sum(len(m["content"]) for r in requests for m in r["messages"])
            floor += sum(
                len(skill.body) + len(task.input) + sum(map(len, outputs)) + len(rubric(skill, d))
                for d in scorer.judged_dimensions
            )
            groups += 1
    use = scorer.usage
    return {
        "groups": groups,
        "calls_per_group": calls / groups,
        "judged_dimensions": len(scorer.judged_dimensions),
        "prompt_chars_per_group": sent / groups,
        "floor_chars_per_group": floor / groups,
        "ratio": sent / floor,
        "model": model,
        "prompt_tokens_per_group": use.prompt_tokens / groups,
        "completion_tokens_per_group": use.completion_tokens / groups,
        "prompt_usd_per_group": _price(model, use.prompt_tokens, 0) / groups,
        "usd_per_group": use.cost / groups if use.priced else None,
    }


def _price(model: str, prompt_tokens: int, completion_tokens: int) -> float:
    import litellm

    return sum(litellm.cost_per_token(model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens))


# ------------------------------------------------------------------ scorer throughput


def throughput(skill, seconds: float = 1.0, repeat: int = 3, group: int = 8) -> float:
    """Deterministic scoring, outputs per second, one core, best of `repeat`; every output distinct (no cache
    hits), in groups of `group` outputs to one task as the scorer checks them (each group under one time
    limit, see skill_rl/watchdog.py). Run before anything starts ART's or the test server's threads."""
    fns = skill_checks(skill)
    pairs = [(t, t.reference) for t in skill.tasks]
    best, i = 0.0, 0
    for _ in range(repeat):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for task, ref in pairs:
                run_checks_group(fns, [f"{ref}\n{i + k}" for k in range(group)], task)
                i += group
            n += len(pairs) * group
        best = max(best, n / (time.perf_counter() - start))
    return best


# ------------------------------------------------------------------ start-up and scale


def process_seconds(cmd: list[str], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False)
        best = min(best, time.perf_counter() - start)
    return best


def startup(tmp: Path) -> dict:
    skill = load_skill(ROOT / "skills/git-commit")
    src = tmp / "outputs.jsonl"
    tasks = list(skill.tasks)
    src.write_text(
        "".join(
            json.dumps({"task_id": tasks[i % len(tasks)].id, "output": tasks[i % len(tasks)].reference}) + "\n"
            for i in range(100)
        )
    )
    py = [sys.executable, str(ROOT / "train_skill.py"), "--skill", "git-commit"]
    by_skill = {
        f.name: process_seconds([sys.executable, str(ROOT / "train_skill.py"), "--skill", f.name, "--check"])
        for f in list_skills(ROOT / "skills")
    }
    return {
        "check_s": max(by_skill.values()),
        "check_s_by_skill": by_skill,
        "score_100_offline_s": process_seconds(
            [*py, "--score", str(src), "--judge", "none", "--out", str(tmp / "o.jsonl")]
        ),
    }


PATHOLOGICAL = ("a", "#1", "# ", "## ", "- ", "<", "`", "1. ", "Release type: ")


def derived_worst(skill, size: int = 5_000_000) -> dict:
    """Seconds for every derived check of a skill on one single-line output of `size` characters, worst of a few
    shapes that poke at each check (headings, items, placeholders, tokens, fields)."""
    fns = [d.fn for d in derive(skill).checks]
    task, worst = skill.tasks[0], (0.0, "")
    for unit in PATHOLOGICAL:
        output = (unit * (size // len(unit) + 1))[:size]
        view.cache_clear()
        start = time.perf_counter()
        run_checks(fns, output, task)
        worst = max(worst, (time.perf_counter() - start, unit))
    return {"skill": skill.name, "checks": len(fns), "chars": size, "seconds": worst[0], "shape": worst[1]}


SCALE_PROBE = """
import re, sys, time
sys.path.insert(0, {root!r})
from skill_rl.skills import load_skill
def peak_kb():  # VmHWM: unlike ru_maxrss, not inherited from the parent across fork + exec
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read())[1])
before = peak_kb()
start = time.perf_counter()
skill = load_skill({folder!r})
print(len(skill.tasks), time.perf_counter() - start, peak_kb(), before)
"""


def scale(tmp: Path, n: int) -> dict:
    folder = tmp / "skills" / "git-commit"
    folder.mkdir(parents=True)
    for name in ("SKILL.md", "checks.py"):
        shutil.copy(ROOT / "skills/git-commit" / name, folder / name)
    lines = (ROOT / "skills/git-commit/tasks.jsonl").read_text().splitlines()
    with open(folder / "tasks.jsonl", "w") as f:
        for i in range(n):
            row = json.loads(lines[i % len(lines)])
            row["id"] = f"t{i}"
            f.write(json.dumps(row) + "\n")
    out = subprocess.run(
        [sys.executable, "-c", SCALE_PROBE.format(root=str(ROOT), folder=str(folder))],
        capture_output=True,
        text=True,
        check=True,
    )
    count, seconds, peak_kb, before_kb = out.stdout.split()
    return {
        "tasks": int(count),
        "load_s": float(seconds),
        "peak_rss_mb": int(peak_kb) / 1024,
        "loading_mb": (int(peak_kb) - int(before_kb)) / 1024,
        "file_mb": (folder / "tasks.jsonl").stat().st_size / 2**20,
    }


# ------------------------------------------------------------------ report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lp", type=float, default=0.3, help="policy latency, seconds (default 0.3)")
    p.add_argument("--lj", type=float, default=0.5, help="judge latency, seconds (default 0.5)")
    p.add_argument("--quick", action="store_true", help="8x8 only, 10,000 tasks for the scale test")
    p.add_argument("--judge-only", action="store_true", help="only the judge's cost (a few seconds)")
    p.add_argument("--step-only", action="store_true", help="only the training step, ours against bare ART, 8x8")
    p.add_argument(
        "--rounds", type=int, default=3, help="fresh runs per side, alternating ours and bare ART (default 3)"
    )
    p.add_argument("--run-steps", type=int, default=4, help="steps per run; the first is timed apart (default 4)")
    p.add_argument("--json", type=Path, default=ROOT / "bench/out/bench.json", help="where to write the figures")
    args = p.parse_args()
    skill = load_skill(ROOT / "skills/git-commit")
    review = load_skill(ROOT / "skills/code-review")
    figures = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "lp": args.lp,
        "lj": args.lj,
        "steps": [],
    }
    if args.judge_only:
        figures["judge"] = {s.name: judge_cost(s) for s in (skill, review)}
        return report(figures, args)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if not args.step_only:
            notes = load_skill(ROOT / "skills/release-notes")
            figures["throughput"] = {s.name: throughput(s) for s in (skill, review, notes)}
            figures["derived_5mb"] = derived_worst(notes)
            figures["startup"] = startup(tmp)
            figures["scale"] = scale(tmp, 10_000 if args.quick else 100_000)
        for g, n in [(8, 8)] if args.quick or args.step_only else [(8, 8), (16, 8)]:
            figures["steps"].append(step_overhead(skill, g, n, args.lp, args.lj, tmp, args.rounds, args.run_steps))
        if not args.step_only:
            figures["judge"] = {s.name: judge_cost(s) for s in (skill, review)}
    return report(figures, args)


def step_table(s: dict, args, machine: str):
    from rich.table import Table

    def sec(x):
        return "—" if x is None else f"{x:.2f} s"

    def extra(x):
        return "—" if x is None else f"{x:+.2f} s"

    ours, bare = s["ours"], s["bare"]
    t = Table(
        title=f"training step, {s['groups']} groups x {s['rollouts']} rollouts (Lp {args.lp} s, Lj {args.lj} s; {machine}): "
        f"medians of the steady steps of {s['rounds']} fresh runs of {s['steps']} steps per side, alternating"
    )
    for col, justify in (("phase", "left"), ("train_skill.py", "right"), ("bare ART", "right")):
        t.add_column(col, justify=justify)
    rows = [
        ("step (gather to log, as the loop prints it)", "step"),
        ("  gather: rollouts, checks and judge, overlapped", "gather"),
        ("    rollouts: start to the last answer", "rollouts"),
        ("    judge after the last answer", "judge_tail"),
        ("    checks (CPU, inside the gather)", "checks"),
        ("  monitor", "monitor"),
        ("  train (the dry-run stand-in)", "train"),
        ("  log (model.log)", "log"),
    ]
    for label, key in rows:
        t.add_row(label, sec(ours.get(key)), sec(bare.get(key)))
    t.add_row(
        "pydantic TypeAdapters built in a steady step (schema building)",
        f"{ours['adapters']:.0f}",
        f"{bare['adapters']:.0f}",
    )
    t.add_row(
        "first step in this process, over a steady step",
        extra(ours["first_extra_process"]),
        extra(bare["first_extra_process"]),
    )
    t.add_row(
        "  of which imports any ART loop's first step pays (litellm, RULER, weave; a fresh process)",
        sec(s["first_step_imports"]),
        "",
    )
    t.add_row(
        "first step of a later run, over a steady step", extra(ours["first_extra_run"]), extra(bare["first_extra_run"])
    )
    t.add_row(
        f"validation ({s['groups']} tasks x {s['rollouts']}), each, as the loop waits for it",
        sec(ours["validation"]),
        "—",
    )
    t.add_row(f"  reward plot, drawn in a thread (the first: {ours['plot_first']:.2f} s)", sec(ours["plot"]), "—")
    t.add_row("  reward plot, the loop waits for it", sec(ours["plot_wait"]), "—")
    t.add_row(
        "  reward plot's drawing per step at the default --eval-every 10, share of a step",
        f"{ours['plot'] / 10 / ours['step']:.1%}",
        "—",
    )
    t.add_row("step right after a validation (its plot drawn meanwhile)", sec(ours["after_validation"]), "—")
    return t


def report(figures: dict, args) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.width = max(console.width, 150)
    for s in figures["steps"]:
        console.print(step_table(s, args, figures["machine"]))
        console.print(
            f"train_skill.py / bare ART = {s['ratio']:.2f} (target <= 1.0); every step, first ones included: "
            f"ours {' '.join(f'{x:.2f}' for x in s['ours']['all_steps'])}; "
            f"bare {' '.join(f'{x:.2f}' for x in s['bare']['all_steps'])}"
        )
    if "judge" not in figures:
        return _write(figures, args, console)
    t = Table(title="judge cost per group of 8 outputs (mean over val tasks)")
    for col in (
        "skill",
        "calls",
        "judged dims",
        "prompt chars",
        "floor chars",
        "ratio (target <= 1.15)",
        "prompt tokens",
        "completion tokens*",
        "prompt $",
        "$ (map)",
    ):
        t.add_column(col, justify="right")
    for name, j in figures["judge"].items():
        t.add_row(
            name,
            f"{j['calls_per_group']:g}",
            str(j["judged_dimensions"]),
            f"{j['prompt_chars_per_group']:,.0f}",
            f"{j['floor_chars_per_group']:,.0f}",
            f"{j['ratio']:.3f}",
            f"{j['prompt_tokens_per_group']:,.0f}",
            f"{j['completion_tokens_per_group']:,.0f}",
            f"{j['prompt_usd_per_group']:.5f}",
            "—" if j["usd_per_group"] is None else f"{j['usd_per_group']:.5f}",
        )
    console.print(t)
    model = next(iter(figures["judge"].values()))["model"]
    console.print(
        f"tokens: tiktoken's count for {model} as the test server reports it; $: LiteLLM's local price map for "
        f"{model}. *completion: the test server's short answers; a real judge writes longer explanations."
    )
    if "throughput" not in figures:
        return _write(figures, args, console)
    t = Table(title="scorer, start-up and scale")
    t.add_column("measure")
    t.add_column("figure", justify="right")
    t.add_column("target", justify="right")
    tp, su, sc = figures["throughput"], figures["startup"], figures["scale"]
    t.add_row("git-commit deterministic scoring", f"{tp['git-commit']:,.0f} outputs/s", ">= 20,000")
    t.add_row("code-review deterministic scoring", f"{tp['code-review']:,.0f} outputs/s", ">= 5,000")
    t.add_row("release-notes deterministic scoring (derived checks only)", f"{tp['release-notes']:,.0f} outputs/s", "")
    d5 = figures["derived_5mb"]
    t.add_row(
        f"{d5['skill']}: its {d5['checks']} derived checks on a 5 MB single-line output (worst shape {d5['shape']!r})",
        f"{d5['seconds']:.2f} s",
        "linear",
    )
    slowest = max(su["check_s_by_skill"], key=su["check_s_by_skill"].get)
    t.add_row(f"--check, whole process (slowest shipped skill: {slowest})", f"{su['check_s']:.2f} s", "<= 1.5 s")
    t.add_row("--score --judge none, 100 outputs, whole process", f"{su['score_100_offline_s']:.2f} s", "")
    t.add_row(
        f"load {sc['tasks']:,} tasks ({sc['file_mb']:.0f} MB)",
        f"{sc['load_s']:.2f} s, peak RSS {sc['peak_rss_mb']:.0f} MB (+{sc['loading_mb']:.0f} MB)",
        "",
    )
    console.print(t)
    return _write(figures, args, console)


def _write(figures: dict, args, console) -> int:
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=1))
    console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
