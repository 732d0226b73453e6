"""A skill's checks.py is user code, and untrusted: whatever a check does, scoring finishes, the check is
scored as failing on that output, counted, reported once, and the exit status says so. Every shipped check is
linear on pathological outputs."""

import json
import time
from pathlib import Path

import pytest
from conftest import DRY_RUN, SHIPPED_SKILLS, SMALL_GROUPS, main_in_process, skill_folder, small_git_commit
from openai_server import FakeOpenAI

from skill_rl import skills
from skill_rl.scoring import checks
from skill_rl.scoring.checks import run_checks
from skill_rl.scoring.rubric import skill_checks
from skill_rl.skills import SkillError, load_skill
from train_skill import main

ROOT = Path(__file__).resolve().parent.parent
GOOD_MD = (ROOT / "tests" / "test_skills.py").read_text().split('GOOD_MD = """', 1)[1].split('"""', 1)[0]
TASKS = '{"id": "a", "input": "What is 2+2?", "reference": "4"}\n{"id": "b", "input": "Capital of France?", "split": "val"}\n'
HEADER = '''from skill_rl import check


@check("format")
def one_line(output, task):
    """The answer fits on one line."""
    return "\\n" not in output

'''

# misbehaviour -> (body of `def bad(output, task):`, a word its error message must contain)
BAD = {
    "raises": ("return 1 / 0", "ZeroDivisionError"),
    "returns a string": ('return "0.5"', "returned '0.5'"),
    "returns a list": ("return [1]", "returned [1]"),
    "returns a huge int": ("return 10 ** 400", "returned 1000"),
    "returns NaN": ('return float("nan")', "returned nan"),
    "returns a count, not a fraction": ("return 5", "returned 5"),
    "returns a coroutine": ("async def later():\n        return True\n    return later()", "coroutine"),
    "calls sys.exit": ("import sys\n    sys.exit(0)", "SystemExit"),
    "raises KeyboardInterrupt-like BaseException": ("raise GeneratorExit('x')", "GeneratorExit"),
    "loops forever": ("while True:\n        pass", "timed out"),
    "sleeps": ("import time\n    time.sleep(60)", "timed out"),
    "swallows every exception while looping": (
        "while True:\n        try:\n            while True:\n                pass\n"
        "        except BaseException:\n            pass",
        "timed out",
    ),
    "catastrophic regex": ("import re\n    return bool(re.match(r'(a+)+$', 'a' * 64 + 'b'))", "timed out"),
}


def demo(where: Path, bad_body: str, gate: bool = False, tasks: str = TASKS) -> Path:
    source = HEADER + f'@check("format", gate={gate})\ndef bad(output, task):\n    {bad_body}\n'
    return skill_folder(where / "skills", md=GOOD_MD, tasks=tasks, checks=source).parent


@pytest.fixture
def fast_budget(monkeypatch):
    monkeypatch.setattr(checks, "CHECK_SECONDS", 0.1)


def score_lines(tmp_path, n=2):
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(json.dumps({"task_id": "a", "outputs": [f"4 ({i})", f"four\n{i}"]}) + "\n" for i in range(n))
    )
    return src


