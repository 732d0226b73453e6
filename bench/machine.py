"""What the CPU benchmarks need before they start: the [cpu] extra and the tiny model, and a folder to run in."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from skill_rl import cpu


def cpu_workdir(prefix: str, chosen: Path | None = None) -> Path:
    """`chosen` (made if missing), else a new temporary folder named `prefix`...; exit 2 with one line when the
    [cpu] extra or the tiny model is missing, or `chosen` cannot be made. Idle torch threads are set to sleep first (cpu.quiet_threads), before torch loads."""
    if not cpu.available():
        print(f"error: needs the [cpu] extra and the tiny model: {cpu.TINY_INSTALL}", file=sys.stderr)
        raise SystemExit(2)
    cpu.quiet_threads()
    if chosen is None:
        return Path(tempfile.mkdtemp(prefix=prefix))
    # a bench's --workdir: where to keep its run, new or not
    try:
        chosen.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"error: --workdir {chosen}: {e.strerror or e}", file=sys.stderr)
        raise SystemExit(2)
    return chosen


SKILLS = Path(__file__).resolve().parent.parent / "skills"


def git_commit_cpu(*flags: str) -> list[str]:
    """train_skill.py's arguments for a CPU run of the shipped git-commit skill scored by its checks alone."""
    return ["--skills-dir", str(SKILLS), "--skill", "git-commit", "--backend", "cpu", "--judge", "none", *flags]


def served_eval(server, out: Path, *flags: str, names: tuple[str, ...] = ("base", "trained")) -> list[str]:
    """train_skill.py's arguments for --eval of git-commit, by its checks alone, of the models behind `server`
    (cpu.serve_checkpoint: `base`, the base model, and `trained`, the run's checkpoint), written to `out`."""
    models = [word for name in names for word in ("--model", f"{name}@{server.url}")]
    evaluating = ("--skills-dir", str(SKILLS), "--skill", "git-commit", "--eval", "--judge", "none")
    return [*evaluating, *models, "--api-key", server.api_key, "--out", str(out), *flags]
