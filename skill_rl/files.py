"""Reading and writing files we do not trust: whole files written or not at all, never through a link planted at
the name; JSONL read line by line within bounds.

Two readers, one per kind of JSONL file:

  read_objects   input a person or another tool wrote (tasks.jsonl, --sft-from, --score): strict. Each line
                 at most MAX_LINE_BYTES and the file at most MAX_FILE_BYTES (past that nothing more is read:
                 /dev/zero ends), UTF-8 (a BOM on the first line is allowed), one JSON object, no key given
                 twice. Every bad line is one problem naming file, line and field; the other lines are read.
  read_records   records a run of ours appends (history.jsonl, records.jsonl): a line cut short by a crash
                 (invalid JSON, or no object) is dropped, so that whatever resumes the run goes on.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from skill_rl.keys import redact
from skill_rl.text import problem

# one JSONL line bigger than this is an error, not a model input
MAX_LINE_BYTES = 1_000_000
# a JSONL input: 100,000 tasks fit in far less
MAX_FILE_BYTES = 256 * 2**20
BOM = b"\xef\xbb\xbf"


# ------------------------------------------------------------------ writing


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
    # Linux tells it without changing it (os.umask would, for a moment, for every thread)
    try:
        return int(next(ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("Umask:")), 8)
    except (OSError, StopIteration, ValueError, IndexError):
        return 0o022


def atomic_write(path: Path, text: str | bytes, private: bool = False) -> None:
    """Write a whole file or nothing: a crash or a full disk leaves the old file (or none), never half a new
    one. The one write path for every output we replace: a new temporary file with a unique name in the
    same folder (created with O_EXCL, so a link planted at any name is never followed), then renamed over
    `path`, which must be a regular file or nothing (OSError otherwise). Text is redacted, like every sink.
    `private`: readable by the user alone (0600), as a run's records and a server's key file are."""
    path = Path(path)
    if problem_ := replace_problem(path):
        raise OSError(errno.EINVAL, f"{problem_}, not replaced", str(path))
    data = redact(text).encode() if isinstance(text, str) else text
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:100]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if not private:
                # as a plain open() would make it, not mkstemp's 0600
                os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            # a full disk leaves no half-written temporary beside the old file
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------ JSONL a person wrote: strict


def no_duplicate_keys(pairs):
    """json.loads hook: a key given twice in one object is an error (JSON would keep the last silently)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"field '{dup}' is given twice")
    return out


def jsonl_lines(path: Path, problems: list[str]) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the line break) of every line that is not blank, read line by line: a line
    over MAX_LINE_BYTES is one problem and is skipped; past MAX_FILE_BYTES nothing more is read."""
    try:
        f = path.open("rb")
    except OSError as e:
        problems.append(problem(path, None, f"cannot read file: {e.strerror}"))
        return
    with f:
        total, n, too_long = 0, 0, False
        while raw := f.readline(MAX_LINE_BYTES + 1):
            total += len(raw)
            if total > MAX_FILE_BYTES:
                problems.append(
                    problem(
                        path,
                        n if too_long else n + 1,
                        f"file is larger than {MAX_FILE_BYTES:,} bytes; the rest is not read",
                    )
                )
                return
            # the rest of a line already reported
            if too_long:
                too_long = not raw.endswith(b"\n")
                continue
            n += 1
            raw = raw.removeprefix(BOM) if n == 1 else raw
            if len(raw.rstrip(b"\r\n")) > MAX_LINE_BYTES:
                problems.append(problem(path, n, f"line is longer than {MAX_LINE_BYTES:,} bytes"))
                too_long = not raw.endswith(b"\n")
                continue
            if raw.strip():
                yield n, raw.rstrip(b"\r\n")


def json_object(path: Path, n: int, raw: bytes, problems: list[str], what: str = "") -> dict | None:
    """Line `n` of `path` as a JSON object; None, with one problem, when it is not UTF-8, not JSON, gives a key
    twice or is not an object. `what` says what an object must hold (" with task_id and output")."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        problems.append(
            problem(path, n, f"line is not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})")
        )
        return None
    try:
        obj = json.loads(text, object_pairs_hook=no_duplicate_keys)
    except json.JSONDecodeError as e:
        problems.append(problem(path, n, f"invalid JSON at column {e.colno}: {e.msg}"))
        return None
    # a key given twice
    except ValueError as e:
        problems.append(problem(path, n, str(e)))
        return None
    except RecursionError:
        problems.append(problem(path, n, "invalid JSON: nested too deeply"))
        return None
    if not isinstance(obj, dict):
        problems.append(problem(path, n, f"each line must be a JSON object{what}, got {type(obj).__name__}"))
        return None
    return obj


def read_objects(path: Path, problems: list[str], what: str = "") -> Iterator[tuple[int, dict]]:
    """(line number, object) of every valid line of a JSONL input; one problem per bad line in `problems`."""
    for n, raw in jsonl_lines(path, problems):
        if (obj := json_object(path, n, raw, problems, what)) is not None:
            yield n, obj


# ------------------------------------------------------------------ JSONL a run of ours appends: forgiving


def read_records(path: Path) -> list[dict]:
    """The records of a JSONL file a run appends to (nothing when there is none); a line cut short by a crash,
    or anything else that is not one JSON object, is dropped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for raw in data.splitlines():
        try:
            row = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(row, dict):
            out.append(row)
    return out
