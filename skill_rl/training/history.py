"""A run's history.jsonl: the rows ART's `model.log` appends (art/model.py:1043-1052), one JSON object per logged
split and step (`step`, `recorded_at`, and the metrics: `train/reward`, `val/reward`, ...), read here and nowhere else.

A crash (kill -9, a full disk) can cut the last line short. Reading, such a line is dropped (skill_rl/files.py's
`read_records`), as is any row that is not an object with a whole-number `step`, and a metric that is not a number
is none. Before a resumed run logs, `mend` ends a torn last line with a line break, so that the row ART appends next
starts a line of its own instead of joining the torn one, where no reader would find it. Nothing is removed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from skill_rl.errors import Exit
from skill_rl.files import read_records
from skill_rl.text import display

# in the run's folder
NAME = "history.jsonl"


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def number(row: dict, key: str) -> float | None:
    """The row's metric `key` as a float; None when it is missing or not a number."""
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def rows(history: Path) -> list[dict]:
    """Every whole row of a run's history, in the order logged (none when the run has none yet)."""
    return [row for row in read_records(Path(history)) if _whole(row.get("step"))]


def values(logged: list[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) of every row (of `rows`) that logged `key` as a number."""
    return [(row["step"], v) for row in logged if (v := number(row, key)) is not None]


def mend(history: Path) -> None:
    """End a last line cut short by a crash with a line break (and say so), so that the next row logged is read."""
    try:
        with open(history, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if not size:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            line = sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b"")) + 1
            f.write(b"\n")
    except FileNotFoundError:
        return
    except OSError as e:
        raise Exit(2, f"cannot resume the run: {display(history)}: {e.strerror or e}") from None
    print(
        f"warning: {display(history)}:{line}: the last line was cut short (a crash?); it is skipped, and the run "
        "logs on from the next line",
        file=sys.stderr,
    )
