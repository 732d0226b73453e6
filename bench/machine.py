"""What the CPU benchmarks need before they start: the [cpu] extra and the tiny model, and a folder to run in."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from skill_rl import cpu


def cpu_workdir(prefix: str, chosen: Path | None = None) -> Path:
    """`chosen`, else a new temporary folder named `prefix`...; exit 2 with one line when the [cpu] extra or the
    tiny model is missing. Idle torch threads are set to sleep first (cpu.quiet_threads), before torch loads."""
    if not cpu.available():
        print(f"error: needs the [cpu] extra and the tiny model: {cpu.TINY_INSTALL}", file=sys.stderr)
        raise SystemExit(2)
    cpu.quiet_threads()
    return chosen or Path(tempfile.mkdtemp(prefix=prefix))
