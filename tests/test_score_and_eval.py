"""`--score` and `--eval` end to end: real files, real HTTP to local OpenAI-compatible servers."""

import json
from pathlib import Path

import pytest
from conftest import score_flags
from openai_server import FakeOpenAI, candidates

from skill_rl.skills import load_skill
from train_skill import main

ROOT = Path(__file__).resolve().parent.parent
DIFF = "diff --git a/app/x.py b/app/x.py\n--- a/app/x.py\n+++ b/app/x.py\n@@ -1,1 +1,1 @@\n-LIMIT = 1\n+LIMIT = 2\n"


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_score_offline_writes_one_record_per_output_and_reports_bad_lines(tmp_path, capsys):
    src = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"input": DIFF, "outputs": ["fix: raise the limit", "Raised it."]},
            "{not json",
            {"input": DIFF, "output": "feat!: raise the limit"},
            {"task_id": "no-such-task", "output": "fix: x"},
            {"input": DIFF},
        ],
    )
    code = main(["--skill", "git-commit", "--score", str(src), "--judge", "none", "--out", str(tmp_path / "out.jsonl")])
    err = capsys.readouterr().err
    # bad lines make the exit code say so; the good ones are still scored
    assert code == 1
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted((r["line"], r["index"]) for r in records) == [(1, 0), (1, 1), (3, 0)]
    by_pos = {(r["line"], r["index"]): r for r in records}
    assert set(by_pos[(1, 0)]) == {
        "skill",
        "source",
        "line",
        "index",
        "task_id",
        "format",
        "procedure",
        "correctness",
        "reward",
        "repeated",
        "cut",
        "checks",
        "check_errors",
        "judge",
        "judged",
    }
    assert by_pos[(1, 0)]["checks"]["conventional"] is True and by_pos[(1, 1)]["format"] == 0.0
    # offline: not judged
    assert by_pos[(1, 0)]["procedure"] is None and by_pos[(1, 0)]["judge"] is None
    assert by_pos[(1, 0)]["reward"] > by_pos[(1, 1)]["reward"]
    assert f"{src}:2: " in err and f"{src}:4: field 'task_id' 'no-such-task'" in err
    assert f"{src}:5: give exactly one of 'output' and 'outputs'" in err
    assert "offline" in err


