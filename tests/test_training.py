"""The whole training loop, offline: real ART objects, a real local HTTP server for the policy and the
judge, and the CPU stand-in backend (skill_rl.training.dryrun) passed as --backend MODULE:CLASS."""

import itertools
import json
import re
from pathlib import Path

import pytest
from conftest import DRY_RUN, main_in_process, small_git_commit
from openai_server import FakeOpenAI

from skill_rl.skills import load_skill

ROOT = Path(__file__).resolve().parent.parent
ANSWERS = [
    "fix: raise the limit",
    "Fixed the limit.",
    "feat(app): change the limit",
    "fix(app): raise the limit\n\nThe old limit dropped requests.",
]


@pytest.fixture(scope="module")
def policy_server():
    counter = itertools.count()
    with FakeOpenAI(policy_fn=lambda request: ANSWERS[next(counter) % len(ANSWERS)]) as s:
        yield s


@pytest.fixture
def skills_dir(tmp_path):
    return small_git_commit(tmp_path, train=6, val=2)


@pytest.fixture
def train(tmp_path, skills_dir, monkeypatch, capfd):
    """The training command, in this process (as the CLI runs it: from tmp_path, the policy's URL in the environment)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)

    def run(server, *extra):
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        return main_in_process(
            capfd,
            "--skills-dir",
            skills_dir,
            "--skill",
            "git-commit",
            *DRY_RUN,
            "--judge-base-url",
            server.url,
            "--judge-api-key",
            "sk-test-planted-key",
            "--judge-timeout",
            "2",
            "--groups-per-step",
            "2",
            "--rollouts-per-group",
            "3",
            "--eval-every",
            "2",
            *extra,
        )

    return run


def steps_recorded(tmp_path):
    log = next((tmp_path / ".art").rglob("dryrun.jsonl"))
    return [json.loads(line) for line in log.read_text().splitlines()]


def policy_requests(server) -> list[dict]:
    return [r for r in server.requests if "Grading standards" not in r["messages"][0]["content"]]


@pytest.mark.slow
def test_two_steps_with_validation_then_the_same_command_resumes(tmp_path, skills_dir, policy_server, train):
    policy_server.requests.clear()
    reported_before = len(policy_server.usage_reported)
    # no answer abandoned
    run = train(policy_server, "--steps", "2", "--judge-timeout", "30")
    assert run.returncode == 0, run.stderr[-2000:]
    asked = policy_requests(policy_server)
    # ART trains only completions with logprobs
    assert asked and all(r.get("logprobs") is True for r in asked)
    assert {r["model"] for r in asked} == {"skill-git-commit@0", "skill-git-commit@1", "skill-git-commit@2"}
    assert "starting at step 0 of 2" in run.stdout
    steps = steps_recorded(tmp_path)
    assert [s["step"] for s in steps] == [1, 2]
    skill = load_skill(skills_dir / "git-commit")
    for s in steps:
        assert s["groups"] == 2 and s["rollouts"] == [3, 3]
        assert all(0.0 <= r <= 1.0 for r in s["rewards"]) and len(set(s["rewards"])) > 1
        assert s["system"] == [skill.body]
    history = [json.loads(line) for line in next((tmp_path / ".art").rglob("history.jsonl")).read_text().splitlines()]
    train_rows = [h for h in history if "train/reward" in h]
    assert all(f"train/{d}" in h for h in train_rows for d in ("format", "procedure", "correctness"))
    assert any("val/reward" in h for h in history)
    assert "step    1 | reward" in run.stdout and "val     2 | reward" in run.stdout
    best = max((h for h in history if "val/reward" in h), key=lambda h: h["val/reward"])
    assert f"best validation reward {best['val/reward']:.3f} at step {best['step']}" in run.stdout
    where = Path(re.search(r"^run state, history and checkpoints: (.+)$", run.stdout, re.M).group(1))
    assert where.is_absolute() and (where / "history.jsonl").is_file()
    # old checkpoints deleted before the backend closed, keeping the printed best and the latest
    assert {p.name for p in (where / "checkpoints").iterdir()} == {f"{best['step']:04d}", "0002"}
    assert "after close" not in run.stderr and "not deleted" not in run.stderr
    assert "sk-test-planted-key" not in run.stdout + run.stderr
    judged = [u for u in policy_server.usage_reported[reported_before:] if u["judge"]]
    # the judge tokens logged, train and val, are the ones the server reported
    for kind in ("prompt", "completion"):
        logged = sum(h.get(f"{split}/judge_{kind}_tokens", 0) for h in history for split in ("train", "val"))
        assert logged == sum(u[f"{kind}_tokens"] for u in judged) > 0
    # 'openai/judge' (a served judge) is in no price map: tokens are shown, the cost is not guessed
    assert re.search(
        r"^step +2 \|.* \| judge [\d,]+ tok, price unknown \(so far [\d,]+ tok, price unknown\) \| [\d.]+ s( \| warning: .*)?$",
        run.stdout,
        re.M,
    ), run.stdout
    # drawn at each validation, named at the end
    plot = where / "rewards.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"reward plot: {plot}" in run.stdout

    again = train(policy_server, "--steps", "3")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "starting at step 2 of 3" in again.stdout
    assert [s["step"] for s in steps_recorded(tmp_path)] == [1, 2, 3]
    # a resumed run sees the batches an uninterrupted one would: test_faults.py, the training killed mid-step


@pytest.mark.slow
def test_a_run_whose_history_ends_in_a_torn_line_resumes_and_logs_on_from_a_line_of_its_own(
    tmp_path, policy_server, train
):
    assert train(policy_server, "--steps", "1").returncode == 0
    history = next((tmp_path / ".art").rglob("history.jsonl"))
    lines = history.read_bytes().splitlines(keepends=True)
    # a crash in the middle of ART's write: half a row, no line break
    torn = lines[-1][: len(lines[-1]) // 2]
    history.write_bytes(b"".join(lines[:-1]) + torn)
    again = train(policy_server, "--steps", "2")
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-2000:]
    assert "starting at step 1 of 2" in again.stdout
    where = history.relative_to(tmp_path)
    assert [line for line in again.stderr.splitlines() if "history.jsonl" in line] == [
        f"warning: {where}:{len(lines)}: the last line was cut short (a crash?); it is skipped, and the run logs on "
        "from the next line"
    ]
    after = history.read_bytes().splitlines()
    # kept as it was, ended by a line break
    assert after[len(lines) - 1] == torn
    # every row since: a whole line of its own
    logged = [json.loads(line) for line in after[len(lines) :]]
    assert any(row["step"] == 2 and "train/reward" in row for row in logged)


@pytest.mark.slow
def test_a_run_whose_judge_always_fails_completes_with_failures_counted(tmp_path, policy_server, train):
    policy_server.always_fail_judge = "500"
    try:
        run = train(policy_server, "--steps", "1", "--judge-attempts", "2")
    finally:
        policy_server.always_fail_judge = None
    # it completed, and the exit status says something failed
    assert run.returncode == 1, run.stderr[-2000:]
    # 2 train + 2 val groups
    assert "judge failures 2 |" in run.stdout and "this run: steps 1, judge failures 4," in run.stdout
    assert all(0.0 <= r <= 1.0 for r in steps_recorded(tmp_path)[0]["rewards"])


def test_auto_backend_without_gpu_keys_or_cpu_extra_exits_2_with_guidance(tmp_path, skills_dir, monkeypatch, capsys):
    import train_skill
    from skill_rl import cpu

    # as without the [cpu] extra
    monkeypatch.setattr(cpu, "available", lambda: False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    assert train_skill.main(["--skills-dir", str(skills_dir), "--skill", "git-commit", "--judge", "none"]) == 2
    err = capsys.readouterr().err
    for way in ("--backend local", "WANDB_API_KEY", "TINKER_API_KEY", "--backend cpu", "--check", "--score", "--eval"):
        assert way in err
    assert "Traceback" not in err and not (tmp_path / ".art").exists()


def test_auto_backend_picks_the_cpu_rehearsal_only_without_gpu_and_keys(monkeypatch):
    from skill_rl import cpu
    from skill_rl.errors import Exit
    from skill_rl.training import backends

    if Path("/proc/driver/nvidia").exists():
        pytest.skip("this machine has a GPU")
    monkeypatch.setattr(cpu, "available", lambda: True)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    for key in ("WANDB_API_KEY", "TINKER_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    assert backends.pick_backend("auto")[0] == "cpu"
    monkeypatch.setenv("WANDB_API_KEY", "planted")
    assert backends.pick_backend("auto")[0] == "serverless"
    monkeypatch.delenv("WANDB_API_KEY")
    # a key for the real thing: say how to use it, no rehearsal
    monkeypatch.setenv("TINKER_API_KEY", "planted")
    with pytest.raises(Exit):
        backends.pick_backend("auto")


# in process, but the loop loads ART (torch)
@pytest.mark.slow
def test_a_step_builds_no_schema_per_rollout_and_full_collections_skip_the_imports(
    tmp_path, skills_dir, policy_server, monkeypatch, capsys
):
    """ART 0.5.23's Trajectory.messages() builds a pydantic TypeAdapter on each call: called for every rollout (the
    request, scoring, the monitor) it cost more than the rest of a step. The loop reads what it already holds; what
    is left is built once (at import, ...). And after the first step, the imported heap (ART, torch, litellm) is
    frozen out of the garbage collector's full collections, which scanned it all every few steps."""
    import gc

    import pydantic

    import train_skill

    built = []
    adapter_init = pydantic.TypeAdapter.__init__

    def counted(self, *a, **k):
        built.append(a[:1])
        adapter_init(self, *a, **k)

    monkeypatch.setattr(pydantic.TypeAdapter, "__init__", counted)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", policy_server.url)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert (
        train_skill.main(
            [
                "--skills-dir",
                str(skills_dir),
                "--skill",
                "git-commit",
                *DRY_RUN,
                "--judge-base-url",
                policy_server.url,
                "--judge-api-key",
                "sk-test",
                "--steps",
                "2",
                "--groups-per-step",
                "2",
                "--rollouts-per-group",
                "8",
                "--eval-every",
                "100",
            ]
        )
        == 0
    ), capsys.readouterr()
    # two steps, then the validation of the 2 val tasks
    rollouts = 2 * 2 * 8 + 2 * 8
    assert len(built) < rollouts / 2, f"{len(built)} TypeAdapters built for {rollouts} rollouts: {built}"
    frozen = gc.get_freeze_count()
    # as before, for the tests that follow
    gc.unfreeze()
    assert frozen > 100_000


