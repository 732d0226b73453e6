"""`--config FILE`: a YAML file of the flags, the command line winning; the file a training run writes
runs it again; a bad file is one line and exit 2."""

import json
import os
from pathlib import Path

import pytest
from conftest import small_git_commit

import train_skill
from skill_rl import keys
from skill_rl.commands import config
from skill_rl.settings import configfile
from skill_rl.skills import find_skill, load_skill, skill_dirs

DRYRUN = "skill_rl.training.dryrun:DryRunBackend"
FLAGS = [
    "--skill",
    "git-commit",
    "--backend",
    DRYRUN,
    "--judge",
    "none",
    "--steps",
    "2",
    "--groups-per-step",
    "2",
    "--rollouts-per-group",
    "3",
    "--learning-rate",
    "2e-5",
    "--eval-every",
    "5",
    "--seed",
    "7",
    "--model",
    "a",
    "--model",
    "b=m@http://127.0.0.1:9/v1",
]
FILE = """\
skill: git-commit
backend: skill_rl.training.dryrun:DryRunBackend
judge: none
steps: 2
groups-per-step: 2          # the dashed form works too
rollouts_per_group: 3
learning_rate: 2e-5         # YAML 1.1 reads this as text; the flag's own type makes it a number
eval_every: 5
seed: 7
model: [a, "b=m@http://127.0.0.1:9/v1"]
"""


def resolved(argv):
    args = train_skill.parse_args(argv)
    return vars(config.resolve(args, load_skill(find_skill(skill_dirs(args.skills_dir), args.skill))).settings)


def without_config(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if k != "config"}


def test_a_run_from_the_file_resolves_to_the_same_settings_as_from_flags(tmp_path):
    (tmp_path / "run.yaml").write_text(FILE)
    from_file = resolved(["--config", str(tmp_path / "run.yaml")])
    assert without_config(from_file) == without_config(resolved(FLAGS))
    assert from_file["learning_rate"] == 2e-5 and from_file["model"] == ["a", "b=m@http://127.0.0.1:9/v1"]


def test_a_flag_on_the_command_line_wins_even_when_it_equals_its_default(tmp_path):
    (tmp_path / "run.yaml").write_text("skill: git-commit\neval_every: 3\nseed: 4\nmodel: [a]\nquiet: true\n")
    args = train_skill.parse_args(["--config", str(tmp_path / "run.yaml"), "--eval-every", "10", "--model", "c"])
    # argparse's default, given explicitly
    assert args.eval_every == 10
    # a repeatable flag replaces the file's list, it does not add to it
    assert args.model == ["c"]
    # the rest from the file
    assert args.seed == 4 and args.quiet is True and args.skill == "git-commit"