# the judge is ART's RULER (torch)
@pytest.mark.slow
def test_score_with_a_judge_behind_base_url_fills_judged_dimensions(tmp_path, capsys, server):
    src = write_jsonl(tmp_path / "in.jsonl", [{"input": DIFF, "outputs": ["fix: raise the limit", "fix: raise it"]}])
    code = main(
        [
            "--skill",
            "git-commit",
            "--score",
            str(src),
            "--judge-base-url",
            server.url,
            "--judge-api-key",
            "sk-planted",
            "--out",
            str(tmp_path / "out.jsonl"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert all(r["judged"] and r["procedure"] is not None and r["judge"] for r in records)
    assert server.judge_calls == 2
    err = capsys.readouterr().err
    assert "sk-planted" not in (tmp_path / "out.jsonl").read_text() + err
    # the summary's token counts are the server's
    prompt, completion = server.reported(judge=True)
    assert f"2 response(s), {prompt:,} prompt + {completion:,} completion tokens; cost unknown" in err


@pytest.mark.parametrize("terminal,quiet,drawn", [(True, False, True), (True, True, False), (False, False, False)])
def test_score_draws_a_progress_bar_only_on_a_terminal_and_not_with_quiet(
    tmp_path, capsys, monkeypatch, terminal, quiet, drawn
):
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    if terminal:
        # rich then treats the captured stderr as a terminal
        monkeypatch.setenv("FORCE_COLOR", "1")
    else:
        # captured output is not a terminal: a pipe
        monkeypatch.delenv("FORCE_COLOR", raising=False)
    src = write_jsonl(tmp_path / "in.jsonl", [{"input": DIFF, "output": "fix: raise the limit"}] * 3)
    code = main([*score_flags(src, tmp_path / "out.jsonl"), *(["--quiet"] if quiet else [])])
    err = capsys.readouterr().err
    assert code == 0
    assert ("scoring in.jsonl" in err and "3/3" in err) == drawn, err


GOOD = {
    "git-commit": "fix(app): raise the limit to 2\n\nThe old limit dropped valid requests.",
    "code-review": "## Summary\nRaises the limit.\n\n## Findings\nNone.\n\n## Verdict\napprove",
}


def quality_judge(texts):
    """A judge that prefers longer, multi-line answers: enough to tell the two fake models apart."""
    return [min(1.0, 0.2 + len(t) / 200 + 0.3 * ("\n" in t)) for t in texts]


@pytest.fixture
def two_models():
    good = FakeOpenAI(
        policy_fn=lambda r: GOOD[
            "code-review" if "review" in r["messages"][0]["content"][:200].lower() else "git-commit"
        ],
        judge_fn=quality_judge,
    )
    bad = FakeOpenAI(policy_fn=lambda r: "I changed some code.")
    with good, bad:
        yield good, bad


# the judge is ART's RULER (torch)
@pytest.mark.slow
def test_eval_ranks_the_better_model_first_and_writes_every_file(tmp_path, capsys, two_models):
    good, bad = two_models
    out = tmp_path / "eval"
    code = main(
        [
            "--skill",
            "git-commit",
            "--eval",
            "--model",
            f"good=m1@{good.url}",
            "--model",
            f"bad=m2@{bad.url}",
            "--judge-base-url",
            good.url,
            "--judge-api-key",
            "k",
            "--limit",
            "4",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr()
    result = json.loads((out / "results.json").read_text())
    rows = {r["model"]: r for r in result["models"]}
    for col in ("format", "procedure", "correctness", "overall"):
        assert rows["good"][col] > rows["bad"][col], col
    assert rows["good"]["checks"]["conventional"] == 1.0 and rows["bad"]["checks"]["conventional"] == 0.0
    assert rows["good"]["n"] == 4 and len(rows["good"]["ci95"]) == 2
    # one group per task holds both models: one call per judged dimension
    assert good.judge_calls == 4 * 2
    assert {
        "task_id",
        "model",
        "sample",
        "output",
        "format",
        "procedure",
        "correctness",
        "reward",
        "checks",
        "judge",
    } <= set(result["records"][0])
    assert "| good |" in (out / "results.md").read_text()
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# the judge is ART's RULER (torch)
@pytest.mark.slow
def test_eval_baseline_scores_each_model_without_the_skill_in_the_same_judge_groups(tmp_path, capsys, two_models):
    good, bad = two_models
    skill_body = "## Procedure"
    good.policy_fn = lambda r: GOOD["git-commit"] if skill_body in r["messages"][0]["content"] else "Raised the limit."
    out = tmp_path / "eval"
    code = main(
        [
            "--skill",
            "git-commit",
            "--eval",
            "--baseline",
            "--model",
            f"good=m1@{good.url}",
            "--model",
            f"bad=m2@{bad.url}",
            "--judge-base-url",
            good.url,
            "--judge-api-key",
            "k",
            "--limit",
            "3",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed
    result = json.loads((out / "results.json").read_text())
    rows = {r["model"]: r for r in result["models"]}
    assert list(rows) == ["good", "good (no skill)", "bad", "bad (no skill)"]
    assert rows["good (no skill)"]["baseline"] and not rows["good"]["baseline"]
    assert rows["good"]["overall"] > rows["good (no skill)"]["overall"]
    assert result["uplift"]["good"]["overall"] == pytest.approx(
        rows["good"]["overall"] - rows["good (no skill)"]["overall"], abs=1e-6
    )
    descriptions = [
        r
        for r in good.requests
        if r["messages"][0]["content"] == load_skill(ROOT / "skills/git-commit", with_tasks=False).description
    ]
    # the no-skill arm saw the description only, once per task
    assert len(descriptions) == 3
    # both bad arms answer alike: judged once
    arms = {GOOD["git-commit"], "Raised the limit.", "I changed some code."}
    # one group per task
    assert good.judge_calls == 3 * 2 and all(set(candidates(p)) == arms for p in good.judge_prompts)
    assert "| good (no skill) |" in (out / "results.md").read_text() and "skill uplift, good: overall +" in printed.out
    prompt, completion = good.reported(judge=True)
    assert result["judge_usage"]["prompt_tokens"] == prompt and result["judge_usage"]["completion_tokens"] == completion
    # not a terminal: no progress bar
    assert "evaluating" not in printed.err


def test_eval_keeps_the_other_models_when_one_endpoint_is_down(tmp_path, capsys, two_models):
    good, _ = two_models
    out = tmp_path / "eval"
    code = main(
        [
            "--skill",
            "git-commit",
            "--eval",
            "--model",
            f"good=m1@{good.url}",
            "--model",
            "down=m3@http://127.0.0.1:9/v1",
            "--judge",
            "none",
            "--limit",
            "3",
            "--out",
            str(out),
        ]
    )
    assert code == 1
    rows = {r["model"]: r for r in json.loads((out / "results.json").read_text())["models"]}
    assert rows["good"]["n"] == 3 and rows["good"]["format"] == 1.0
    assert rows["down"]["n"] == 0 and rows["down"]["failures"] == 3
    assert "down: " in capsys.readouterr().err


def test_eval_backend_cpu_without_a_run_exits_2_naming_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--skill", "git-commit", "--eval", "--backend", "cpu", "--run-name", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: --eval --backend cpu: no run with checkpoints at .art/skill-rl/models/nope (from --project "
        "skill-rl, run nope); train it first, or pass the --run-name (and --project) the training used"
    ), err


@pytest.mark.parametrize(
    "line, field",
    [
        ("max_tokens: -3", "max_tokens"),
        ("temperature: hot", "temperature"),
        ("max_tokens: true", "max_tokens"),
        ("base_model: [1]", "base_model"),
    ],
)
def test_eval_backend_cpu_refuses_a_runs_config_with_a_bad_generation_setting_in_one_line(
    tmp_path, capsys, monkeypatch, line, field
):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / ".art" / "skill-rl" / "models" / "r"
    (run / "checkpoints" / "0001").mkdir(parents=True)
    (run / "config.yaml").write_text(f"skill: git-commit\n{line}\n")
    assert main(["--skill", "git-commit", "--eval", "--backend", "cpu", "--run-name", "r"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(f"error: .art/skill-rl/models/r/config.yaml: field '{field}' must be a ") and "\n" not in err
    ), err


def test_checkpoint_without_export_or_a_cpu_eval_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["--skill", "git-commit", "--score", "x.jsonl", "--checkpoint", "best"])
    assert (
        stop.value.code == 2
        and "--checkpoint goes with --export DIR or --eval --backend cpu" in capsys.readouterr().err
    )
    assert main(["--skill", "git-commit", "--eval", "--model", "m@http://127.0.0.1:9/v1", "--checkpoint", "best"]) == 2
    assert "--checkpoint goes with --export DIR, or with --eval --backend cpu (no --model)" in capsys.readouterr().err


def test_the_wilson_interval_stays_inside_0_1_and_narrows_with_more_episodes():
    from skill_rl.scoring.report import wilson

    assert wilson(0, 0) is None
    low, high = wilson(0, 10)
    assert low == 0.0 and 0.27 < high < 0.28
    low, high = wilson(5, 10)
    assert abs(low - 0.2366) < 1e-3 and abs(high - 0.7634) < 1e-3
    assert wilson(10, 10)[1] == 1.0 and 0.72 < wilson(10, 10)[0] < 0.73
    wide, narrow = wilson(12, 24), wilson(48, 96)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_gates_passed_counts_outputs_failing_no_gate_and_a_gate_that_did_not_apply_fails_nothing():
    from types import SimpleNamespace

    from skill_rl.scoring.report import gates_passed

    def fn(name, gate):
        f = lambda output, task: True  # noqa: E731
        f.__name__, f.gate = name, gate
        return f

    scorer = SimpleNamespace(fns=[fn("one_commit", True), fn("conventional", True), fn("wrapped", False)])
    metrics = [
        {"check/one_commit": 1.0, "check/conventional": 1.0, "check/wrapped": 0.0},
        {"check/one_commit": 0.0, "check/conventional": 1.0},
        {"check/one_commit": 1.0, "check/conventional": 0.0},
        {"check/one_commit": 1.0},
    ]
    assert gates_passed(metrics, scorer) == (["one_commit", "conventional"], 2)
