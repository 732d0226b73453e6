"""One run, one process; and how a run is stopped.

`RunLock` holds an exclusive lock on `<run dir>/run.lock` (flock) for as long as a training runs. A
second training of the same run finds it taken and exits 2 naming the first one's PID. The kernel
drops the lock when its process ends, however it ends (SIGKILL included), so a lock is never stale.
(flock is reliable on local file systems; on NFS it depends on the server.)

`interrupted_as` does the same for `--score` and `--eval`: one line, the records so far intact.

`Stopper` makes SIGINT (Ctrl-C) and SIGTERM behave alike: the first asks the run to stop after the
step in progress; the second abandons that step at once (its rollouts are dropped, nothing of it is
trained, the run resumes at it), except during the train call and the log that follows, which
always finish so that a step is never half trained. Either way the run exits with 128 + the first
signal's number (130 for Ctrl-C, 143 for SIGTERM), as a shell reports a process that signal killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import sys
from pathlib import Path

from skill_rl.errors import Exit

NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class RunLock:
    def __init__(self, folder: Path):
        self.path = Path(folder) / "run.lock"
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise Exit(
                2,
                f"run {self.path.parent} is being trained by another process (PID {holder}); wait for it "
                "to finish, stop it (it stays resumable), or pass another --run-name",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class Stopper:
    """Set up inside the training task; `requested` is an asyncio.Event the loop checks between steps."""

    def __init__(self):
        self.requested = asyncio.Event()
        self.aborted = False
        # the first signal received
        self.signal: int | None = None
        self._task = asyncio.current_task()
        self._shielded = False
        loop = asyncio.get_running_loop()
        for sig in NAMES:
            loop.add_signal_handler(sig, self._signal, sig)

    def _signal(self, sig: int) -> None:
        if not self.requested.is_set():
            self.requested.set()
            self.signal = self.signal or int(sig)
            print(
                f"\n{NAMES[sig]}: stopping after this step (again: stop at once; the run stays resumable)",
                file=sys.stderr,
                flush=True,
            )
        elif not self.aborted:
            self.aborted = True
            if self._shielded:
                print(
                    f"\n{NAMES[sig]}: stopping as soon as this step's train call is saved", file=sys.stderr, flush=True
                )
            else:
                self._task.cancel()

    def exit_code(self, code: int) -> int:
        """128 + the signal that stopped the run; `code` when none did."""
        return 128 + self.signal if self.signal else code

    @contextlib.contextmanager
    def shielded(self):
        """Inside, a second signal waits: the train call and its log always finish."""
        self._shielded = True
        try:
            yield
        finally:
            self._shielded = False
            if self.aborted:
                self.requested.set()


@contextlib.contextmanager
def interrupted_as(message: str):
    """--score and --eval: Ctrl-C or SIGTERM ends the command with one line, `message`, and exit 1 (what was
    written is complete: each group or task is one write)."""
    old = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    except KeyboardInterrupt:
        raise Exit(1, message) from None
    finally:
        signal.signal(signal.SIGTERM, old)
