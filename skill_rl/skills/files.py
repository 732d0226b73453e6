"""Writing files safely: whole or not at all, never through a link planted at the name.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path


def replace_problem(path: Path) -> str | None:
    """Why `path` must not be replaced by a new file: it is a folder, a device, a pipe or a socket (`/dev/null`:
    as root, replacing it would break the machine). A regular file, a link (the link is replaced, never
    what it points to) or nothing there are fine."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return e.strerror
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return None
    return "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, pipe or socket); pass a file path"


def _umask() -> int:
    try:  # Linux tells it without changing it (os.umask would, for a moment, for every thread)
        return int(next(ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("Umask:")), 8)
    except (OSError, StopIteration, ValueError, IndexError):
        return 0o022


def atomic_write(path: Path, text: str | bytes, private: bool = False) -> None:
    """Write a whole file or nothing: a crash or a full disk leaves the old file (or none), never half a new
    one. The one write path for every output we replace: a new temporary file with a unique name in the
    same folder (created with O_EXCL, so a link planted at any name is never followed), then renamed over
    `path`, which must be a regular file or nothing (OSError otherwise). Text is redacted, like every sink.
    `private`: readable by the user alone (0600), as a run's records and a server's key file are."""
    from skill_rl.keys import redact  # what is written is redacted, like every other sink

    path = Path(path)
    if problem := replace_problem(path):
        raise OSError(errno.EINVAL, f"{problem}, not replaced", str(path))
    data = redact(text).encode() if isinstance(text, str) else text
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:100]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if not private:
                os.fchmod(f.fileno(), 0o666 & ~_umask())  # as a plain open() would make it, not mkstemp's 0600
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # a full disk leaves no half-written temporary beside the old file
        raise
