"""`--workspaces`: with --tasks-from-git, a git workspace per mined task (docs/tools.md, "Workspaces that are git
repositories"): a small synthetic repository in `repo.bundle` and the commit's change in `staged.diff`.

The repository is made, not cloned, so that it holds nothing but what the task needs and nobody's address:

- its first commit holds the files the commit touches, as they were in its parent (files the diff leaves out,
  binary, generated or lock files, are not there either), and a placeholder file `HISTORY`;
- it and the next commits carry the messages of the commit's HISTORY_COMMITS first-parent ancestors, oldest
  first, so `git log` shows the repository's own types and scopes; each later commit adds a line to `HISTORY`;
- every commit has the neutral author AUTHOR and a fixed date, so the same commit always makes the same bundle;
  a message's lines that hold an e-mail address (`Signed-off-by:` and the like) are left out;
- `staged.diff` is the task's change: the diff the miner reads (`Commit.diff`), applied with `git apply --index`.

A commit is skipped (a reason the report counts) when a touched file is over MAX_FILE_BYTES or all of them over
MAX_TOTAL_BYTES, a path could not be a workspace's (`.git`, `..`), it has no parent, an earlier message matches a
secret pattern, or its change does not apply to the files as they were (the workspace is made once, for real,
to know). Git runs with the miner's environment and the sandbox's options (no hooks, no config).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path, PurePosixPath

from skill_rl.keys import secret_in
from skill_rl.mining.git import Commit, Skip, TooLarge, git_env

HISTORY_COMMITS = 5
MAX_FILE_BYTES = 16_000
MAX_TOTAL_BYTES = 48_000
AUTHOR = ("Developer", "developer@example.invalid")
# the first commit's date (2024-01-01 UTC); each next one an hour later
EPOCH = 1_704_067_200
PLACEHOLDER = "HISTORY"
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+|<[^<>\s]*@[^<>\s]*>")
FOLDER = "workspaces"


def _message(text: str) -> str:
    """A history message without the lines that hold an e-mail address (trailers that name people)."""
    lines = [ln for ln in text.replace("\r\n", "\n").strip("\n").split("\n") if not EMAIL.search(ln)]
    return "\n".join(lines).strip("\n") or "chore: earlier change"


def _history(commit: Commit) -> list[str]:
    """The messages of the commit's first-parent ancestors, at most HISTORY_COMMITS, oldest first."""
    repo = commit.repo
    shas = repo.git("rev-list", "--first-parent", f"--max-count={HISTORY_COMMITS}", commit.parents[0], "--").split()
    messages = []
    for earlier in repo.commits([s.decode("ascii") for s in reversed(shas)]):
        if earlier.message and secret_in(earlier.message):
            raise Skip("an earlier message matches a secret pattern (never mined)")
        messages.append(_message(earlier.message))
    return messages


def _safe(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return (
        bool(parts)
        and not path.startswith("/")
        and all(p not in ("", ".", "..") for p in parts)
        and not any(p.lower() == ".git" for p in parts)
    )


def _parent_files(commit: Commit) -> dict[str, bytes]:
    """The touched files (those the diff keeps) as they were in the parent; Skip over the size caps."""
    files, total = {}, 0
    for f in commit.files:
        if f.excluded is not None:
            continue
        if not _safe(f.path):
            raise Skip("a path no workspace may hold")
        if f.status == "A":
            continue
        try:
            data = commit.repo.git("cat-file", "blob", f"{commit.parents[0]}:{f.path}", cap=MAX_FILE_BYTES)
        except TooLarge:
            raise Skip(f"a touched file over {MAX_FILE_BYTES:,} bytes (workspace cap)") from None
        total += len(data)
        if total > MAX_TOTAL_BYTES:
            raise Skip(f"touched files over {MAX_TOTAL_BYTES:,} bytes (workspace cap)")
        files[f.path] = data
    return files


def _git(folder: Path, env: dict, *args: str, input: bytes | None = None) -> None:
    from skill_rl.tools.sandbox import git_argv

    subprocess.run(
        git_argv(["git", "-c", "pack.threads=1", *args]),
        cwd=folder,
        env=env,
        input=input,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=True,
        timeout=60,
    )


def _bundle(files: dict[str, bytes], messages: list[str], out: Path) -> None:
    """The synthetic repository, its commits carrying `messages`, written as a bundle of `main` to `out`."""
    with tempfile.TemporaryDirectory(prefix="skill-rl-mine-") as tmp:
        folder = Path(tmp) / "repo"
        folder.mkdir()
        env = {**git_env(folder), "GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1]}
        env.update(GIT_COMMITTER_NAME=AUTHOR[0], GIT_COMMITTER_EMAIL=AUTHOR[1])
        _git(folder, env, "init", "-q", "-b", "main")
        for path, data in files.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_bytes(data)
        for i, message in enumerate(messages):
            with open(folder / PLACEHOLDER, "a") as f:
                f.write(f"change {i + 1}\n")
            _git(folder, env, "add", "-A")
            date = {"GIT_AUTHOR_DATE": f"{EPOCH + 3600 * i} +0000", "GIT_COMMITTER_DATE": f"{EPOCH + 3600 * i} +0000"}
            _git(folder, {**env, **date}, "commit", "-q", "--cleanup=verbatim", "-F", "-", input=message.encode())
        _git(folder, env, "bundle", "create", "-q", str(out), "main")


def write_workspace(commit: Commit, folder: Path) -> str | None:
    """Write the commit's workspace into `folder` (created); the reason it is skipped instead (the folder removed)."""
    from skill_rl.tools.workspace import BUNDLE, STAGED, BrokenWorkspace, Workspace

    try:
        if not commit.parents:
            return "no parent: nothing for a workspace to start from"
        diff = commit.diff
        files, messages = _parent_files(commit), _history(commit)
        folder.mkdir(parents=True)
        _bundle(files, messages, folder / BUNDLE)
        (folder / STAGED).write_text(diff, encoding="utf-8")
        # made once for real: a change that does not apply is no task
        Workspace.fresh(folder).close()
        return None
    except Skip as e:
        why = str(e)
    except BrokenWorkspace:
        why = "its change does not apply to the files as they were"
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        why = f"the workspace could not be written ({type(e).__name__})"
    shutil.rmtree(folder, ignore_errors=True)
    return why


def place(staging: Path, target: Path) -> None:
    """Move every workspace of `staging` into `target` (created), replacing a folder of the same name."""
    target.mkdir(exist_ok=True)
    for made in sorted(staging.iterdir()):
        dest = target / made.name
        if dest.exists() or dest.is_symlink():
            if dest.is_symlink() or not dest.is_dir():
                dest.unlink()
            else:
                shutil.rmtree(dest)
        os.replace(made, dest)
