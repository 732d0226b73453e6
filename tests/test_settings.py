"""skill_rl/settings/__init__.py: the one declaration of every flag. The parser it generates lists exactly its fields, the
defaults its help texts state are its own, docs/cli.md's tables are what it prints and say what `--help` says,
and config.command and train_skill.COMMANDS pick and run every command from resolved settings."""

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import train_skill
from skill_rl import cpu, settings
from skill_rl.commands import config
from skill_rl.settings import PRESETS, Settings
from skill_rl.skills import find_skill, load_skill, skill_dirs

ROOT = Path(__file__).resolve().parent.parent
FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


def help_text(capsys, monkeypatch) -> str:
    """What `--help` prints, one line per flag's help (a terminal wide enough that argparse wraps nothing)."""
    monkeypatch.setenv("COLUMNS", "100000")
    with pytest.raises(SystemExit):
        train_skill.parse_args(["--help"])
    return capsys.readouterr().out


def test_the_settings_declare_every_flag_help_lists_and_nothing_else(capsys, monkeypatch):
    listed = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", help_text(capsys, monkeypatch))) - {"--help"}
    actions = [a for a in settings.parser()._actions if a.option_strings and a.dest != "help"]
    assert listed == {name for a in actions for name in a.option_strings}
    assert [a.dest for a in actions] == list(FIELDS)


def test_no_flags_give_the_declared_defaults():
    assert Settings.from_flags([]) == Settings()
    # a fresh list each
    assert Settings().model == [] and Settings().model is not Settings().model


