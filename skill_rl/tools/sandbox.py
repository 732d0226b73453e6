"""Running one tool call in a child process (child.py): a scrubbed environment, the workspace as its working
directory, namespaces where the machine allows them, resource limits, a time limit and an output cap.

The parent reads the child's output in chunks and stops it (SIGKILL to its process group; the PID namespace
takes every process it started with it) when the output passes the cap or the time limit passes, so neither a
hanging tool nor one that prints a gigabyte holds this process or its memory.
"""

from __future__ import annotations

import functools
import marshal
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CHILD = Path(__file__).with_name("child.py")
# the folder that holds skill_rl/, for the child's `from skill_rl import tool`
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent.parent)
PATH = "/usr/local/bin:/usr/bin:/bin"
# git reads no system or global config, runs no hook, monitor, pager, editor, signer or credential helper
# Git run on a repository nobody here wrote (a tool call in a workspace, the mining of a real repository) runs no
# program the repository's config or the machine's names: no hooks, fsmonitor, pager, ssh, askpass or credential
# helper, no transport, no signing; no system or global config read, no prompt. mining/git.py passes these too.
GIT_SAFE = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.sshCommand=false",
    "core.askPass=false",
    "credential.helper=",
    "protocol.allow=never",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
)
GIT_SAFE_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
}
GIT_ENV = {
    **GIT_SAFE_ENV,
    "GIT_EDITOR": "true",
    "GIT_AUTHOR_NAME": "skill-rl",
    "GIT_AUTHOR_EMAIL": "skill-rl@localhost",
    "GIT_COMMITTER_NAME": "skill-rl",
    "GIT_COMMITTER_EMAIL": "skill-rl@localhost",
}
GIT_OPTIONS = GIT_SAFE
# RLIMIT_<name> of the child: address space, CPU seconds (set per call), size of a file written, processes
# (only inside a user namespace, where it counts the namespace's own), core files
LIMITS = {"AS": 2 << 30, "FSIZE": 64 << 20, "NPROC": 64, "CORE": 0}


@dataclass(frozen=True)
class Outcome:
    """What the child left: its output (at most the cap, plus one byte that says it went over), its exit status
    (None when it was stopped), and whether it was stopped for time or for output."""

    output: bytes
    status: int | None
    timed_out: bool = False
    over_cap: bool = False


def environment(workspace: Path) -> dict[str, str]:
    """The child's whole environment: nothing of this process's (no keys), HOME the workspace."""
    return {
        "PATH": PATH,
        "LANG": "C.UTF-8",
        "HOME": str(workspace),
        "PYTHONPATH": PACKAGE_ROOT,
        "PYTHONDONTWRITEBYTECODE": "1",
        "GIT_CEILING_DIRECTORIES": str(Path(workspace).parent),
        **GIT_ENV,
    }


def git_argv(argv: list[str]) -> list[str]:
    """A git command with the options that disable hooks and programs named in config."""
    if not argv or os.path.basename(argv[0]) != "git":
        return argv
    return [argv[0], *(w for o in GIT_OPTIONS for w in ("-c", o)), *argv[1:]]


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _collect(proc: subprocess.Popen, deadline: float, cap: int) -> tuple[bytearray, bool, bool]:
    """Read the child's stdout until EOF, the deadline or the cap: (what was read, timed out, over the cap)."""
    out = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out, True, False
            if not sel.select(left):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                return out, False, False
            out += chunk[: cap + 1 - len(out)]
            if len(out) > cap:
                return out, False, True


def run_child(spec: dict, workspace: Path, *, time_limit: float, cap: int, isolate: bool) -> Outcome:
    """Run one call's spec (child.py) and collect what it leaves; never raises for what the call does."""
    limits = {**LIMITS, "CPU": int(time_limit) + 1}
    full = {**spec, "workspace": str(workspace), "isolate": "required" if isolate else "none", "limits": limits}
    # a command's child needs only the standard library before it execs: without `site` (-S) Python starts in a
    # third of the time, and a step plays hundreds of calls; a tools.py function may import installed packages
    site = ["-S"] if spec["kind"] in ("bash", "probe") else []
    proc = subprocess.Popen(
        [sys.executable, *site, str(CHILD)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if spec["kind"] in ("bash", "probe") else subprocess.DEVNULL,
        cwd=workspace,
        env=environment(workspace),
        start_new_session=True,
        close_fds=True,
    )
    deadline = time.monotonic() + time_limit
    try:
        # marshal, read by the same interpreter: the child need not import json to read it
        proc.stdin.write(marshal.dumps(full))
        proc.stdin.close()
        out, timed_out, over = _collect(proc, deadline, cap)
    except OSError:
        out, timed_out, over = bytearray(), False, False
    finally:
        if proc.poll() is None:
            try:
                proc.wait(max(0.0, min(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
        stopped = proc.returncode is None
        _stop(proc)
        proc.wait()
        proc.stdout.close()
    status = None if stopped or timed_out or over else proc.returncode
    return Outcome(bytes(out), status, timed_out or (stopped and not over), over)


@functools.cache
def namespaces_refused() -> str | None:
    """Why this machine refuses the child's namespaces (None: it allows them); asked once a process."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    outcome = run_child({"kind": "probe"}, tmp, time_limit=10.0, cap=4000, isolate=True)
    if outcome.status == 0:
        return None
    return " ".join(outcome.output.decode("utf-8", "replace").split())[:200] or f"exit status {outcome.status}"
