"""Checks for the git-commit-agent skill: every check reads the episode (docs/tools.md, "The shipped commit skill").

The commit actually made, read from the episode's workspace, is scored by the git-commit skill's own checks
(skills/git-commit/checks.py, imported from the folder beside this one, never copied): each of its checks comes
back here as `commit_<name>`, called on the commit's message with the commit's diff as the task's input. The
procedure is read from the calls and the repository: the staged diff read before committing, the history looked
at, exactly one commit made, nothing left or changed in the work tree.

A workspace here is a git repository made by `Workspace.fresh` (its reflog begins with the setup's `fetch` and
`reset`); the commits an episode made are the `commit` entries that follow them.
"""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from skill_rl import check
from skill_rl.tools.sandbox import environment, git_argv

INSTRUCTION = "Commit the change that is staged in this repository."


def _git_commit_checks():
    """skills/git-commit/checks.py as a module (the one skill-rl itself loads, when it has)."""
    path = Path(__file__).resolve().parent.parent / "git-commit" / "checks.py"
    name = "skill_rl_checks_git_commit"
    if getattr(sys.modules.get(name), "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


GC = _git_commit_checks()
# tasks.jsonl's `expect`: what the git-commit skill expects of a message
Expect = GC.Expect


class Made(NamedTuple):
    """What an episode committed: how many commits (`amended`: one of them was `--amend`), the last one's message,
    and the diff from where the episode began to the last commit."""

    commits: int
    amended: bool
    message: str
    diff: str


def _git(workspace: Path, *args: str) -> str:
    run = subprocess.run(
        git_argv(["git", *args]),
        cwd=workspace,
        env=environment(workspace),
        capture_output=True,
        timeout=10,
        stdin=subprocess.DEVNULL,
    )
    return run.stdout.decode("utf-8", "replace") if run.returncode == 0 else ""


@lru_cache(maxsize=64)
def _made(workspace: str, reflog: bytes) -> Made | None:
    entries = [line.partition(b"\t")[::2] for line in reflog.splitlines() if line]
    commits = 0
    while commits < len(entries) and entries[-1 - commits][1].startswith(b"commit"):
        commits += 1
    if not commits:
        return None
    start = entries[-commits][0].split(b" ", 2)[0].decode("ascii", "replace")
    head = entries[-1][0].split(b" ", 2)[1].decode("ascii", "replace")
    amended = any(e[1].startswith(b"commit (amend)") for e in entries[-commits:])
    where = Path(workspace)
    message = _git(where, "log", "-1", "--format=%B", head).strip("\n")
    diff = _git(where, "diff", "--no-color", "--no-ext-diff", "--no-renames", start, head)
    return Made(commits, amended, message, diff)


def made(episode) -> Made | None:
    """The commits the episode made (None: none, or no episode, or no repository)."""
    if episode is None:
        return None
    try:
        reflog = (Path(episode.workspace) / ".git" / "logs" / "HEAD").read_bytes()
    except OSError:
        return None
    return _made(str(episode.workspace), reflog)


def _on_the_commit(name: str, fn):
    """The git-commit check `fn`, called on the commit the episode made (failing when it made none)."""

    def on_commit(output: str, task, episode):
        got = made(episode)
        if got is None:
            return False
        return fn(got.message, task.model_copy(update={"input": got.diff}))

    on_commit.__name__ = on_commit.__qualname__ = f"commit_{name}"
    on_commit.__doc__ = f"The commit made: {fn.__doc__}"
    estimate = getattr(fn, "kind", "fact") == "estimate"
    marks = dict(kind=fn.kind, cut=fn.cut) if estimate else dict(gate=fn.gate, key=fn.key, covers=fn.covers)
    return check(fn.dimension, **marks)(on_commit)


for _name, _fn in list(vars(GC).items()):
    if getattr(_fn, "dimension", None) and _fn.__module__ == GC.__name__:
        globals()[f"commit_{_name}"] = _on_the_commit(_name, _fn)


# ------------------------------------------------------------------ the procedure, from the calls


def _command(call) -> list[str]:
    """A successful bash call's words (empty for another tool, a failed call or words that do not split)."""
    if call.name != "bash" or call.error:
        return []
    try:
        return shlex.split(str(call.args.get("command", "")))
    except ValueError:
        return []


def _is(words: list[str], sub: str) -> bool:
    return len(words) >= 2 and words[0] == "git" and words[1] == sub


def _commits(call) -> bool:
    """The call committed: the `commit` tool (tools.py), or a `git commit` through `bash` where a copy of this skill
    allows it."""
    return (call.name == "commit" and not call.error) or _is(_command(call), "commit")


def _first_commit(episode) -> int:
    return next((i for i, c in enumerate(episode.calls) if _commits(c)), len(episode.calls))


@check("procedure", key=True, gate=True, covers=0.3)
def one_commit(output: str, task, episode) -> bool:
    """Exactly one commit was made, and not by amending the last one."""
    got = made(episode)
    return got is not None and got.commits == 1 and not got.amended


@check("procedure", covers=0.25)
def read_the_staged_diff_first(output: str, task, episode) -> bool:
    """Step 2: `git diff --staged` (or `--cached`) ran before the first commit."""
    if episode is None:
        return False
    calls = episode.calls[: _first_commit(episode)]
    return any(_is(w, "diff") and {"--staged", "--cached"} & set(w) for w in map(_command, calls))


@check("procedure", covers=0.1)
def looked_at_the_history(output: str, task, episode) -> bool:
    """Step 3: `git log` ran before the first commit."""
    if episode is None:
        return False
    return any(_is(_command(c), "log") for c in episode.calls[: _first_commit(episode)])


@check("procedure", covers=0.1)
def nothing_else_changed(output: str, task, episode) -> bool:
    """Everything staged was committed and nothing else is changed or new in the work tree."""
    if made(episode) is None:
        return False
    status = subprocess.run(
        git_argv(["git", "status", "--porcelain=v1", "--untracked-files=all"]),
        cwd=episode.workspace,
        env=environment(Path(episode.workspace)),
        capture_output=True,
        timeout=10,
    )
    return status.returncode == 0 and not status.stdout.strip()


# ------------------------------------------------------------------ tasks and the warm start's episodes


def task_from_commit(commit) -> dict | str:
    """The git-commit skill's task for the commit (its `expect` and `reference`), with the instruction as the input:
    the change itself is in the workspace (`--tasks-from-git REPO --workspaces`)."""
    got = GC.task_from_commit(commit)
    return got if isinstance(got, str) else {**got, "input": INSTRUCTION}


def reference_episode(task) -> list | None:
    """The warm start's scripted episode for a task: inspect (steps 1-3, asked together in one message), then commit
    the reference message with the `commit` tool: the messages' calls, in order, as (tool, arguments); the final
    answer is `final_answer`. Three turns rather than five: each turn reads the whole chat again, so on a CPU an
    episode costs its turns."""
    if not task.reference:
        return None
    return [
        [
            ("bash", {"command": "git status --short"}),
            ("bash", {"command": "git diff --staged"}),
            ("bash", {"command": "git log --oneline -5"}),
        ],
        ("commit", {"message": task.reference}),
    ]


def final_answer(task) -> str:
    """The answer that closes a reference episode."""
    return f"Committed: {task.reference.partition(chr(10))[0]}"


def categories(output: str) -> dict[str, str | None]:
    """The answer's commit type, read from its `Committed: <header>` line, for the collapse monitor."""
    return GC.categories(output.removeprefix("Committed: "))
