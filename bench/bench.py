"""The cost of everything around the GPU: step overhead, judge cost, scorer speed, start-up, input scale.

    python bench/bench.py [--quick] [--judge-only] [--json bench/out/bench.json]

Everything runs on this machine against a local OpenAI-compatible server (tests/openai_server.py)
that answers policy calls after Lp seconds and judge calls after Lj seconds; training uses the CPU
stand-in backend. GPU generation and training throughput are not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

from skill_rl.backends import fill_defaults  # noqa: E402
from skill_rl.reward import Judge, Scorer, rubric  # noqa: E402
from skill_rl.rubric import run_checks, run_checks_group, skill_checks  # noqa: E402
from skill_rl.derived import derive, view  # noqa: E402
from skill_rl.skills import list_skills, load_skill  # noqa: E402


def answers(skill):
    """A policy that answers with the skill's reference outputs, in turn: realistic lengths and variety."""
    refs = [t.reference for t in skill.tasks if t.reference]
    counter = iter(range(10**9))
    return lambda request: refs[next(counter) % len(refs)]


# ------------------------------------------------------------------ step overhead


def skill_rl_step(skill, groups: int, rollouts: int, lp: float, lj: float, workdir: Path) -> float:
    """Wall time of step 2 of the real training loop (step 1 pays one-off imports)."""
    import train_skill

    with FakeOpenAI(policy_fn=answers(skill), policy_latency=lp, judge_latency=lj) as server:
        os.environ["SKILL_RL_POLICY_BASE_URL"] = server.url
        args = train_skill.parse_args([
            "--skill", skill.name, "--backend", "skill_rl.dryrun:DryRunBackend", "--steps", "2",
            "--groups-per-step", str(groups), "--rollouts-per-group", str(rollouts), "--eval-every", "1000",
            "--judge-base-url", server.url, "--judge-api-key", "bench", "--run-name", f"bench-{groups}x{rollouts}"])
        fill_defaults(args, None)  # what main() does for the flags left out
        args.base_model = train_skill.backends.plan(args).base_model
        skill.__dict__  # noqa: the skill is frozen; the loop reads it as is
        out = io.StringIO()
        cwd = os.getcwd()
        os.chdir(workdir)
        try:
            with contextlib.redirect_stdout(out):
                val_tasks = [t for t in skill.tasks if t.split == "val"]
                # no validation pass inside the timed steps: train on train tasks only
                bench_skill = type(skill)(**{**skill.__dict__, "tasks": tuple(t for t in skill.tasks if t not in val_tasks)})
                asyncio.run(train_skill.train(args, bench_skill, train_skill.make_judge(args), None))  # no warm start
        finally:
            os.chdir(cwd)
    times = [float(m) for m in re.findall(r"^step +\d+ \|.*\| ([\d.]+) s$", out.getvalue(), re.M)]
    return times[-1]


async def _bare_art_step(url: str, skill, groups: int, rollouts: int, workdir: Path, dims: int) -> float:
    """The same work written directly against ART: gather, RULER per judged dimension, train, log."""
    import art
    from art.rewards import ruler_score_group

    from skill_rl.dryrun import DryRunBackend

    backend = DryRunBackend()
    model = art.TrainableModel(name="bare", run_name=f"bare-{groups}x{rollouts}", project="bench", base_model="x",
                               base_path=str(workdir / ".art"))
    await model.register(backend)
    tasks = [t for t in skill.tasks if t.split == "train"][:groups]
    params = {"api_base": url, "api_key": "bench", "num_retries": 0}

    async def rollout(task):
        traj = art.Trajectory(messages_and_choices=[{"role": "system", "content": skill.body},
                                                    {"role": "user", "content": task.input}], reward=0.0)
        completion = await model.openai_client().chat.completions.create(model=model.get_inference_name(), messages=traj.messages(),
                                                                         logprobs=True)
        traj.messages_and_choices.append(completion.choices[0])
        return traj

    async def judge(group):
        judged = await asyncio.gather(*(ruler_score_group(group, "openai/judge", params, rubric=f"dimension {d}") for d in range(dims)))
        return judged[0]

    elapsed = []
    for _ in range(2):
        start = time.perf_counter()
        gs = await art.gather_trajectory_groups((art.TrajectoryGroup(rollout(t) for _ in range(rollouts)) for t in tasks),
                                                after_each=judge, pbar_desc=None)
        result = await backend.train(model, gs, learning_rate=1e-5)
        await model.log(gs, metrics=result.metrics, step=result.step, split="train")
        elapsed.append(time.perf_counter() - start)
    return elapsed[-1]


