"""A time limit for user code (a skill's checks.py) run in this process, without threads; and importing a skill's own
Python file under it (`import_user_file`: checks.py, exploits.py, tools.py).

    with Watchdog(limit_seconds) as dog:
        value, error = dog.call(fn, *args)   # error: the exception fn raised, or a Timeout

A check runs on the main thread, where Python runs signal handlers between bytecodes and where `re`
polls for them while it backtracks. So a one-shot interval timer, armed for each call and disarmed when it
returns, can stop a check that loops, sleeps or backtracks forever: its SIGALRM handler raises `Timeout`, a
BaseException that a check's `except Exception` does not swallow. If the code swallows it anyway (a bare
`except:` in a retry loop), the timer repeats every limit / RETRIES and the Timeout is raised on every line
the code runs (sys.monitoring LINE events), so it escapes every handler; and a call that went past its limit
counts as timed out even if it then returns a value. A call that returns within its limit sends no signal at
all: a long synchronous scoring pass inside an event loop never fills the loop's wake-up channel (a timer
that ticked through every call did, and Python printed "Exception ignored ... BlockingIOError" by the
hundred). A thread could not do this: `re` holds the GIL, so a regex stuck in a thread freezes every thread,
the event loop included; and a thread cannot be stopped. What remains unbounded: C code that never checks for
signals (`sum(range(10**15))`, `10**10**8`), and regexes whose backtracking is mostly long C scans
(`re` polls for signals every 4,096 steps, so `[a-z.]+[.][a-z]+:` searched over 5 MB of letters is
stopped only after minutes): the shipped checks' regexes are linear for that reason, and tested on
5 MB outputs. Off the main thread nothing is bounded (the call just runs). While a check runs it
holds the event loop, as any synchronous scoring does; the limit bounds that too. The timer is armed only inside `with`, and any SIGALRM handler and
timer that were set before (a test's own alarm) are put back on the way out.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from skill_rl.text import brief, problem

_LINE = sys.monitoring.events.LINE
# the sys.monitoring tool id we hold, once we needed one
_tool: list[int] = []


class Timeout(BaseException):
    """Raised inside user code that ran past its limit."""


class Watchdog:
    """Within `with`, each `call` may run `limit` seconds; one past it is stopped."""

    # after the first Timeout, how often a second limit is split to raise it again
    RETRIES = 4

    def __init__(self, limit: float):
        self.limit = limit
        # a call is in progress
        self.running = False
        # the current call ran past its limit
        self.expired = False
        # Timeouts raised into the current call
        self.fired = 0
        self.armed = False

    def __enter__(self) -> Watchdog:
        self.armed = threading.current_thread() is threading.main_thread()
        if self.armed:
            self._entered = time.monotonic()
            self._old_handler = signal.signal(signal.SIGALRM, self._alarm)
            # ours runs only during a call
            self._old_timer = signal.setitimer(signal.ITIMER_REAL, 0)
        return self

    def __exit__(self, *exc) -> None:
        if not self.armed:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if self._old_handler is None else self._old_handler)
        delay, interval = self._old_timer
        # someone else's alarm was running: let it go off when it would have
        if delay > 0:
            signal.setitimer(signal.ITIMER_REAL, max(delay - (time.monotonic() - self._entered), 1e-3), interval)
        self.armed = False

    def _alarm(self, signum, frame) -> None:
        if not self.running:
            # the call returned as the timer went off
            return
        self.expired = True
        self.fired += 1
        # the last Timeout was swallowed: raise it on every line from now on
        if self.fired > 1:
            self._every_line(True)
        raise Timeout()

    def _every_line(self, on: bool) -> None:
        if not _tool:
            free = [i for i in (4, 3) if sys.monitoring.get_tool(i) is None]
            # a debugger or coverage tool holds them: a swallowed Timeout is retried each tick
            if not free:
                return
            sys.monitoring.use_tool_id(free[0], "skill-rl watchdog")
            _tool.append(free[0])
        sys.monitoring.register_callback(_tool[0], _LINE, self._line if on else None)
        sys.monitoring.set_events(_tool[0], _LINE if on else 0)

    def _line(self, code, line: int) -> None:
        if code is not _CALL and self.running and self.expired:
            raise Timeout()

    def call(self, fn: Callable, *args) -> tuple[Any, BaseException | None]:
        """(fn(*args), None), or (None, the exception it raised, or a Timeout once it ran past the limit).
        KeyboardInterrupt is the user's Ctrl-C, not the code's failure: it propagates."""
        self.fired, self.expired = 0, False
        try:
            try:
                self.running = True
                # one shot at the limit, then (only for code that swallowed it) a few more
                if self.armed:
                    signal.setitimer(signal.ITIMER_REAL, self.limit, self.limit / self.RETRIES)
                value, error = fn(*args), None
            finally:
                # a Timeout raised before this line is still caught below
                self.running = False
                if self.armed:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except KeyboardInterrupt:
            raise
        # user code may raise anything, SystemExit included: it is reported, not fatal
        except BaseException as e:
            value, error = None, e
        if self.fired:
            if self.fired > 1:
                self._every_line(False)
            return None, error if isinstance(error, Timeout) else Timeout()
        return value, error


_CALL = Watchdog.call.__code__


# ------------------------------------------------------------------ a skill's own Python files


def _user_line(error: BaseException, path: Path) -> int | None:
    """The line of `path` that was running when `error` was raised (the innermost frame in that file)."""
    line, tb, target = None, error.__traceback__, os.path.abspath(path)
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def import_user_file(folder: Path, file: str, lint, problems: list[str], seconds: float) -> ModuleType | None:
    """Import a skill's own Python file (checks.py, exploits.py, tools.py): user code, so bounded in time, its prints sent
    to stderr (stdout may be JSONL), whatever it raises, SystemExit included, reported as one line naming the
    line it was running, and what `lint(path, module)` finds wrong with it reported the same way."""
    path = folder / file
    if not path.exists():
        return None
    name = f"skill_rl_{path.stem}_{folder.name.replace('-', '_')}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # dataclasses and pydantic look their module up while it runs
    sys.modules[name] = module
    with Watchdog(seconds) as dog, contextlib.redirect_stdout(sys.stderr):
        _, error = dog.call(spec.loader.exec_module, module)
    if isinstance(error, SyntaxError):
        problems.append(problem(path, error.lineno, f"{file} does not parse: {error.msg}"))
    elif isinstance(error, Timeout):
        problems.append(problem(path, _user_line(error, path), f"{file} did not finish importing within {seconds:g} s"))
    elif isinstance(error, ModuleNotFoundError) and (error.name or "").startswith("skill_rl."):
        problems.append(
            problem(
                path,
                _user_line(error, path),
                f"{file} imports {error.name}, which skill-rl no longer has: "
                "import what it needs from the package itself (from skill_rl import check, exploit, Task)",
            )
        )
    elif error is not None:
        problems.append(problem(path, _user_line(error, path), f"{file} failed to import: {brief(error)}"))
    else:
        found = lint(path, module)
        problems.extend(found)
        if not found:
            return module
    del sys.modules[name]
    return None
