"""SKILL.md and the skills folder are hostile input: YAML bombs, tags, complex keys, pathological markdown,
and the commands that list, find and create skills."""

from pathlib import Path

import pytest
from conftest import skill_folder

from skill_rl.skills import load_skill
from train_skill import main

ROOT = Path(__file__).resolve().parent.parent
GOOD_MD = (ROOT / "tests" / "test_skills.py").read_text().split('GOOD_MD = """', 1)[1].split('"""', 1)[0]
BODY = GOOD_MD.split("---\n", 2)[2]
TASKS = '{"id": "a", "input": "What is 2+2?"}\n'
# hang guards: YAML bombs, checks.py that never returns, quadratic markdown
pytestmark = pytest.mark.timeout(60)
LAUGHS = "".join([f"l{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "x"] * 9) + "]\n" for i in range(9)])


def make(where: Path, front: str, body: str = BODY, name: str = "demo", checks: str | None = None) -> Path:
    folder = skill_folder(where, name, md=f"---\n{front}---\n{body}", tasks=TASKS, checks=checks)
    return folder


def lint(tmp_path, capsys, name="demo"):
    code = main(["--skills-dir", str(tmp_path), "--skill", name, "--check"])
    out = capsys.readouterr()
    return code, out.err.strip().splitlines()


# ------------------------------------------------------------------ YAML


HOSTILE_YAML = {
    "alias bomb as a field": ("name: demo\n" + LAUGHS + "description: *a8\n", "aliases"),
    "alias bomb in metadata": ("name: demo\ndescription: d\n" + LAUGHS + "metadata: {weight-format: *a8}\n", "aliases"),
    "recursive alias": ("name: demo\ndescription: d\nlicense: &r [*r]\n", "aliases"),
    "python name tag": ("name: demo\ndescription: !!python/name:os.system\n", "tag"),
    "python apply tag": ("name: demo\ndescription: !!python/object/apply:os.system [true]\n", "tag"),
    "local tag": ("name: demo\ndescription: !shout hello\n", "tag"),
    "sequence as a key": ("name: demo\ndescription: d\n? [a, b]\n: c\n", "key"),
    "mapping as a key": ("name: demo\ndescription: d\n? {a: 1}\n: c\n", "key"),
    "sequence as a metadata key": ("name: demo\ndescription: d\nmetadata: {[a]: b}\n", "key"),
    "binary value": ("name: demo\ndescription: !!binary aGVsbG8=\n", "string"),
    "set as metadata": ("name: demo\ndescription: d\nmetadata: !!set {a, b}\n", "dictionary"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_YAML))
def test_hostile_frontmatter_gets_one_line_and_exit_2_quickly(tmp_path, capsys, monkeypatch, case):
    front, word = HOSTILE_YAML[case]
    monkeypatch.chdir(tmp_path)
    make(tmp_path, front)
    code, err = lint(tmp_path, capsys)
    assert code == 2
    assert err and all(line.startswith("demo/SKILL.md:") and len(line) < 300 for line in err), err
    assert any(word in line for line in err), err


def test_aliases_within_bounds_get_the_conformance_message_not_a_bound(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make(tmp_path, "name: demo\ndescription: &d Answer a question in one line.\nlicense: *d\n")
    code, err = lint(tmp_path, capsys)
    assert code == 2 and all("skills-ref" in line for line in err), err


def test_one_bad_skill_never_hides_the_good_ones_from_list(tmp_path, capsys):
    make(tmp_path, "name: good\ndescription: The good one.\n", name="good")
    make(tmp_path, "name: keys\ndescription: d\n? [a]\n: b\n", name="keys")
    make(tmp_path, "name: bomb\n" + LAUGHS + "description: *a8\n", name="bomb")
    make(tmp_path, "name: exits\ndescription: Its checks.py exits.\n", name="exits", checks="raise SystemExit(3)\n")
    make(
        tmp_path,
        "name: loops\ndescription: Its checks.py never returns.\n",
        name="loops",
        checks="while True:\n    pass\n",
    )
    code = main(["--skills-dir", str(tmp_path), "--list"])
    out = capsys.readouterr().out
    assert code == 0
    for name in ("good", "keys", "bomb", "exits", "loops"):
        assert name in out
    assert "The good one." in out and "Its checks.py exits." in out and "invalid" in out


# ------------------------------------------------------------------ markdown


def test_100000_headings_load_in_linear_time_and_are_not_misreported(tmp_path, capsys):
    make(tmp_path, "name: demo\ndescription: d\n", BODY + "".join(f"### note {i}\n" for i in range(100_000)))
    # minutes before: each heading looked at every later one (the timeout above)
    skill = load_skill(tmp_path / "demo")
    assert skill.steps == ("Read the question.", "Answer it.") and len(skill.sections) > 100_000


def test_nesting_too_deep_to_parse_is_reported_as_such_not_as_a_missing_section(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    deep = "".join("  " * i + "- x\n" for i in range(60)) + "\n"
    make(tmp_path, "name: demo\ndescription: d\n", "# Demo\n\n" + deep + BODY.split("# Demo\n", 1)[1])
    code, err = lint(tmp_path, capsys)
    assert code == 2
    assert err == [
        "demo/SKILL.md:55: markdown nested too deeply to read (lists or quotes inside each other); "
        "the rest of the file cannot be read: flatten it"
    ], err


def test_a_100000_deep_quote_is_reported_not_a_crash(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make(tmp_path, "name: demo\ndescription: d\n", ">" * 100_000 + " x\n\n" + BODY)
    code, err = lint(tmp_path, capsys)
    assert code == 2 and len(err) == 1 and "demo/SKILL.md:5: markdown nested too deeply" in err[0], err


# ------------------------------------------------------------------ listing, finding and creating skills


@pytest.mark.parametrize("what", ["missing", "a file"])
def test_list_on_a_skills_dir_that_is_not_a_folder_exits_2(tmp_path, capsys, what):
    where = tmp_path / "nope"
    if what == "a file":
        where.write_text("not a folder\n")
    code = main(["--skills-dir", str(where), "--list"])
    out, err = capsys.readouterr()
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and str(where) in err, err


def test_an_unknown_skill_suggests_close_names_not_every_name(tmp_path, capsys):
    for name in ("git-commit", "code-review", "release-notes", "changelog"):
        make(tmp_path, f"name: {name}\ndescription: d\n", name=name)
    code = main(["--skills-dir", str(tmp_path), "--skill", "git-comit", "--check"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "did you mean 'git-commit'?" in err[0] and "release-notes" not in err[0], err
    code = main(["--skills-dir", str(tmp_path), "--skill", "zzz", "--check"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "--list" in err[0] and "release-notes" not in err[0], err


@pytest.mark.parametrize("name", ["", "demo\n", "a/b", "../escape", "Demo", "-x"])
def test_init_and_skill_refuse_names_outside_the_naming_rule(tmp_path, capsys, name):
    for flag in ("--init", "--skill"):
        try:
            code = main(["--skills-dir", str(tmp_path), f"{flag}={name}"])
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        assert code == 2 and not out and "a-z, 0-9 and single '-'" in err and len(err.strip().splitlines()) == 1, (
            flag,
            err,
        )
    assert list(tmp_path.iterdir()) == []
