"""Progress on stderr: rich bars on a terminal, plain periodic lines when piped.

A bar is drawn when stderr is a terminal and `--quiet` is not given. `bar` (`--score`, `--eval`) draws nothing
when stderr is piped or redirected (CI logs, `2> file`). `phase` (training's long phases: the warm start's
batches, an RL step's rollouts and its training pass, a validation) prints instead, when piped, one plain line
every PERIOD seconds while the phase runs (`warm start: 12/32 batches, 96 s`), from a thread of its own, so that a
phase that holds the event loop or a core (a training pass in torch) still says it is alive. `--quiet`: neither.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def shown(quiet: bool = False, console: Console | None = None) -> bool:
    """Whether a bar would be drawn: a terminal, and not --quiet."""
    return not quiet and (console or Console(stderr=True)).is_terminal


@contextmanager
def bar(description: str, total: int, quiet: bool = False, console: Console | None = None):
    """Yield `advance(n=1)`; the bar disappears when done. Draws nothing when `shown()` is false."""
    console = console or Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not shown(quiet, console),
        redirect_stdout=False,
        redirect_stderr=False,
    )
    with progress:
        task = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(task, n)


# seconds between two plain lines of a piped phase (SKILL_RL_PROGRESS_SECONDS overrides it)
PERIOD = 8.0


@contextmanager
def phase(description: str, total: int, unit: str = "", quiet: bool = False, console: Console | None = None):
    """Yield `advance(n=1)` for a long phase: a bar on a terminal, else a line every PERIOD seconds while it runs
    (none for a phase shorter than that), else (--quiet) nothing."""
    console = console or Console(stderr=True)
    if quiet or shown(quiet, console):
        with bar(description, total, quiet, console) as advance:
            yield advance
        return
    done, stop, started = [0], threading.Event(), time.monotonic()
    period = float(os.environ.get("SKILL_RL_PROGRESS_SECONDS") or PERIOD)

    def beat():
        while not stop.wait(period):
            print(
                f"{description}: {done[0]}/{total}{' ' + unit if unit else ''}, {time.monotonic() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    thread = threading.Thread(target=beat, name="skill-rl-progress", daemon=True)
    thread.start()
    try:
        yield lambda n=1: done.__setitem__(0, done[0] + n)
    finally:
        stop.set()
        thread.join()