def test_settings_are_frozen_and_a_change_is_a_copy():
    s = Settings.from_flags(["--skill", "git-commit", "--steps", "5"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.steps = 3
    assert dataclasses.replace(s, steps=3).steps == 3 and s.steps == 5


@pytest.mark.parametrize(
    "name",
    sorted(n for n, f in FIELDS.items() if "default" in f.metadata["help"] and PRESETS.get(n, f.default) is not None),
)
def test_every_default_a_help_text_states_is_the_fields_own(name):
    """`(default 50; cpu 10)` in a help text is the field's default or preset, and cpu.DEFAULTS' value: written
    once, in the field, and checked here rather than kept equal by care."""
    f, text = FIELDS[name], FIELDS[name].metadata["help"]
    declared = PRESETS.get(name, f.default)
    for stated in re.findall(r"\bdefault ([0-9][0-9.e+-]*[0-9])", text):
        assert float(stated) == declared, (name, stated, declared)
    for stated in re.findall(r"(?<!on )\bcpu ([0-9][0-9.e+-]*[0-9]|[0-9])", text):
        assert float(stated) == cpu.DEFAULTS[name], (name, stated)
    for stated in re.findall(r"\ba skill with tools on cpu ([0-9]+)", text):
        assert float(stated) == cpu.TOOL_DEFAULTS[name], (name, stated)


def test_the_presets_fill_only_what_was_left_out():
    given = Settings.from_flags(["--skill", "git-commit", "--steps", "3"])
    gpu, rehearsal = config.presets(given, "local"), config.presets(given, "cpu")
    assert gpu.steps == rehearsal.steps == 3 and given.max_tokens is None
    assert gpu.max_tokens == PRESETS["max_tokens"] and rehearsal.max_tokens == cpu.DEFAULTS["max_tokens"]
    assert rehearsal.limit == cpu.DEFAULTS["limit"] and gpu.limit is None
    # a skill with tools: its own CPU defaults over the rehearsal's, the flags given kept
    agent = load_skill(find_skill(skill_dirs(None), "git-commit-agent"))
    acting = config.presets(given, "cpu", agent)
    assert acting.steps == 3 and acting.max_tokens == cpu.TOOL_DEFAULTS["max_tokens"]
    assert (acting.max_turns, acting.sft_epochs) == (cpu.TOOL_DEFAULTS["max_turns"], cpu.TOOL_DEFAULTS["sft_epochs"])
    assert (rehearsal.max_turns, rehearsal.sft_epochs) == (gpu.max_turns, gpu.sft_epochs) == (6, 1)
    assert config.presets(given, "local", agent).max_tokens == PRESETS["max_tokens"]


def test_cli_md_flag_tables_are_what_the_generator_prints(tmp_path, capsys):
    from cogapp import Cog

    assert Cog().main(["cog", "--check", str(ROOT / "docs/cli.md")]) == 0, capsys.readouterr()
    stale = tmp_path / "cli.md"
    stale.write_text(
        (ROOT / "docs/cli.md").read_text().replace("| `--steps STEPS` | training", "| `--steps N` | training")
    )
    # a hand edit of a generated row is caught
    assert Cog().main(["cog", "--check", str(stale)]) == 5


def test_every_generated_row_says_what_help_prints(capsys, monkeypatch):
    lines = [line.strip() for line in help_text(capsys, monkeypatch).splitlines()]
    rows = re.findall(r"^\| `(--[^`]+)` \| (.*?) \| [^|]*\|$", settings.reference(), re.M)
    assert len(rows) == len(FIELDS)
    for flag, meaning in rows:
        flag, text = (s.replace("\\|", "|") for s in (flag, meaning))
        text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
        assert any(
            line == text or re.fullmatch(re.escape(flag) + r" {2,}" + re.escape(text), line) for line in lines
        ), flag


@pytest.mark.parametrize(
    "argv, command",
    [
        (["--list", "--check"], "list"),
        (["--init", "x", "--skill", "y"], "init"),
        (["--skill", "x", "--tasks-from-git", "r", "--check"], "tasks_from_git"),
        (["--skill", "x", "--check"], "check"),
        (["--skill", "x", "--export", "d", "--score", "f"], "export"),
        (["--skill", "x", "--score", "f", "--eval"], "score"),
        (["--skill", "x", "--audit", "--eval"], "audit"),
        (["--skill", "x", "--eval"], "eval"),
        (["--skill", "x"], "train"),
    ],
)
def test_a_command_line_picks_one_command_first_match_wins(argv, command):
    assert config.command(Settings.from_flags(argv)) == command


def test_every_command_is_run_from_the_table_with_the_resolved_run():
    assert set(train_skill.COMMANDS) == {*config.COMMANDS, "train"}
    tree = ast.parse(Path(train_skill.__file__).read_text())
    run = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run")
    calls = [ast.unparse(c.func) for c in ast.walk(run) if isinstance(c, ast.Call)]
    assert "COMMANDS[setup.command]" in calls and "config.resolve" in calls


def test_no_reader_of_settings_guesses_a_default_with_getattr():
    """A field always exists on Settings: `getattr(s, "x", default)` would hide a typo as a default."""
    guessing = re.compile(r"getattr\((s|args|settings|setup\.settings|run\.settings), [^)]*,")
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in [ROOT / "train_skill.py", *sorted((ROOT / "skill_rl").rglob("*.py"))]
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if guessing.search(line)
    ]
    assert found == []


def test_a_cpu_eval_takes_the_runs_own_settings_only_where_the_flags_leave_them_out(tmp_path, monkeypatch):
    pytest.importorskip("safetensors", reason="the checkpoint's adapter is read with the [cpu] extra's safetensors")
    from skill_rl.skills import find_skill, load_skill, skill_dirs

    skill = load_skill(find_skill(skill_dirs(None), "git-commit"))
    monkeypatch.chdir(tmp_path)
    checkpoint = Path(".art/skill-rl/models/r/checkpoints/0002")
    checkpoint.mkdir(parents=True)
    # an empty adapter
    (checkpoint / "adapter_model.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")
    (checkpoint.parent.parent / "config.yaml").write_text("max_tokens: 8\ntemperature: 0.5\nbase_model: some/model\n")
    given = Settings.from_flags(
        [
            "--skill",
            "git-commit",
            "--eval",
            "--backend",
            "cpu",
            "--run-name",
            "r",
            "--max-tokens",
            "16",
            "--judge",
            "none",
        ]
    )
    run = config.resolve(given, skill)
    assert run.command == "eval" and run.checkpoint == (checkpoint, "step 2, the latest")
    assert (run.settings.max_tokens, run.settings.temperature, run.settings.base_model) == (16, 0.5, "some/model")
    # the parsed flags stay as parsed
    assert given.temperature is None and given.base_model is None
