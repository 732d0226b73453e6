"""A rollout's workspace: a fresh private copy of a task's `workspace` folder in a temporary directory, and
`inside`, the one rule for a path a tool is given (relative, and inside the workspace once every symlink is
followed).

The copy never follows a symlink: links are copied as links (reading through one that points out is refused
later, by `inside`), and what is neither a file, a folder nor a link (a FIFO, a socket, a device) is left out,
so copying cannot block or read outside the source.

A workspace folder that holds `repo.bundle` (a git bundle with the branch `main`) becomes a git repository in the
copy (`as_repository`): the bundle's `main` checked out, then `staged.diff`, when there is one, applied with
`git apply --index`; neither file stays in the copy. Git runs in the sandbox (sandbox.py: hooks and config
disabled, only the copy writable), so a hostile bundle or diff can change nothing outside it (docs/tools.md,
"Workspaces that are git repositories").
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import tempfile
from pathlib import Path

# a workspace folder with these is a git repository (docs/tools.md)
BUNDLE, STAGED = "repo.bundle", "staged.diff"
# the time one workspace's git setup may take
SETUP_SECONDS = 30.0


class Outside(ValueError):
    """A path that is not inside the workspace."""


class BrokenWorkspace(ValueError):
    """A workspace folder whose repository cannot be made (a bundle or a diff git refuses); one line."""


def inside(workspace: Path, path: str) -> Path:
    """`path` (relative to the workspace) as a path inside it, every symlink followed; Outside when it is absolute,
    climbs out with '..', or reaches out through a symlink. For tools.py functions that take a path too."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise Outside(f"not a path: {path!r}")
    if os.path.isabs(path) or path.startswith("~"):
        raise Outside(f"{path!r} is absolute; paths are relative to the workspace")
    root = Path(workspace).resolve()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise Outside(f"{path!r} is outside the workspace")
    return target


def _copy_file(src: str, dst: str) -> str:
    # only regular files: a FIFO or a device would block or read elsewhere
    if stat.S_ISREG(os.lstat(src).st_mode):
        shutil.copy2(src, dst, follow_symlinks=False)
    return dst


class Workspace:
    """A fresh private copy of `source` (None: an empty folder) under a temporary directory; `path` is the copy.
    `close()` (or leaving `with`) deletes it."""

    def __init__(self, path: Path, holder: Path):
        self.path, self._holder = path, holder

    @classmethod
    def fresh(cls, source: Path | None) -> Workspace:
        holder = Path(tempfile.mkdtemp(prefix="skill-rl-ws-"))
        path = holder / "workspace"
        try:
            if source is None:
                path.mkdir()
            else:
                if Path(source).is_symlink() or not Path(source).is_dir():
                    raise NotADirectoryError(f"workspace {source} is not a folder")
                shutil.copytree(source, path, symlinks=True, copy_function=_copy_file)
                if os.path.lexists(path / BUNDLE):
                    as_repository(path, holder)
        except BaseException:
            shutil.rmtree(holder, ignore_errors=True)
            raise
        return cls(path, holder)

    def close(self) -> None:
        # a tool may have left folders it cannot write: make them writable to delete them
        for folder, dirs, _ in os.walk(self._holder):
            for d in dirs:
                p = os.path.join(folder, d)
                if not os.path.islink(p):
                    os.chmod(p, 0o700)
        shutil.rmtree(self._holder, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _setup_script() -> str:
    """The shell script that makes the repository: fixed text, every git command with the sandbox's options; the
    bundle and the diff are read from the folder above the copy, where they were moved (nothing there is writable)."""
    from skill_rl.tools.sandbox import git_argv

    def git(*words: str) -> str:
        return shlex.join(git_argv(["git", *words]))

    return "\n".join(
        [
            "set -e",
            git("init", "-q", "-b", "main"),
            # a local bundle is the one transport allowed, for this fetch only
            git("-c", "protocol.file.allow=always", "fetch", "-q", "--no-tags", "--update-head-ok")
            + f" ../{BUNDLE} refs/heads/main:refs/heads/main",
            git("reset", "-q", "--hard", "main"),
            f"if [ -e ../{STAGED} ]; then {git('apply', '--index', '--whitespace=nowarn', f'../{STAGED}')}; fi",
        ]
    )


def as_repository(path: Path, holder: Path, time_limit: float = SETUP_SECONDS) -> None:
    """Make the copy at `path` a git repository from its `repo.bundle` and `staged.diff` (moved out to `holder`
    first, then deleted); BrokenWorkspace, one line, when git refuses them."""
    from skill_rl.tools.sandbox import namespaces_refused, run_child

    # a repository of its own would bring its config and hooks to the setup's git
    if os.path.lexists(path / ".git"):
        raise BrokenWorkspace(f"a workspace with {BUNDLE} may not hold a .git of its own")
    for name in (BUNDLE, STAGED):
        if not os.path.lexists(path / name):
            continue
        if not stat.S_ISREG(os.lstat(path / name).st_mode):
            raise BrokenWorkspace(f"{name} is not a file")
        os.replace(path / name, holder / name)
    spec = {"kind": "bash", "argv": ["sh", "-c", _setup_script()]}
    try:
        outcome = run_child(spec, path, time_limit=time_limit, cap=4000, isolate=namespaces_refused() is None)
    finally:
        for name in (BUNDLE, STAGED):
            (holder / name).unlink(missing_ok=True)
    if outcome.status != 0:
        said = " ".join(outcome.output.decode("utf-8", "replace").split())[:200]
        why = "timed out" if outcome.timed_out else said or f"exit status {outcome.status}"
        raise BrokenWorkspace(f"the workspace's {BUNDLE} or {STAGED} cannot be made a repository: {why}")


def workspace_problem(skill_dir: Path, value: str) -> str | None:
    """Why a task's `workspace` (a folder beside tasks.jsonl) cannot be used: absolute, outside the skill folder
    (also through a symlink), or not a folder. None when it can."""
    try:
        folder = inside(skill_dir, value)
    except Outside as e:
        return str(e).replace("the workspace", "the skill folder")
    if folder == Path(skill_dir).resolve() or not folder.is_dir():
        return f"{value!r} is not a folder inside the skill folder"
    return None