def test_null_leaves_the_flag_at_its_default(tmp_path):
    (tmp_path / "run.yaml").write_text("skill: git-commit\nsteps: null\nmax-tokens: ~\n")
    args = train_skill.parse_args(["--config", str(tmp_path / "run.yaml")])
    assert args.steps is None and args.max_tokens is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("stepz: 3\n", "run.yaml:1: unknown key 'stepz' (did you mean 'steps'?)"),
        ("skill: git-commit\nsteps: 0.5\n", "run.yaml:2: steps: must be a whole number of at least 0, got '0.5'"),
        ("temperature: -1\n", "run.yaml:1: temperature: must be a finite number at least 0, got '-1'"),
        ("judge: maybe\n", "run.yaml:1: judge: must be one of ruler, none, got 'maybe'"),
        ("judge_base_url: ftp://x\n", "run.yaml:1: judge_base_url: must be an http:// or https:// URL"),
        ("run_name: ../../etc\n", "run.yaml:1: run_name: must be one folder name"),
        ("quiet: 1\n", "run.yaml:1: quiet: must be true or false, got 1"),
        ("run_name: yes\n", "run.yaml:1: run_name: must be one value (quote it to pass text), got true/false"),
        ("steps: [1, 2]\n", "run.yaml:1: steps: must be one value (quote it to pass text), got a list"),
        ("check: true\n", "run.yaml:1: check: picks a command; give --check on the command line"),
        (
            "tasks-from-git: ../repo\n",
            "run.yaml:1: tasks-from-git: picks a command; give --tasks-from-git on the command line",
        ),
        ("config: other.yaml\n", "run.yaml:1: config: picks a command"),
        ("export: out\n", "run.yaml:1: export: picks a command; give --export on the command line"),
        ("push_to_hub: me/model\n", "run.yaml:1: push_to_hub: picks a command"),
        ("card-eval: evals/\n", "run.yaml:1: card-eval: picks a command"),
        ("checkpoint: latest\n", "run.yaml:1: checkpoint: picks a command"),
        ("force: true\n", "run.yaml:1: force: lets the command replace files; give --force on the command line"),
        ("out: results\n", "run.yaml:1: out: lets the command replace files"),
        ("resume: true\n", "run.yaml:1: resume: lets the command replace files"),
        ("steps: " + "[" * 5000 + "]" * 5000 + "\n", "run.yaml: nested too deeply to read"),
        ("steps: 1\n\nsteps: 2\n", "run.yaml:3: steps: given twice"),
        ("max_tokens: 5\nmax-tokens: 6\n", "run.yaml:2: max-tokens: given twice"),
        ("- steps\n", "run.yaml:1: a config file is a mapping of flag names to values"),
        ("1: 2\n", "run.yaml:1: a key is a flag's name, got '1'"),
        ("steps: [1\n", "run.yaml:2: not valid YAML: expected ',' or ']'"),
        # the checks across flags see the file's values too
        ("steps: 0\n", "argument --steps: 0 trains nothing"),
    ],
)
def test_a_bad_file_is_one_line_naming_file_line_and_key_and_exit_2(tmp_path, capsys, text, message):
    (tmp_path / "run.yaml").write_text(text)
    with pytest.raises(SystemExit) as e:
        train_skill.main(["--config", str(tmp_path / "run.yaml")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_an_unreadable_config_is_one_line(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_bytes(b"steps: \xff\n")
    for path in (tmp_path / "missing.yaml", tmp_path, tmp_path / "bad.yaml"):
        with pytest.raises(SystemExit) as e:
            train_skill.main(["--config", str(path)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.startswith(f"error: --config {path}: cannot read it") and err.count("\n") == 1


def test_a_config_that_is_a_device_a_fifo_or_too_large_is_refused_without_reading_it(tmp_path, capsys):
    # no writer: opening it for reading would wait for ever
    os.mkfifo(tmp_path / "fifo.yaml")
    with open(tmp_path / "big.yaml", "wb") as f:
        # sparse: 3 GB of NULs that are never read
        f.truncate(3_000_000_000)
    for path, why in (
        ("/dev/zero", "not a regular file"),
        (tmp_path / "fifo.yaml", "not a regular file"),
        (tmp_path / "big.yaml", f"larger than {configfile.MAX_BYTES:,} bytes"),
    ):
        with pytest.raises(SystemExit) as e:
            train_skill.main(["--config", str(path)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err == f"error: --config {path}: cannot read it ({why}" + err.split(why, 1)[1], err
        assert err.count("\n") == 1


def test_a_replayed_config_of_a_run_never_exports_uploads_or_overwrites(tmp_path):
    written = configfile.write(
        config.Settings(
            steps=1, export=Path("out"), push_to_hub="me/x", force=True, out=Path("o"), resume=False, checkpoint=3
        ),
        tmp_path,
    )
    import yaml

    text = written.read_text()
    kept = yaml.safe_load(text)
    assert kept["steps"] == 1 and not set(kept) & {"export", "push_to_hub", "force", "out", "resume", "checkpoint"}
    assert "me/x" not in text
    # what older runs wrote
    (tmp_path / "old.yaml").write_text("steps: 1\nforce: false\nresume: false\nout: null\n")
    args = train_skill.parse_args(["--config", str(tmp_path / "old.yaml"), "--skill", "git-commit"])
    assert args.steps == 1 and args.force is False and args.resume is False and args.export is None


def test_the_written_config_reads_back_to_the_same_settings_and_holds_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_API_KEY", "sk-env-judge-key-0123456789")
    flags = (
        FLAGS[: FLAGS.index("--judge")]
        + FLAGS[FLAGS.index("--judge") + 2 :]
        + [
            "--judge-base-url",
            "http://127.0.0.1:9/v1",
            "--judge-api-key",
            "sk-planted-judge-key-0123456789",
            "--api-key",
            "sk-planted-eval-key-0123456789",
            "--sft",
        ]
    )
    first = resolved(flags)
    keys.collect("sk-planted-judge-key-0123456789", "sk-planted-eval-key-0123456789")
    written = configfile.write(config.Settings(**first), tmp_path)
    text = written.read_text()
    assert written == tmp_path / "config.yaml" and "sk-planted" not in text and "sk-env" not in text
    assert "api_key" not in text and "check:" not in text and "score:" not in text
    # a key comes from the environment
    monkeypatch.setenv("JUDGE_API_KEY", "sk-planted-judge-key-0123456789")
    again = resolved(["--config", str(written), "--api-key", "sk-planted-eval-key-0123456789"])
    assert without_config(again) == {**without_config(first), "judge_api_key": None}


def test_a_config_that_cannot_be_written_is_a_warning_not_a_crash(tmp_path, capsys):
    (tmp_path / "config.yaml").mkdir()
    assert configfile.write(config.Settings(steps=1), tmp_path) is None
    err = capsys.readouterr().err
    assert (
        err.startswith(f"warning: {tmp_path / 'config.yaml'}: the run's settings not written") and err.count("\n") == 1
    )


@pytest.mark.slow
def test_a_run_from_its_written_config_takes_the_same_first_step(tmp_path, monkeypatch, capsys):
    """Training in-process on the stand-in backend: flags, then the same from a file, then the run folder's
    config.yaml alone, each in its own folder: the same resolved settings, the same first step."""
    from openai_server import FakeOpenAI

    skills = small_git_commit(tmp_path, train=6, val=2)
    flags = ["--skills-dir", str(skills), *FLAGS[: FLAGS.index("--model")], "--steps", "1", "--quiet"]

    def run(where: Path, argv) -> tuple[dict, dict]:
        where.mkdir()
        monkeypatch.chdir(where)
        assert train_skill.main(argv) == 0, capsys.readouterr()
        capsys.readouterr()
        written = next(where.joinpath(".art").rglob("config.yaml"))
        step = json.loads(next(where.joinpath(".art").rglob("dryrun.jsonl")).read_text().splitlines()[0])
        # the answers' order is the server's
        return written, {k: v for k, v in step.items() if k != "rewards"}

    answers = iter(["fix: raise the limit", "Fixed the limit.", "feat(app): change the limit"] * 1000)
    with FakeOpenAI(policy_fn=lambda request: next(answers)) as server:
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        monkeypatch.delenv("WANDB_API_KEY", raising=False)
        by_flags, step = run(tmp_path / "flags", flags)
        file = FILE.replace("steps: 2", "steps: 1").replace('model: [a, "b=m@http://127.0.0.1:9/v1"]', "quiet: true")
        (tmp_path / "run.yaml").write_text(f"skills_dir: {skills}\n{file}")
        by_file, step_from_file = run(tmp_path / "file", ["--config", str(tmp_path / "run.yaml")])
        again, step_again = run(tmp_path / "again", ["--config", str(by_flags)])
    assert step == step_from_file == step_again and step["step"] == 1 and step["learning_rate"] == 2e-5
    assert by_flags.read_text() == by_file.read_text() == again.read_text()
    assert "steps: 1" in by_flags.read_text() and f"skills_dir: {skills}" in by_flags.read_text()


def test_a_rehearsal_that_chose_checks_only_for_itself_runs_again_from_its_config(tmp_path, monkeypatch):
    """--backend cpu picks --judge none by default and only notes that the checks pay mostly for form; replayed,
    `judge: none` is said explicitly, which is refused unless the file also says what the run did."""
    from skill_rl import cpu

    if not cpu.available():
        pytest.skip("the [cpu] extra and its model are not installed here")
    monkeypatch.chdir(tmp_path)
    for k in ("JUDGE_BASE_URL", "JUDGE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(k, raising=False)
    assert train_skill.main(["--skills-dir", "sk", "--init", "demo"]) == 0
    # a markdown skill: no checks.py, no `expect`
    (tmp_path / "sk" / "demo" / "checks.py").unlink()
    tasks = tmp_path / "sk" / "demo" / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({k: v for k, v in json.loads(line).items() if k != "expect"}) + "\n"
            for line in tasks.read_text().splitlines()
        )
    )
    first = resolved(["--skills-dir", "sk", "--skill", "demo", "--backend", "cpu"])
    assert first["judge"] == "none" and first["format_only_reward"] is True
    written = configfile.write(config.Settings(**first), tmp_path)
    assert without_config(resolved(["--config", str(written)])) == without_config(first)
