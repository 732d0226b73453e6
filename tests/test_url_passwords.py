"""A password in an endpoint URL (`http://user:PASSWORD@host/v1`) is a secret like a key: masked in the start-up
configuration, in the run's config.yaml (the user's alone, in a run folder that is too) and in the one-line error
for a refused endpoint, however short it is."""

import pytest
from conftest import DRY_RUN

import train_skill
from skill_rl import keys
from skill_rl.commands import cli
from skill_rl.settings import configfile

# two letters: shorter than any key the environment is searched for, masked all the same
PASSWORD = "PW"
URLS = {
    "--judge-base-url": f"http://judge:{PASSWORD}@127.0.0.1:9/v1",
    "--base-url": f"https://me:{PASSWORD}@example.com/v1",
    "--teacher": f"t=gpt@http://teach:{PASSWORD}@127.0.0.1:9/v1",
    "--model": f"m=a@http://u:{PASSWORD}%40x@127.0.0.1:9/v1",
}


def masked(text: str) -> bool:
    return f":{PASSWORD}" not in text and "***@" in text


@pytest.mark.parametrize(
    "text, expected",
    [
        ("http://user:PW@host/v1", "http://user:***@host/v1"),
        # up to the authority's last '@'
        ("see https://u:p@ss@h.com:80/v1 now", "see https://u:***@h.com:80/v1 now"),
        ("http://:secret@h", "http://:***@h"),
        (
            "base@http://127.0.0.1:8000/v1 and http://127.0.0.1:8000/v1",
            "base@http://127.0.0.1:8000/v1 and http://127.0.0.1:8000/v1",
        ),
        ("user@example.com wrote: x:y", "user@example.com wrote: x:y"),
    ],
)
def test_redact_masks_the_password_of_every_url(text, expected):
    assert keys.redact(text) == expected


def test_the_start_up_configuration_and_config_yaml_mask_every_urls_password(tmp_path, capsys):
    argv = [
        "--skill",
        "git-commit",
        *DRY_RUN,
        "--judge",
        "ruler",
        "--sft",
        "--sft-from",
        "teacher",
        *[x for flag, url in URLS.items() for x in (flag, url)],
    ]
    args = train_skill.parse_args(argv)
    with keys.redacted_output():
        cli.print_config(args, None)
    printed = capsys.readouterr().out
    assert "judge_base_url" in printed and "teacher" in printed and masked(printed), printed
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    written = configfile.write(args, run)
    assert masked(written.read_text())
    assert written.stat().st_mode & 0o777 == 0o600 and run.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--model", f"m=a@ftp://u:{PASSWORD}@host/v1"),
        ("--teacher", f"t=a@ftp://u:{PASSWORD}@host/v1"),
        ("--judge-base-url", f"ftp://u:{PASSWORD}@host/v1"),
        ("--base-url", f"ftp://u:{PASSWORD}@host/v1"),
    ],
)
def test_a_refused_endpoint_is_one_line_without_its_password(capsys, flag, value):
    with pytest.raises(SystemExit) as e:
        train_skill.parse_args(["--skill", "git-commit", flag, value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and masked(err), err


def test_passwords_of_urls_in_flags_and_the_environment_are_collected_as_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://me:env-password-123@127.0.0.1:9/v1")
    args = train_skill.parse_args(["--skill", "git-commit", "--judge-base-url", "http://j:flag-password-456@h/v1"])
    known = keys.collect(*keys.url_passwords(vars(args).values()))
    try:
        assert {"env-password-123", "flag-password-456"} <= set(known)
        assert keys.redact("the server said: bad password flag-password-456") == "the server said: bad password ***"
    finally:
        keys.collect()


def test_eval_records_an_endpoint_without_its_password_and_resumes_them(tmp_path, capsys):
    from openai_server import FakeOpenAI

    out = tmp_path / "eval"
    with FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit") as server:
        url = server.url.replace("http://", f"http://me:{PASSWORD}-long-enough@")
        argv = [
            "--skill",
            "git-commit",
            "--eval",
            "--model",
            f"a=m@{url}",
            "--judge",
            "none",
            "--limit",
            "2",
            "--out",
            str(out),
        ]
        assert train_skill.main(argv) == 0
        assert train_skill.main([*argv, "--resume"]) == 0, capsys.readouterr().err
        # the resumed run found its records its own: nothing asked again
        assert len(server.requests) == 2
    printed = "".join(capsys.readouterr())
    for text in [printed, *(p.read_text() for p in out.iterdir() if p.suffix in (".json", ".jsonl", ".md"))]:
        assert f":{PASSWORD}" not in text