# a hang guard: each bad call is stopped after 0.1 s, three times at most
@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_misbehaving_check_is_scored_as_failing_counted_and_reported_once(tmp_path, capsys, fast_budget, case):
    body, word = BAD[case]
    skills = demo(tmp_path, body)
    out = tmp_path / "out.jsonl"
    code = main(
        [
            "--skills-dir",
            str(skills),
            "--skill",
            "demo",
            "--score",
            str(score_lines(tmp_path)),
            "--judge",
            "none",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == 1
    assert len(records) == 4
    assert all(r["checks"]["bad"] is False and word in r["check_errors"]["bad"] for r in records), records[0]
    assert [r["checks"]["one_line"] for r in sorted(records, key=lambda r: (r["line"], r["index"]))] == [
        True,
        False,
    ] * 2
    reports = [line for line in err.splitlines() if "check 'bad'" in line]
    assert len(reports) == 1 and word in reports[0] and "scored as failing" in reports[0], err
    assert "4 check error(s)" in err and "Traceback" not in err


def test_a_check_that_errors_gates_its_dimension_to_zero_never_up(tmp_path, capsys, fast_budget):
    out = tmp_path / "out.jsonl"
    main(
        [
            "--skills-dir",
            str(demo(tmp_path, "return 1 / 0", gate=True)),
            "--skill",
            "demo",
            "--score",
            str(score_lines(tmp_path, 1)),
            "--judge",
            "none",
            "--out",
            str(out),
        ]
    )
    assert [json.loads(line)["format"] for line in out.read_text().splitlines()] == [0.0, 0.0]


def test_print_in_a_check_never_lands_in_jsonl_on_stdout(tmp_path, capsys):
    skills = demo(tmp_path, 'print("NOISE from a check")\n    return True')
    assert (
        main(["--skills-dir", str(skills), "--skill", "demo", "--score", str(score_lines(tmp_path)), "--judge", "none"])
        == 0
    )
    out, err = capsys.readouterr()
    assert [json.loads(line)["checks"]["bad"] for line in out.splitlines()] == [True] * 4
    assert "NOISE from a check" in err


def test_checks_cannot_change_the_task_or_its_expect(tmp_path, capsys):
    folder = (
        demo(tmp_path, "return True", tasks='{"id": "a", "input": "x", "expect": {"tags": ["a"], "by": {"k": [1]}}}\n')
        / "demo"
    )
    (folder / "checks.py").write_text(
        "from pydantic import BaseModel\nfrom skill_rl import check\n\n\n"
        "class Expect(BaseModel):\n    tags: list[str]\n    by: dict[str, list[int]]\n\n"
        '@check("format")\ndef grab_list(output, task):\n    task.expect.tags.append("b")\n\n'
        '@check("format")\ndef grab_dict(output, task):\n    task.expect.by["k"].append(2)\n\n'
        '@check("format")\ndef grab_field(output, task):\n    task.expect.tags = []\n\n'
        '@check("format")\ndef grab_input(output, task):\n    task.input = "y"\n\n'
        '@check("format")\ndef untouched(output, task):\n    return task.expect.tags == ["a"] and task.expect.by == {"k": [1]} and task.input == "x"\n'
    )
    skill = load_skill(folder)
    task = skill.tasks[0]
    results = [run_checks(skill_checks(skill), f"out {i}", task) for i in range(3)]
    assert all(r["untouched"] is True for r in results)
    assert all(set(r.errors) == {"grab_list", "grab_dict", "grab_field", "grab_input"} for r in results)
    assert task.expect.tags == ["a"] and task.expect.by == {"k": [1]} and task.input == "x"


# ------------------------------------------------------------------ caught before training


def test_check_runs_every_check_on_each_reference_and_names_the_broken_one(tmp_path, capsys, monkeypatch, fast_budget):
    monkeypatch.chdir(tmp_path)
    skills = demo(tmp_path, "return len(output) / 0 if output == '4' else True")
    code = main(["--skills-dir", str(skills), "--skill", "demo", "--check"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [
        "skills/demo/checks.py:9: check 'bad' failed on the reference of task 'a' (skills/demo/tasks.jsonl:1): "
        "ZeroDivisionError: division by zero"
    ], err


@pytest.mark.timeout(120)
def test_check_reports_a_check_that_never_returns_on_a_reference(tmp_path, capsys, monkeypatch, fast_budget):
    monkeypatch.chdir(tmp_path)
    code = main(["--skills-dir", str(demo(tmp_path, "while True:\n        pass")), "--skill", "demo", "--check"])
    err = capsys.readouterr().err
    assert code == 2 and "check 'bad' failed on the reference of task 'a'" in err and "timed out after 0.1 s" in err


@pytest.mark.parametrize(
    "source,problem",
    [
        ('@check("format")\ndef bad(output):\n    return True\n', "check 'bad' must take (output, task)"),
        ('@check("format")\ndef bad(output, task, extra):\n    return True\n', "check 'bad' must take (output, task)"),
        (
            '@check("format")\nasync def bad(output, task):\n    return True\n',
            "check 'bad' is async; checks are plain functions",
        ),
        ('class Bad:\n    pass\n\nbad = check("format")(Bad())\n', "check 'bad' is not a function"),
        ("import sys\nsys.exit(4)\n", "checks.py failed to import: SystemExit: 4"),
        ('print("NOISE at import")\n', None),
    ],
)
def test_a_check_that_cannot_be_called_is_a_load_problem(tmp_path, capsys, source, problem):
    folder = demo(tmp_path, "return True") / "demo"
    (folder / "checks.py").write_text(HEADER + source)
    if problem is None:
        load_skill(folder)
        out, err = capsys.readouterr()
        assert "NOISE at import" in err and not out
        return
    with pytest.raises(SkillError) as e:
        load_skill(folder)
    assert any(problem in p for p in e.value.problems), e.value.problems


@pytest.mark.timeout(120)
def test_a_checks_py_that_never_finishes_importing_is_a_load_problem(tmp_path, monkeypatch):
    monkeypatch.setattr(skills.usercode, "IMPORT_SECONDS", 0.2)
    folder = demo(tmp_path, "return True") / "demo"
    (folder / "checks.py").write_text("while True:\n    pass\n")
    with pytest.raises(SkillError) as e:
        load_skill(folder)
    assert "checks.py did not finish importing within 0.2 s" in e.value.problems[0]


# ------------------------------------------------------------------ a skill's exploits.py: the same treatment

EXPLOITS_HEADER = '''from skill_rl import exploit


@exploit("one word for every task")
def one_word(ctx, task):
    """The same word whatever the question."""
    return "four"

'''
# misbehaviour -> (body of `def bad(ctx, task):` under @exploit("bad policy"), a word its error message must contain)
BAD_EXPLOITS = {
    "raises": ("return 1 / 0", "ZeroDivisionError"),
    "returns a number": ("return 4", "returned 4, not a str or None"),
    "returns a list without several=True": ('return ["4"]', "returned ['4'], not a str or None"),
    "returns bytes": ('return b"4"', "returned b'4'"),
    "calls sys.exit": ("import sys\n    sys.exit(0)", "SystemExit"),
    "loops forever": ("while True:\n        pass", "timed out after 0.1 s"),
    "sleeps": ("import time\n    time.sleep(60)", "timed out after 0.1 s"),
}


def with_exploits(where: Path, source: str) -> Path:
    skills = demo(where, "return True")
    (skills / "demo" / "exploits.py").write_text(EXPLOITS_HEADER + source)
    return skills


@pytest.fixture
def fast_exploits(monkeypatch):
    from skill_rl.scoring import exploits

    monkeypatch.setattr(exploits, "EXPLOIT_SECONDS", 0.1)


# a hang guard: each exploit's call is stopped after EXPLOIT_SECONDS
@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(BAD_EXPLOITS))
def test_check_runs_every_exploit_on_each_task_and_names_the_broken_one(
    tmp_path, capsys, monkeypatch, fast_exploits, case
):
    body, word = BAD_EXPLOITS[case]
    monkeypatch.chdir(tmp_path)
    skills = with_exploits(tmp_path, f'@exploit("bad policy")\ndef bad(ctx, task):\n    {body}\n')
    code = main(["--skills-dir", str(skills), "--skill", "demo", "--check"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert (
        len(err) == 1
        and err[0].startswith(
            "skills/demo/exploits.py:9: exploit 'bad' failed on task 'a' (skills/demo/tasks.jsonl:1): "
        )
        and word in err[0]
    ), err


# a hang guard: the exploit is stopped after EXPLOIT_SECONDS, once
@pytest.mark.timeout(120)
def test_check_stops_calling_an_exploit_that_never_returns_and_reports_one_that_raises_on_every_task(
    tmp_path, capsys, monkeypatch, fast_exploits
):
    import sys

    monkeypatch.chdir(tmp_path)
    tasks = "".join(f'{{"id": "t{i}", "input": "q{i}", "reference": "a{i}"}}\n' for i in range(4))
    skills = with_exploits(
        tmp_path,
        '@exploit("hangs")\ndef hangs(ctx, task):\n    hangs.calls += 1\n    while True:\n'
        "        pass\n\n\nhangs.calls = 0\n\n\n"
        '@exploit("raises")\ndef raises(ctx, task):\n    return {}[task.id]\n',
    )
    (skills / "demo" / "tasks.jsonl").write_text(tasks)
    assert main(["--skills-dir", str(skills), "--skill", "demo", "--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert sys.modules["skill_rl_exploits_demo"].hangs.calls == 1
    assert err == [
        "skills/demo/exploits.py:9: exploit 'hangs' failed on task 't0' (skills/demo/tasks.jsonl:1): "
        "timed out after 0.1 s",
        "skills/demo/exploits.py:19: exploit 'raises' failed on task 't0' (skills/demo/tasks.jsonl:1): "
        "KeyError: 't0' (and on 3 more task(s))",
    ], err


def test_check_counts_the_exploits_of_exploits_py_and_a_good_one_passes(tmp_path, capsys, monkeypatch):
    from skill_rl.scoring.exploits import GENERIC

    monkeypatch.chdir(tmp_path)
    skills = with_exploits(
        tmp_path, '@exploit("no answer", several=True)\ndef nothing(ctx, task):\n    return ["", " "]\n'
    )
    assert main(["--skills-dir", str(skills), "--skill", "demo", "--check"]) == 0
    assert f"exploits (exploits.py): 2, plus {len(GENERIC)} generic" in capsys.readouterr().out


@pytest.mark.parametrize(
    "source,problem",
    [
        (
            '@exploit("bad policy")\ndef bad(task):\n    return ""\n',
            "exploits.py:9: exploit 'bad' must take (ctx, task), got bad(task)",
        ),
        (
            '@exploit("bad policy")\nasync def bad(ctx, task):\n    return ""\n',
            "exploits.py:9: exploit 'bad' is async; exploits are plain",
        ),
        ('class Bad:\n    pass\n\nbad = exploit("bad policy")(Bad())\n', "exploit 'bad' is not a function"),
        (
            '@exploit(3)\ndef bad(ctx, task):\n    return ""\n',
            "exploits.py:9: exploits.py failed to import: ValueError: exploit name must be a sentence",
        ),
        (
            '@exploit("")\ndef bad(ctx, task):\n    return ""\n',
            "exploits.py:9: exploits.py failed to import: ValueError",
        ),
        (
            '@exploit("bad policy", several="yes")\ndef bad(ctx, task):\n    return ""\n',
            "exploits.py:9: exploits.py failed to import: ValueError: exploit several must be True or False",
        ),
        (
            "@exploit(\"another task's reference\")\ndef bad(ctx, task):\n    return ''\n",
            "is a generic exploit's: pick another",
        ),
        (
            '@exploit("one word for every task")\ndef again(ctx, task):\n    return ""\n',
            "exploits.py:9: exploit 'again' is named 'one word for every task', like exploit 'one_word'",
        ),
        ("import sys\nsys.exit(4)\n", "exploits.py:10: exploits.py failed to import: SystemExit: 4"),
        ('print("NOISE at import")\n', None),
    ],
)
def test_an_exploit_that_cannot_be_called_is_a_load_problem(tmp_path, capsys, source, problem):
    folder = with_exploits(tmp_path, source) / "demo"
    if problem is None:
        load_skill(folder)
        out, err = capsys.readouterr()
        assert "NOISE at import" in err and not out
        return
    with pytest.raises(SkillError) as e:
        load_skill(folder)
    assert len(e.value.problems) == 1 and problem in e.value.problems[0], e.value.problems


def test_a_bad_exploits_py_exits_2_from_check_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    skills = with_exploits(tmp_path, '@exploit("bad policy", sevral=True)\ndef bad(ctx, task):\n    return ""\n')
    assert main(["--skills-dir", str(skills), "--skill", "demo", "--check"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "skills/demo/exploits.py:9: exploits.py failed to import: TypeError: exploit() got an unexpected keyword "
        "argument 'sevral'"
    ]


# a hang guard: the import is stopped after IMPORT_SECONDS
@pytest.mark.timeout(120)
def test_an_exploits_py_that_never_finishes_importing_is_a_load_problem(tmp_path, monkeypatch):
    monkeypatch.setattr(skills.usercode, "IMPORT_SECONDS", 0.2)
    folder = with_exploits(tmp_path, "") / "demo"
    (folder / "exploits.py").write_text("x = 0\nwhile True:\n    x += 1\n")
    with pytest.raises(SkillError) as e:
        load_skill(folder)
    assert e.value.problems[0].split(": ", 1)[1] == "exploits.py did not finish importing within 0.2 s"
    assert e.value.problems[0].split(": ", 1)[0].endswith("exploits.py:2") or e.value.problems[0].split(": ", 1)[
        0
    ].endswith("exploits.py:3"), e.value.problems


# ------------------------------------------------------------------ --eval and training keep going


def test_eval_counts_check_errors_and_exits_1(tmp_path, capsys, fast_budget):
    skills = demo(tmp_path, "return 1 / 0")
    with FakeOpenAI(policy_fn=lambda r: "4") as server:
        code = main(
            [
                "--skills-dir",
                str(skills),
                "--skill",
                "demo",
                "--eval",
                "--model",
                f"m=a@{server.url}",
                "--judge",
                "none",
                "--split",
                "all",
                "--out",
                str(tmp_path / "eval"),
            ]
        )
    err = capsys.readouterr().err
    result = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert code == 1 and result["models"][0]["n"] == 2 and result["check_errors"] == {"bad": 2}
    assert all("ZeroDivisionError" in r["check_errors"]["bad"] for r in result["records"])
    assert len([line for line in err.splitlines() if "check 'bad'" in line]) == 1


# in process, but the training loop loads ART (and so torch)
@pytest.mark.slow
# a hang guard: the hanging check is stopped by its time limit
@pytest.mark.timeout(300)
def test_training_survives_a_check_that_raises_and_one_that_hangs(tmp_path, monkeypatch, capfd):
    skills = small_git_commit(tmp_path, train=4, val=1)
    with open(skills / "git-commit" / "checks.py", "a") as f:
        f.write(
            '\n\n@check("format")\ndef explodes(output, task):\n    return 1 / 0\n\n\n'
            '@check("procedure")\ndef hangs(output, task):\n    while True:\n        pass\n'
        )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    with FakeOpenAI(policy_fn=lambda r: "fix(app): raise the limit") as server:
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        run = main_in_process(
            capfd,
            "--skills-dir",
            skills,
            "--skill",
            "git-commit",
            *DRY_RUN,
            "--judge",
            "none",
            "--steps",
            "1",
            *SMALL_GROUPS,
            "--eval-every",
            "100",
        )
    assert run.returncode == 1, run.stderr[-2000:]
    # 2 checks x (2 x 2 train + 1 x 2 val)
    assert "step    1 | reward" in run.stdout and "check errors 12" in run.stdout
    assert len([line for line in run.stderr.splitlines() if "check 'explodes'" in line]) == 1
    assert len([line for line in run.stderr.splitlines() if "check 'hangs'" in line]) == 1
    # the hang was stopped: the step finished
    assert "Traceback" not in run.stderr


# ------------------------------------------------------------------ catastrophic regexes

MB5 = 5 * 2**20
# each a 5 MB output, one line unless a header line is needed to reach the body's checks
PATHOLOGICAL = {
    "letters": "a" * MB5,
    "word-dot": "a." * (MB5 // 2),
    "word-slash": "a/" * (MB5 // 2),
    "word-colon": "a:" * (MB5 // 2),
    "digits": "9" * MB5,
    "hashes": "#" * MB5,
    "open parens": "feat(" + "(" * MB5,
    "scope never closed": "feat(" + "x" * MB5,
    "scheme-like run": "a1+.-" * (MB5 // 5),
    "long body line": "feat: add a thing\n\n" + "ab" * (MB5 // 2),
    "colons and digits": "a.py:1" * (MB5 // 6),
    "finding label run": "## Summary\nx\n\n## Findings\n- " + "a" * MB5,
    "finding decorations": "## Summary\nx\n\n## Findings\n- issue (" + "a" * MB5,
    "finding huge line number": "## Summary\nx\n\n## Findings\n- issue: app/x.py:" + "9" * MB5 + " x",
    "finding huge range": "## Summary\nx\n\n## Findings\n- issue (blocking): app/x.py:1-999999999999 x\n\n## Verdict\nrequest-changes",
    "fences": "```" * (MB5 // 3),
    "spaces": " " * MB5,
    "stars and pipes": "*|" * (MB5 // 2),
    "breaking-note prefix": "\n" + " \t|*" * (MB5 // 4),
}
# checks.py and derived checks
SKILLS = SHIPPED_SKILLS


# a hang guard: a check that is quadratic on 5 MB never finishes
@pytest.mark.timeout(300)
@pytest.mark.parametrize("skill_name", SKILLS)
@pytest.mark.parametrize("case", sorted(PATHOLOGICAL))
def test_every_shipped_check_is_linear_on_a_pathological_5_mb_output(skill_name, case, monkeypatch):
    # a linear scan of 5 MB takes milliseconds; a quadratic one, days
    monkeypatch.setattr(checks, "CHECK_SECONDS", 10.0)
    skill = load_skill(ROOT / "skills" / skill_name)
    task = next((t for t in skill.tasks if t.expect is not None), skill.tasks[0])
    results = run_checks(skill_checks(skill), PATHOLOGICAL[case], task)
    # no check timed out or raised (a check of an episode, given none, fails without running: git-commit-agent's
    # checks run git-commit's on the commit made, and those are held linear here on git-commit)
    errors = {name: why for name, why in results.errors.items() if why != checks.NO_EPISODE}
    assert not errors, errors


# a hang guard: quadratic unfencing of 5 MB never finishes
@pytest.mark.timeout(120)
def test_unfencing_a_judge_answer_is_linear_on_a_pathological_answer():
    from skill_rl.scoring.reward import _unfence

    answer = "```{" * (MB5 // 4)
    # no closing brace: left for RULER to reject, and retried
    assert _unfence(answer) is answer
    assert _unfence('x ```json\n{"scores": []}\n``` y ```') == '{"scores": []}'


@pytest.mark.timeout(120)
def test_a_check_that_hangs_holds_the_event_loop_for_at_most_its_time_limit(tmp_path, fast_budget):
    import asyncio

    from skill_rl.scoring.reward import Scorer

    skill = load_skill(demo(tmp_path, "while True:\n        pass") / "demo")
    gaps = []

    async def heartbeat(done):
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.01)
            gaps.append(time.perf_counter() - last)
            last = time.perf_counter()

    async def both():
        done = asyncio.Event()
        beat = asyncio.create_task(heartbeat(done))
        await asyncio.sleep(0.05)
        result = await Scorer(skill, None, report=lambda line: None).score(skill.tasks[0], ["4"] * 6)
        done.set()
        await beat
        return result

    result = asyncio.run(both())
    errors = [s.check_errors["bad"] for s in result.scores]
    # three calls time out (0.1 s each), the other three are not made: the loop is held for about 0.3 s in all
    assert errors == ["timed out after 0.1 s"] * 3 + ["not run: timed out 3 times already"] * 3, errors
    # 10x those 0.3 s; without the limit the loop is held for ever
    assert gaps and max(gaps) < 3.0
