"""A rollout's workspace: a fresh private copy of a task's `workspace` folder in a temporary directory, and
`inside`, the one rule for a path a tool is given (relative, and inside the workspace once every symlink is
followed).

The copy never follows a symlink: links are copied as links (reading through one that points out is refused
later, by `inside`), and what is neither a file, a folder nor a link (a FIFO, a socket, a device) is left out,
so copying cannot block or read outside the source.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path


class Outside(ValueError):
    """A path that is not inside the workspace."""


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
