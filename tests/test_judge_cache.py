"""The judge cache (scoring/cache.py): a judge call made before is answered from disk, and only that exact call.
Real HTTP to the local OpenAI-compatible server, which counts the judge calls it answers."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import small_git_commit

from skill_rl.scoring import cache
from skill_rl.scoring.usage import JudgeUsage
from train_skill import main

ROOT = Path(__file__).resolve().parent.parent
DIFF = "diff --git a/app/x.py b/app/x.py\n--- a/app/x.py\n+++ b/app/x.py\n@@ -1,1 +1,1 @@\n-LIMIT = 1\n+LIMIT = 2\n"
GROUP = ["fix: raise the limit", "fix: raise it", "Raised the limit."]


@pytest.fixture
def skills(tmp_path):
    return small_git_commit(tmp_path, train=2, val=1)


def score(skills, server, rows, out, *extra) -> tuple[int, list[dict], int]:
    """--score of `rows`: the exit status, the records, and the judge calls it made."""
    src = out.with_suffix(".in.jsonl")
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = server.judge_calls
    code = main(
        [
            "--skills-dir",
            str(skills),
            "--skill",
            "git-commit",
            "--score",
            str(src),
            "--judge-base-url",
            server.url,
            "--judge-api-key",
            "sk-test-cache",
            "--out",
            str(out),
            *extra,
        ]
    )
    return code, [json.loads(line) for line in out.read_text().splitlines()], server.judge_calls - before


def judged(records):
    return sorted((r["line"], r["index"], r["procedure"], r["correctness"], r["judge"]) for r in records)


# the judge is ART's RULER: it imports torch
@pytest.mark.slow
def test_a_second_score_of_the_same_file_makes_no_judge_call_and_says_what_it_saved(tmp_path, skills, server, capsys):
    rows = [{"input": DIFF, "outputs": GROUP}, {"input": DIFF.replace("2", "3"), "outputs": GROUP[:2]}]
    code, first, calls = score(skills, server, rows, tmp_path / "a.jsonl")
    err = capsys.readouterr().err
    # two groups, two judged dimensions each
    assert code == 0 and calls == 4, err
    where = Path(os.environ["XDG_CACHE_HOME"]) / "skill-rl" / "judge.sqlite3"
    assert f"judge cache: {where} (" in err and "judge cache: 0 of 4 judge call(s) answered from the cache" in err
    code, again, calls = score(skills, server, rows, tmp_path / "b.jsonl")
    err = capsys.readouterr().err
    assert code == 0 and calls == 0, err
    assert judged(again) == judged(first) and all(r["judged"] for r in again)
    # what the first run paid is what the second saved
    prompt, completion = server.reported(judge=True)
    assert f"judge cache: 4 of 4 judge call(s) answered from the cache, saving {prompt + completion:,} tokens" in err
    # the place is said once a process
    assert "judge cache: /" not in err.replace(f"judge cache: {where} (", "")


@pytest.mark.parametrize(
    "change",
    ["an output", "the order", "one more output", "the task", "the judge model", "the judge endpoint", "the rubric"],
)
# the judge is ART's RULER: it imports torch
@pytest.mark.slow
def test_anything_that_changes_the_judgement_misses(tmp_path, skills, server, capsys, change):
    rows = [{"input": DIFF, "outputs": GROUP}]
    assert score(skills, server, rows, tmp_path / "a.jsonl")[2] == 2
    extra = []
    # a policy's new answer never gets the old group's score
    if change == "an output":
        rows = [{"input": DIFF, "outputs": [GROUP[0], GROUP[1], "fix: raise the limit to 2"]}]
    # RULER ranks the group as a whole, as it reads it
    elif change == "the order":
        rows = [{"input": DIFF, "outputs": GROUP[::-1]}]
    elif change == "one more output":
        rows = [{"input": DIFF, "outputs": GROUP + ["feat: limit"]}]
    elif change == "the task":
        rows = [{"input": DIFF.replace("LIMIT = 2", "LIMIT = 20"), "outputs": GROUP}]
    elif change == "the judge model":
        extra = ["--judge-model", "openai/another-judge"]
    # the same model name served elsewhere is another judge
    elif change == "the judge endpoint":
        extra = ["--judge-base-url", server.url.rstrip("/") + "/other/v1"]
    # SKILL.md's procedure is the rubric the judge grades with
    else:
        md = skills / "git-commit" / "SKILL.md"
        md.write_text(md.read_text().replace("## Procedure\n", "## Procedure\n\n1. Read the whole diff first.\n", 1))
    code, records, calls = score(skills, server, rows, tmp_path / "b.jsonl", *extra)
    assert calls == 2 and all(r["judged"] for r in records), capsys.readouterr().err


# the judge is ART's RULER: it imports torch
@pytest.mark.slow
def test_no_judge_cache_neither_reads_nor_writes_it(tmp_path, skills, server, capsys):
    rows = [{"input": DIFF, "outputs": GROUP}]
    assert score(skills, server, rows, tmp_path / "a.jsonl", "--no-judge-cache")[2] == 2
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "skill-rl").exists()
    assert "judge cache" not in capsys.readouterr().err
    assert score(skills, server, rows, tmp_path / "b.jsonl")[2] == 2
    assert "judge cache: 0 of 2" in capsys.readouterr().err
    # cached, yet asked
    assert score(skills, server, rows, tmp_path / "c.jsonl", "--no-judge-cache")[2] == 2
    assert "judge cache" not in capsys.readouterr().err


# the judge is ART's RULER: it imports torch
@pytest.mark.slow
def test_a_corrupt_cache_file_is_one_warning_moved_aside_and_a_fresh_cache(tmp_path, skills, server, capsys):
    where = Path(os.environ["XDG_CACHE_HOME"]) / "skill-rl" / "judge.sqlite3"
    where.parent.mkdir(parents=True)
    where.write_bytes(b"this is not a database, it is " + os.urandom(4096))
    rows = [{"input": DIFF, "outputs": GROUP}]
    code, records, calls = score(skills, server, rows, tmp_path / "a.jsonl")
    err = capsys.readouterr().err
    assert code == 0 and calls == 2 and "Traceback" not in err
    warnings = [line for line in err.splitlines() if line.startswith("warning: judge cache")]
    assert len(warnings) == 1 and "moved to judge.sqlite3.corrupt, starting a fresh one" in warnings[0], err
    # kept, not lost
    assert where.with_name("judge.sqlite3.corrupt").read_bytes().startswith(b"this is not a database")
    # the fresh cache works
    assert score(skills, server, rows, tmp_path / "b.jsonl")[2] == 0


# the judge is ART's RULER: it imports torch
@pytest.mark.slow
def test_a_cache_folder_that_cannot_be_made_is_a_warning_and_the_judge_is_asked(
    tmp_path, skills, server, capsys, monkeypatch
):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
    code, records, calls = score(skills, server, [{"input": DIFF, "outputs": GROUP}], tmp_path / "a.jsonl")
    err = capsys.readouterr().err
    assert code == 0 and calls == 2 and all(r["judged"] for r in records)
    assert [line for line in err.splitlines() if line.startswith("warning:")] == [
        line
        for line in err.splitlines()
        if line.startswith(f"warning: judge cache {tmp_path / 'a-file'}") and "judging without it" in line
    ]
    assert "Traceback" not in err


def test_entries_survive_a_killed_process(tmp_path):
    path = tmp_path / "judge.sqlite3"
    code = (
        f"import os, signal\nfrom skill_rl.scoring.cache import JudgeCache\nfrom skill_rl.scoring.usage import JudgeUsage\n"
        f"c = JudgeCache({str(path)!r})\nc.put('k1', [(0.5, 'fine'), (1.0, 'best')], JudgeUsage(responses=1, prompt_tokens=9))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert run.returncode == -signal.SIGKILL
    c = cache.JudgeCache(path)
    assert c.get("k1", 2) == [(0.5, "fine"), (1.0, "best")] and c.tally.saved.prompt_tokens == 9


def test_a_stored_entry_that_does_not_fit_the_call_is_a_miss(tmp_path):
    c = cache.JudgeCache(tmp_path / "judge.sqlite3")
    c.put("k", [(0.5, "a"), (0.7, "b")], JudgeUsage())
    # another number of candidates: never a partial answer
    assert c.get("k", 3) is None
    c._db.execute("INSERT OR REPLACE INTO judgements VALUES ('bad', 'not json')")
    c._db.execute("INSERT OR REPLACE INTO judgements VALUES ('high', ?)", (json.dumps({"scores": [[7, "x"]]}),))
    assert c.get("bad", 1) is None and c.get("high", 1) is None and c.tally.hits == 0
    # the cache still works after them
    assert c.get("k", 2) == [(0.5, "a"), (0.7, "b")]


def test_every_part_of_the_key_changes_it():
    base = dict(model="openai/j", base_url="http://h/v1", rubric="r", skill_md="s", task_input="t", outputs=["a", "b"])
    keys = {cache.key(**base)}
    for name, other in [
        ("model", "openai/k"),
        ("base_url", "http://g/v1"),
        ("rubric", "r2"),
        ("skill_md", "s2"),
        ("task_input", "t2"),
        ("outputs", ["b", "a"]),
        ("outputs", ["a", "b", "c"]),
        ("outputs", ["ab"]),
    ]:
        keys.add(cache.key(**{**base, name: other}))
    assert len(keys) == 9
    # one endpoint, one judge
    assert cache.key(**{**base, "base_url": "http://h/v1/"}) == cache.key(**base)


# the judge is ART's RULER: it imports torch
@pytest.mark.slow
def test_a_repeated_eval_of_the_same_answers_pays_the_judge_once_and_reports_the_hits(tmp_path, capsys):
    from openai_server import FakeOpenAI

    with FakeOpenAI(policy_fn=lambda r: "fix: raise the limit") as a, FakeOpenAI(policy_fn=lambda r: "Raised it.") as b:

        def evaluate(out):
            return main(
                [
                    "--skill",
                    "git-commit",
                    "--eval",
                    "--model",
                    f"a=m1@{a.url}",
                    "--model",
                    f"b=m2@{b.url}",
                    "--judge-base-url",
                    a.url,
                    "--judge-api-key",
                    "k",
                    "--limit",
                    "2",
                    "--out",
                    str(out),
                ]
            )

        assert evaluate(tmp_path / "one") == 0 and a.judge_calls == 2 * 2, capsys.readouterr()
        capsys.readouterr()
        assert evaluate(tmp_path / "two") == 0 and a.judge_calls == 2 * 2
    assert "judge cache: 4 of 4 judge call(s) answered from the cache" in capsys.readouterr().out
    first, second = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "two"))
    assert first["models"] == second["models"] and second["judge_cache"]["hits"] == 4
    assert second["judge_usage"]["responses"] == 0 and second["judge_cache"]["saved"]["responses"] == 4
    assert "answered from the cache" in (tmp_path / "two" / "results.md").read_text()


def test_the_cache_file_is_the_users_alone_when_new_replaced_or_found_loose(tmp_path):
    fresh = tmp_path / "new" / "judge.sqlite3"
    cache.JudgeCache(fresh, report=lambda line: None)
    damaged = tmp_path / "damaged" / "judge.sqlite3"
    damaged.parent.mkdir()
    damaged.write_bytes(b"this is not a database" * 100)
    os.chmod(damaged, 0o644)
    said = []
    cache.JudgeCache(damaged, report=said.append).put("k", [(1.0, "x")], JudgeUsage())
    loose = tmp_path / "loose" / "judge.sqlite3"
    cache.JudgeCache(loose, report=lambda line: None).put("k", [(1.0, "x")], JudgeUsage())
    os.chmod(loose, 0o664)
    # narrowed, and still read
    assert cache.JudgeCache(loose, report=lambda line: None).get("k", 1) == [(1.0, "x")]
    assert len(said) == 1 and "moved to" in said[0]
    for path in (fresh, damaged, loose):
        assert path.stat().st_mode & 0o777 == 0o600, path