def bare_art_step(skill, groups, rollouts, lp, lj, workdir, dims) -> float:
    with FakeOpenAI(policy_fn=answers(skill), policy_latency=lp, judge_latency=lj) as server:
        os.environ["SKILL_RL_POLICY_BASE_URL"] = server.url
        return asyncio.run(_bare_art_step(server.url, skill, groups, rollouts, workdir, dims))


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
            floor += sum(len(skill.body) + len(task.input) + sum(map(len, outputs)) + len(rubric(skill, d))
                         for d in scorer.judged_dimensions)
            groups += 1
    use = scorer.usage
    return {"groups": groups, "calls_per_group": calls / groups, "judged_dimensions": len(scorer.judged_dimensions),
            "prompt_chars_per_group": sent / groups, "floor_chars_per_group": floor / groups, "ratio": sent / floor,
            "model": model, "prompt_tokens_per_group": use.prompt_tokens / groups,
            "completion_tokens_per_group": use.completion_tokens / groups,
            "prompt_usd_per_group": _price(model, use.prompt_tokens, 0) / groups,
            "usd_per_group": use.cost / groups if use.priced else None}


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
    src.write_text("".join(json.dumps({"task_id": tasks[i % len(tasks)].id, "output": tasks[i % len(tasks)].reference}) + "\n"
                           for i in range(100)))
    py = [sys.executable, str(ROOT / "train_skill.py"), "--skill", "git-commit"]
    by_skill = {f.name: process_seconds([sys.executable, str(ROOT / "train_skill.py"), "--skill", f.name, "--check"])
                for f in list_skills(ROOT / "skills")}
    return {"check_s": max(by_skill.values()), "check_s_by_skill": by_skill,
            "score_100_offline_s": process_seconds([*py, "--score", str(src), "--judge", "none", "--out", str(tmp / "o.jsonl")])}


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
    out = subprocess.run([sys.executable, "-c", SCALE_PROBE.format(root=str(ROOT), folder=str(folder))],
                         capture_output=True, text=True, check=True)
    count, seconds, peak_kb, before_kb = out.stdout.split()
    return {"tasks": int(count), "load_s": float(seconds), "peak_rss_mb": int(peak_kb) / 1024,
            "loading_mb": (int(peak_kb) - int(before_kb)) / 1024,
            "file_mb": (folder / "tasks.jsonl").stat().st_size / 2**20}


