"""Progress bars for `--score` and `--eval`: rich, on stderr, and only on a terminal.

A bar is drawn when stderr is a terminal and `--quiet` is not given; piped or redirected output
(CI logs, `2> file`) gets none, so logs hold only the lines a command prints on purpose.
"""

from __future__ import annotations

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
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=console, transient=True, disable=not shown(quiet, console),
                        redirect_stdout=False, redirect_stderr=False)
    with progress:
        task = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(task, n)
