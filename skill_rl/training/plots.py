"""The run's reward plot: train reward and each rubric dimension per step, val reward at each validation,
the best validation marked. Drawn from the run's `history.jsonl`, so a resumed run's plot holds every
step. matplotlib (its Agg renderer, no display needed) is imported only when a plot is drawn.

A training run draws it in a worker thread (`Plotter`), so that the next step does not wait for it: matplotlib's
object API (Figure, Agg), unlike pyplot, keeps no global state, and one plot is drawn at a time.
"""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

from skill_rl.console import chart_text
from skill_rl.files import atomic_write
from skill_rl.skills import DIMENSIONS
from skill_rl.training import history

PLOT_NAME = "rewards.png"


def read_history(path: Path) -> dict[str, list[tuple[int, float]]]:
    """(step, value) series per metric of interest (training/history.py: a line cut short by a crash is skipped)."""
    keys = ("train/reward", *(f"train/{d}" for d in DIMENSIONS), "val/reward")
    logged = history.rows(path)
    return {k: found for k in keys if (found := history.values(logged, k))}


def reward_plot(run_dir: Path, title: str = "") -> Path | None:
    """Write `<run_dir>/rewards.png` (whole or not at all) and return its path; None when there is nothing yet."""
    series = read_history(Path(run_dir) / history.NAME)
    if not series:
        return None
    # no pyplot: no global state, no display, Agg to write the PNG
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(8, 4.5))
    ax = fig.subplots()
    for key, style in [
        ("train/reward", dict(lw=2, color="black")),
        *((f"train/{d}", dict(lw=1, alpha=0.7)) for d in DIMENSIONS),
    ]:
        if key in series:
            ax.plot(*zip(*series[key]), label=key.removeprefix("train/") + " (train)", **style)
    if "val/reward" in series:
        ax.plot(*zip(*series["val/reward"]), "o--", color="tab:red", label="reward (val)")
        step, best = max(series["val/reward"], key=lambda p: p[1])
        ax.annotate(
            f"best {best:.3f} @ {step}",
            (step, best),
            xytext=(0, 10),
            textcoords="offset points",
            ha="center",
            color="tab:red",
        )
        ax.plot([step], [best], "*", ms=14, color="tab:red")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="step", ylabel="mean score", ylim=(0, 1.08), title=chart_text(title) if title else "rewards")
    ax.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    path = Path(run_dir) / PLOT_NAME
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    # OSError (a full disk) for the caller to report
    atomic_write(path, png.getvalue())
    return path


def _draw(run_dir: Path, title: str) -> Path | None:
    """reward_plot, with a file that cannot be written (a full disk) a warning: the run goes on, and the plot is
    drawn again at the next validation."""
    try:
        return reward_plot(run_dir, title)
    except OSError as e:
        print(f"warning: cannot write {PLOT_NAME}: {e.strerror or e}", file=sys.stderr)
        return None


class Plotter:
    """Draws the reward plot in a worker thread, one plot at a time; `done()` waits for the last one."""

    def __init__(self):
        self._drawing: asyncio.Future | None = None

    async def draw(self, run_dir: Path, title: str = "") -> None:
        """Start drawing; a plot still being drawn is finished first (its error, if any, is raised here)."""
        await self.done()
        self._drawing = asyncio.ensure_future(asyncio.to_thread(_draw, run_dir, title))

    async def done(self) -> Path | None:
        drawing, self._drawing = self._drawing, None
        return await drawing if drawing else None