# skill_rl.training.steps imports ART
@pytest.mark.slow
def test_the_run_summary_counts_no_variance_as_the_step_lines_do_and_names_what_did_not_happen():
    from skill_rl.training.steps import Stats, Totals

    totals = Totals(steps=2)
    # a training step's line: no variance 1
    totals.add(Stats(no_variance=1, judge_failures=1))
    # a validation: failures count, variance not
    totals.add(Stats(no_variance=3, judge_failures=2), training=False)
    assert totals.no_variance == 1 and totals.judge_failures == 3
    assert totals.line() == (
        "this run: steps 2, judge failures 3, rollout errors 0, dropped 0, no variance 1, "
        "warm start failures 0, check errors 0"
    )
    assert totals.line(judged=False, warm_start=False) == (
        "this run: steps 2, rollout errors 0, dropped 0, no variance 1, check errors 0, no judge, no warm start"
    )


# skill_rl.training.steps imports ART
@pytest.mark.slow
def test_validation_answers_cut_at_max_tokens_are_warned_about_and_whole_ones_are_not():
    import art

    from skill_rl.training.steps import cut_warning

    def answer(truncated):
        return art.Trajectory(messages_and_choices=[], reward=0.5, metrics={"truncated": float(truncated)})

    assert cut_warning([answer(False), answer(False)], 48, 10) is None
    assert cut_warning([answer(True), answer(False), answer(True)], 48, 10) == (
        "warning: 2 of 3 validation answers at step 10 were cut at --max-tokens 48 (finish_reason length): the scores "
        "above are of unfinished answers; raise --max-tokens to see whole ones"
    )
