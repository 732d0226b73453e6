"""The environment a command starts in: `.env` where the user is, and the judge's provider checked before
anything is spent."""

import json

import pytest
from conftest import DRY_RUN

from train_skill import main

DIFF = "diff --git a/app/x.py b/app/x.py\n--- a/app/x.py\n+++ b/app/x.py\n@@ -1,1 +1,1 @@\n-LIMIT = 1\n+LIMIT = 2\n"
JUDGE_VARS = ("JUDGE_BASE_URL", "JUDGE_API_KEY", "JUDGE_MODEL")


# the judge is ART's RULER (torch)
@pytest.mark.slow
def test_a_dotenv_in_the_working_directory_configures_the_judge(tmp_path, monkeypatch, capsys, server):
    # unset for the test, and put back as they were afterwards (load_dotenv sets them)
    for var in JUDGE_VARS:
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(f"JUDGE_BASE_URL={server.url}\nJUDGE_API_KEY=sk-from-dotenv\n")
    (tmp_path / "in.jsonl").write_text(
        json.dumps({"input": DIFF, "outputs": ["fix: raise the limit", "fix: x"]}) + "\n"
    )
    code = main(["--skill", "git-commit", "--score", "in.jsonl", "--out", "out.jsonl"])
    assert code == 0, capsys.readouterr().err
    # the judge named only in ./.env was asked
    assert server.judge_calls == 2
    assert "sk-from-dotenv" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "model,needs",
    [
        ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),
        ("gemini/gemini-2.0-flash", "GEMINI_API_KEY"),
        ("ollama/llama3", "OLLAMA_API_BASE"),
    ],
)
def test_a_judge_of_another_provider_without_its_key_exits_2_before_any_request(
    tmp_path, monkeypatch, capsys, server, model, needs
):
    for var in (*JUDGE_VARS, "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OLLAMA_API_BASE"):
        # blank, as in a copied .env.example: counts as missing, and no .env overrides it
        monkeypatch.setenv(var, "")
    monkeypatch.chdir(tmp_path)
    code = main(
        [
            "--skill",
            "git-commit",
            "--eval",
            "--model",
            f"m@{server.url}",
            "--judge-model",
            model,
            "--limit",
            "1",
            "--out",
            "eval",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: judge {model} needs ") and needs in err and "--judge none" in err
    # nothing generated, nothing judged
    assert server.requests == [] and not (tmp_path / "eval").exists()


def test_training_with_a_judge_key_missing_stops_before_the_model_is_registered(tmp_path, monkeypatch, capsys):
    for var in (*JUDGE_VARS, "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(var, "")
    monkeypatch.chdir(tmp_path)
    code = main(["--skill", "git-commit", *DRY_RUN, "--judge-model", "anthropic/claude-3-5-haiku-latest"])
    assert code == 2 and "ANTHROPIC_API_KEY" in capsys.readouterr().err
    # no run was started, so none trains on checks only
    assert not (tmp_path / ".art").exists()


def test_an_unknown_provider_is_named_up_front(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["--skill", "git-commit", "--score", "missing.jsonl", "--judge-model", "nosuchprovider/model"])
    out = capsys.readouterr()
    assert code == 2 and "judge nosuchprovider/model: LiteLLM does not know this provider" in out.err
    # LiteLLM's banner is kept off the terminal
    assert "Provider List" not in out.out + out.err