# ------------------------------------------------------------------ report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lp", type=float, default=0.3, help="policy latency, seconds (default 0.3)")
    p.add_argument("--lj", type=float, default=0.5, help="judge latency, seconds (default 0.5)")
    p.add_argument("--quick", action="store_true", help="8x8 only, 10,000 tasks for the scale test")
    p.add_argument("--judge-only", action="store_true", help="only the judge's cost (a few seconds)")
    p.add_argument("--json", type=Path, default=ROOT / "bench/out/bench.json", help="where to write the figures")
    args = p.parse_args()
    skill = load_skill(ROOT / "skills/git-commit")
    review = load_skill(ROOT / "skills/code-review")
    figures = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
               "lp": args.lp, "lj": args.lj, "steps": []}
    if args.judge_only:
        figures["judge"] = {s.name: judge_cost(s) for s in (skill, review)}
        return report(figures, args)
    notes = load_skill(ROOT / "skills/release-notes")
    figures["throughput"] = {s.name: throughput(s) for s in (skill, review, notes)}
    figures["derived_5mb"] = derived_worst(notes)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        figures["startup"] = startup(tmp)
        figures["scale"] = scale(tmp, 10_000 if args.quick else 100_000)
        dims = len(Scorer(skill, Judge()).judged_dimensions)
        for g, n in ([(8, 8)] if args.quick else [(8, 8), (16, 8)]):
            ours = skill_rl_step(skill, g, n, args.lp, args.lj, tmp)
            bare = bare_art_step(skill, g, n, args.lp, args.lj, tmp, dims)
            ideal = args.lp + args.lj
            figures["steps"].append({"groups": g, "rollouts": n, "step_s": ours, "bare_art_s": bare, "ideal_s": ideal,
                                     "serial_s": g * n * args.lp + g * args.lj,
                                     "target_s": 1.25 * max(ideal, bare), "ok": ours <= 1.25 * max(ideal, bare)})
        figures["judge"] = {s.name: judge_cost(s) for s in (skill, review)}
    return report(figures, args)


def report(figures: dict, args) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.width = max(console.width, 150)
    t = Table(title=f"step overhead (Lp {args.lp} s, Lj {args.lj} s; {figures['machine']})")
    for col in ("G x N", "step", "bare ART", "ideal Lp+Lj", "serial", "target", "ok"):
        t.add_column(col, justify="right")
    for s in figures["steps"]:
        t.add_row(f"{s['groups']} x {s['rollouts']}", f"{s['step_s']:.2f} s", f"{s['bare_art_s']:.2f} s", f"{s['ideal_s']:.2f} s",
                  f"{s['serial_s']:.1f} s", f"<= {s['target_s']:.2f} s", "yes" if s["ok"] else "NO")
    if figures["steps"]:
        console.print(t)
    t = Table(title="judge cost per group of 8 outputs (mean over val tasks)")
    for col in ("skill", "calls", "judged dims", "prompt chars", "floor chars", "ratio (target <= 1.15)",
                "prompt tokens", "completion tokens*", "prompt $", "$ (map)"):
        t.add_column(col, justify="right")
    for name, j in figures["judge"].items():
        t.add_row(name, f"{j['calls_per_group']:g}", str(j["judged_dimensions"]), f"{j['prompt_chars_per_group']:,.0f}",
                  f"{j['floor_chars_per_group']:,.0f}", f"{j['ratio']:.3f}", f"{j['prompt_tokens_per_group']:,.0f}",
                  f"{j['completion_tokens_per_group']:,.0f}", f"{j['prompt_usd_per_group']:.5f}",
                  "—" if j["usd_per_group"] is None else f"{j['usd_per_group']:.5f}")
    console.print(t)
    model = next(iter(figures["judge"].values()))["model"]
    console.print(f"tokens: tiktoken's count for {model} as the test server reports it; $: LiteLLM's local price map for "
                  f"{model}. *completion: the test server's short answers; a real judge writes longer explanations.")
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
    t.add_row(f"{d5['skill']}: its {d5['checks']} derived checks on a 5 MB single-line output (worst shape {d5['shape']!r})",
              f"{d5['seconds']:.2f} s", "linear")
    slowest = max(su["check_s_by_skill"], key=su["check_s_by_skill"].get)
    t.add_row(f"--check, whole process (slowest shipped skill: {slowest})", f"{su['check_s']:.2f} s", "<= 1.5 s")
    t.add_row("--score --judge none, 100 outputs, whole process", f"{su['score_100_offline_s']:.2f} s", "")
    t.add_row(f"load {sc['tasks']:,} tasks ({sc['file_mb']:.0f} MB)", f"{sc['load_s']:.2f} s, peak RSS {sc['peak_rss_mb']:.0f} MB (+{sc['loading_mb']:.0f} MB)", "")
    console.print(t)
    return _write(figures, args, console)


def _write(figures: dict, args, console) -> int:
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=1))
    console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
