"""--internalize: the schedule that fades SKILL.md out of the policy's prompts, the scorer that still sees it, a
resumed run that keeps to the schedule, and --eval's arms with and without the skill."""

import itertools
import json
import os
import re
import signal
import threading

import pytest
from conftest import DRY_RUN, SMALL_GROUPS, small_git_commit
from openai_server import TRAJECTORY, FakeOpenAI
from test_mining import run

from skill_rl.prompts import Fade, messages, stub, system_prompt
from skill_rl.skills import load_skill

GOOD = "fix(app): raise the limit"


# ------------------------------------------------------------------ the schedule


@pytest.mark.parametrize("steps,floor", [(10, 0.3), (7, 0.5), (50, 0.3), (3, 0.0), (4, 1.0), (1, 0.3)])
def test_the_chance_of_the_skill_falls_linearly_to_zero_for_the_last_floor_share_of_steps(steps, floor):
    fade = Fade(steps, floor)
    p = [fade.probability(k) for k in range(1, steps + 1)]
    at_zero = -(-int(floor * 100) * steps // 100)  # ceil(floor x steps), in integers
    assert p[steps - at_zero :] == [0.0] * at_zero and all(x > 0 for x in p[: steps - at_zero])
    assert all(a > b for a, b in zip(p[: steps - at_zero], p[1 : steps - at_zero]))  # strictly falling while it fades
    if steps - at_zero:
        assert p[0] == 1.0 and len({round(a - b, 9) for a, b in zip(p, p[1 : steps - at_zero])}) <= 1  # linear
    assert fade.probability(0) == 1.0  # before RL (the warm start, step 0's validation)


@pytest.mark.parametrize(
    "flags,floor", [(["--sft"], 1.0), (["--no-sft"], 0.3), (["--sft", "--internalize-floor", "0.5"], 0.5)]
)
def test_after_a_warm_start_no_rl_prompt_carries_the_skill_unless_the_floor_is_given(flags, floor):
    import train_skill
    from skill_rl.commands import config
    from skill_rl.skills import find_skill, skill_dirs

    args = train_skill.parse_args(["--skill", "git-commit", *DRY_RUN, "--judge", "none", "--internalize", *flags])
    settings = config.resolve(args, load_skill(find_skill(skill_dirs(None), "git-commit"))).settings
    assert settings.internalize_floor == floor
    fade = Fade(10, settings.internalize_floor)
    assert (fade.fading == 0) == (floor == 1.0) and fade.probability(10) == 0.0


def test_which_steps_carry_the_skill_is_fixed_by_seed_step_and_task():
    tasks = [f"t{i}" for i in range(200)]
    fade = Fade(10, 0.3, seed=7)
    chosen = {(k, t): fade.carries(k, t) for k in range(1, 11) for t in tasks}
    assert chosen == {
        (k, t): Fade(10, 0.3, seed=7).carries(k, t) for k in range(1, 11) for t in tasks
    }  # another process alike
    assert all(chosen[1, t] for t in tasks) and not any(chosen[k, t] for k in (8, 9, 10) for t in tasks)
    for k in range(2, 8):  # the share carried follows the probability (200 draws a step)
        assert abs(sum(chosen[k, t] for t in tasks) / len(tasks) - fade.probability(k)) < 0.15
    other = Fade(10, 0.3, seed=8)
    assert any(other.carries(k, t) != chosen[k, t] for k in range(2, 8) for t in tasks)  # the seed matters


def test_without_the_skill_the_system_prompt_is_the_stub_nothing_or_the_description(tmp_path):
    skill = load_skill(small_git_commit(tmp_path, train=1, val=0) / "git-commit")
    task = skill.tasks[0]
    assert system_prompt(skill, True, "none") == skill.body
    assert system_prompt(skill, False, "stub") == stub(skill) and skill.name in stub(skill) and "\n" not in stub(skill)
    assert system_prompt(skill, False, "description") == skill.description
    assert messages(skill, task, False, "none") == [{"role": "user", "content": task.input}]
    assert messages(skill, task, True) == [
        {"role": "system", "content": skill.body},
        {"role": "user", "content": task.input},
    ]


# ------------------------------------------------------------------ a run, offline


def judged_systems(server) -> list[str]:
    """The system message each judge call was shown: in the messages all its trajectories share (RULER's
    <context>), else in each trajectory's."""
    out = []
    for prompt in server.judge_prompts:
        shared = re.search(r"<context>\n(.*?)\n</context>", prompt, re.S)
        lists = [json.loads(shared[1])] if shared else [json.loads(body) for _, body in TRAJECTORY.findall(prompt)]
        out += [next((m["content"] for m in msgs if m["role"] == "system"), None) for msgs in lists]
    return out


@pytest.mark.slow  # the training loop loads ART (torch)
def test_an_internalized_run_fades_the_skill_from_the_policy_but_never_from_the_judge_and_resumes_on_schedule(
    tmp_path, monkeypatch
):
    skills = small_git_commit(tmp_path, train=8, val=2)
    skill = load_skill(skills / "git-commit")
    fade = Fade(4, 0.25, seed=3, without="stub")  # p = 1, 2/3, 1/3, 0
    sent = threading.Event()

    def policy(request):
        if request["model"].endswith("@2") and not sent.is_set():  # step 2's validation: stop after it, then resume
            sent.set()
            os.kill(os.getpid(), signal.SIGTERM)
        return next(answers)  # answers differ within a group: the judge is asked

    answers = itertools.cycle([GOOD, "Raised the limit.", "fix: raise it"])
    monkeypatch.chdir(tmp_path)
    with FakeOpenAI(policy_fn=policy) as server:
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        command = (
            "--skills-dir",
            skills,
            "--skill",
            "git-commit",
            *DRY_RUN,
            "--judge-base-url",
            server.url,
            "--judge-api-key",
            "k",
            "--steps",
            "4",
            "--groups-per-step",
            "4",
            "--rollouts-per-group",
            "2",
            "--eval-every",
            "2",
            "--seed",
            "3",
            "--internalize",
            "--internalize-floor",
            "0.25",
        )
        code, stdout, stderr = run(*command)
        assert code == 143 and "step    2 | reward" in stdout and "step    3 |" not in stdout, stderr[-2000:]
        code, again, stderr = run(*command)
    assert code == 0 and "starting at step 2 of 4" in again and "step    4 | reward" in again, stderr[-2000:]

    inputs = {t.input: t for t in skill.tasks}
    trained = [r for r in server.requests if "Grading standards" not in r["messages"][0]["content"]]
    seen_steps = set()
    for r in trained:
        task, system = inputs[r["messages"][-1]["content"]], r["messages"][0]["content"]
        if task.split == "train":  # a rollout of RL step (checkpoint + 1): the schedule says which prompt
            step = int(r["model"].rsplit("@", 1)[1]) + 1
            seen_steps.add(step)
            assert system == (skill.body if fade.carries(step, task.id) else stub(skill)), (step, task.id)
    assert seen_steps == {1, 2, 3, 4}
    assert {r["messages"][0]["content"] for r in trained if inputs[r["messages"][-1]["content"]].split == "train"} == {
        skill.body,
        stub(skill),
    }  # both prompts were used: the schedule mixes them mid-run
    assert server.judge_calls and set(judged_systems(server)) == {skill.body}  # the scorer always sees the skill

    run_dir = next((tmp_path / ".art").rglob("state.json")).parent
    state = json.loads((run_dir / "state.json").read_text())["skill_rl_internalize"]
    assert state["internalized"] and state["probabilities"] == [round(fade.probability(k), 4) for k in range(1, 5)]
    assert "internalize: true" in (run_dir / "config.yaml").read_text()
    # validation: each val task both ways; the arms side by side at the end, with the tokens saved
    table = again[again.index("validation arms") :]
    for arm in (
        "base model, with SKILL.md",
        "base model, without SKILL.md",
        "trained @4, with SKILL.md",
        "trained @4, without SKILL.md",
    ):
        assert arm in table
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    at = {h["step"]: h for h in history if "val/reward" in h}
    assert set(at) == {0, 2, 4} and all("val/skill/reward" in h and "val/skill/format" in h for h in at.values())
    for step, h in at.items():  # each arm's row is what its validation printed (both arms after the repeats' cut)
        printed = stdout + again
        assert f"val  {step:>4} | reward {h['val/skill/reward']:.3f} | with SKILL.md" in printed
        assert f"val  {step:>4} | reward {h['val/reward']:.3f} | without SKILL.md" in printed
        assert h["val/skill/prompt_tokens"] > h["val/prompt_tokens"] > 0
    saved = re.search(r"prompt tokens saved per request without SKILL.md: (\d+) of (\d+)", again)
    assert saved and 0 < int(saved[1]) < int(saved[2])
    assert "no SKILL.md" in again and "--without-skill stub" in again  # how to serve and evaluate it
    code, stdout, stderr = run(*command[:-3])  # the same run without --internalize: refused, not silently reverted
    assert code == 2 and "--internalize" in stderr
    assert "internalize: true" in (run_dir / "config.yaml").read_text()  # and its records left as they were


@pytest.mark.slow  # the training loop loads ART (torch)
def test_without_internalize_every_prompt_carries_the_skill_as_before(tmp_path, monkeypatch):
    skills = small_git_commit(tmp_path, train=4, val=1)
    skill = load_skill(skills / "git-commit")
    monkeypatch.chdir(tmp_path)
    with FakeOpenAI(policy_fn=lambda r: GOOD) as server:
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        code, stdout, stderr = run(
            "--skills-dir", skills, "--skill", "git-commit", *DRY_RUN, "--judge", "none", "--steps", "2", *SMALL_GROUPS
        )
    assert code == 0, stderr[-2000:]
    inputs = {t.input for t in skill.tasks}
    assert server.requests and all(
        r["messages"]
        == [{"role": "system", "content": skill.body}, {"role": "user", "content": r["messages"][-1]["content"]}]
        and r["messages"][-1]["content"] in inputs
        for r in server.requests
    )  # what rollout.py sent before --internalize existed
    assert "validation arms" not in stdout and "internalized" not in stdout
    history = [json.loads(line) for line in next((tmp_path / ".art").rglob("history.jsonl")).read_text().splitlines()]
    assert not any(k.endswith(("/prompt_tokens", "/with_skill")) or "/skill/" in k for h in history for k in h)


# ------------------------------------------------------------------ --eval's arms


def test_eval_baseline_reports_each_model_with_and_without_the_skill_and_the_prompt_tokens_saved(tmp_path):
    skills = small_git_commit(tmp_path, train=2, val=3)
    skill = load_skill(skills / "git-commit")
    trained = FakeOpenAI(policy_fn=lambda r: GOOD)  # answers well with or without the skill: internalized
    base = FakeOpenAI(policy_fn=lambda r: GOOD if r["messages"][0]["content"] == skill.body else "Raised the limit.")
    out = tmp_path / "eval"
    with trained, base:
        code, stdout, stderr = run(
            "--skills-dir",
            skills,
            "--skill",
            "git-commit",
            "--eval",
            "--judge",
            "none",
            "--baseline",
            "--without-skill",
            "none",
            "--model",
            f"base=m@{base.url}",
            "--model",
            f"trained=m@{trained.url}",
            "--out",
            out,
        )
    assert code == 0, stderr
    result = json.loads((out / "results.json").read_text())
    rows = {r["model"]: r for r in result["models"]}
    assert list(rows) == ["base", "base (no skill)", "trained", "trained (no skill)"]
    assert rows["trained (no skill)"]["format"] >= rows["base"]["format"] > rows["base (no skill)"]["format"]
    for server in (trained, base):  # --without-skill none: the no-skill arm sent no system message at all
        assert sorted(len(r["messages"]) for r in server.requests) == [1, 1, 1, 2, 2, 2]
        reported = sorted(u["prompt_tokens"] for u in server.usage_reported)
        assert (
            sorted(
                r["prompt_tokens"]
                for r in result["records"]
                if r["model"].startswith("trained" if server is trained else "base")
            )
            == reported
        )  # the server's count of each request, as recorded
    for label in ("base", "trained"):
        s = result["prompt_saving"][label]
        assert (
            s["with"] == rows[label]["prompt_tokens"] and s["without"] == rows[f"{label} (no skill)"]["prompt_tokens"]
        )
        assert s["saved"] == pytest.approx(s["with"] - s["without"]) and 0 < s["fraction"] < 1 and not s["estimated"]
        assert (
            f"prompt tokens per request, {label}: {s['with']:.0f} with the SKILL.md, {s['without']:.0f} without"
            in stdout
        )
    md = (out / "results.md").read_text()
    assert "prompt tokens" in md.splitlines()[2] and "| trained (no skill) |" in md


def test_prompt_tokens_are_estimated_and_marked_so_when_the_server_reports_no_usage(tmp_path):
    import asyncio
    from types import SimpleNamespace

    from skill_rl.endpoints import Endpoint, generate
    from skill_rl.prompts import estimated_tokens
    from skill_rl.scoring.report import _tokens

    skill = load_skill(small_git_commit(tmp_path, train=1, val=0) / "git-commit")
    answer = SimpleNamespace(
        choices=[SimpleNamespace(message=SimpleNamespace(content=GOOD), finish_reason="stop")], usage=None
    )

    async def create(**request):
        return answer

    client = SimpleNamespace(timeout=5.0, chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    counted = []
    ep = Endpoint("m", "m", None, with_skill=False, without="stub")
    asyncio.run(generate(client, ep, skill, skill.tasks[0], 1, 0.0, 16, asyncio.Semaphore(1), counted))
    assert counted == [-estimated_tokens(messages(skill, skill.tasks[0], False, "stub"))]  # negative: an estimate
    assert (
        _tokens({"prompt_tokens": 12.0, "prompt_estimated": True}) == "~12" and _tokens({"prompt_tokens": 12.0}) == "12"
    )


@pytest.mark.parametrize(
    "argv,said",
    [
        (["--eval", "--model", "m@http://127.0.0.1:9/v1", "--internalize"], "--internalize trains a run"),
        (
            ["--eval", "--model", "m@http://127.0.0.1:9/v1", "--without-skill", "none"],
            "--without-skill applies to --eval --baseline",
        ),
        (["--score", "x.jsonl", "--internalize-floor", "0.5"], "--internalize-floor goes with --internalize"),
    ],
)
def test_the_internalize_flags_where_they_do_not_apply_exit_2_in_one_line(tmp_path, argv, said):
    skills = small_git_commit(tmp_path, train=2, val=1)
    code, stdout, stderr = run("--skills-dir", skills, "--skill", "git-commit", "--judge", "none", *argv)
    assert code == 2 and said in stderr and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def test_an_export_of_an_internalized_run_says_so_and_hands_on_the_prompt_it_was_trained_to_need(tmp_path):
    from skill_rl.export import modelfile
    from skill_rl.export.card import _trained_under
    from skill_rl.prompts import STATE_KEY, internalized

    skill = load_skill(small_git_commit(tmp_path, train=1, val=0) / "git-commit")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert internalized(run_dir) is None and "always given as the system message" in _trained_under(skill, run_dir)
    (run_dir / "state.json").write_text(json.dumps({STATE_KEY: Fade(10, 0.3, without="none").record()}))
    assert internalized(run_dir)["steps"] == 10
    said = _trained_under(skill, run_dir)
    assert "--internalize" in said and "no system message" in said and "the last 3 without it" in said
    assert 'SYSTEM """' not in modelfile(skill, "") and 'SYSTEM """' + skill.body.strip() in modelfile(skill)
    assert f'SYSTEM """{stub(skill)}' in modelfile(skill, stub(skill))
