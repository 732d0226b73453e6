"""Where `--score` and `--eval` write their records, made safe to point anywhere, and safe to resume.

Before anything is opened for writing, `--out` is refused (exit 2, one line) when it is an input
(the scored file, the skill's files, or a link to one), a folder where a file is needed or a file
where a folder is, or cannot be opened without truncating it. A write that fails later (a full
disk) stops the command with one line and exit 1; what was written before stays valid JSONL for
`--resume`. Every write goes through `keys.redact`.

Every record names the command that wrote it (skill, a digest of the input file, and for --eval
the samples and each model's id and endpoint). `--resume` keeps a file only when every record in it
belongs to this command; any other is refused with exit 2, before anything is written.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TextIO

from skill_rl.errors import Exit
from skill_rl.keys import redact


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    # one of them does not exist (yet)
    except OSError:
        return a.resolve() == b.resolve()


def refuse_inputs(out: Path, inputs: dict[Path, str]) -> None:
    """Exit 2 when `out` is (or links to) one of `inputs`, named in the message by their role."""
    for path, role in inputs.items():
        if _same(out, path):
            raise Exit(2, f"--out {out} is {role} {path}: writing there would destroy it; pass another --out")


def skill_files(skill) -> dict[Path, str]:
    return {
        p: "the skill's"
        for p in (*(skill.path / n for n in ("SKILL.md", "tasks.jsonl", "checks.py")), skill.tasks_path)
    }


def prepare_file(out: Path, inputs: dict[Path, str]) -> None:
    """--out FILE: refused when it is an input or cannot be written; its folders are created; nothing is truncated."""
    refuse_inputs(out, inputs)
    if out.is_dir():
        raise Exit(2, f"--out {out} is a folder; pass a file to write the JSONL records to")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        # proves it can be written, and changes nothing that is there
        with open(out, "a"):
            pass
    except OSError as e:
        raise Exit(2, f"cannot write --out {out}: {e.strerror or e}") from None


def prepare_folder(out: Path, inputs: dict[Path, str]) -> None:
    """--out FOLDER: refused when it is a file (or lies under one), an input, or cannot be created."""
    refuse_inputs(out, inputs)
    if out.exists() and not out.is_dir():
        raise Exit(
            2, f"--out {out} is a file; --eval writes a folder (results.md, results.json, chart.png, records.jsonl)"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Exit(2, f"cannot create --out {out}: {e.strerror or e}") from None


class Sink:
    """Appends records to an open file, one write per group; a failed write becomes one clean Exit(1)."""

    def __init__(self, stream: TextIO, name: str):
        self.stream, self.name = stream, name

    def write(self, text: str) -> None:
        try:
            self.stream.write(redact(text))
            self.stream.flush()
        # `--score F | head`: the reader left; say so once, quietly
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
            raise Exit(1, f"{self.name} was closed by its reader; stopped") from None
        except OSError as e:
            raise Exit(
                1,
                f"cannot write {self.name}: {e.strerror or e}; the records written before are kept "
                "(--resume continues)",
            ) from None


def digest(path: Path) -> str:
    """The file's content, in 16 hex digits of its SHA-256: what tells one input from another of the same name."""
    with open(path, "rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()[:16]


def refuse_foreign(records: list[dict], expect: dict, where: Path, specs: dict[str, str] | None = None) -> None:
    """Exit 2 unless every record has `expect`'s values (and, with `specs`, its model's id and endpoint)."""
    for r in records:
        wrong = next((f"{k} {r.get(k)!r}, this command's is {v!r}" for k, v in expect.items() if r.get(k) != v), None)
        if wrong is None and specs is not None and specs.get(r.get("model")) != r.get("spec"):
            wrong = (
                f"model {r.get('model')!r} as {r.get('spec')!r}, this command's is {specs[r['model']]!r}"
                if r.get("model") in specs
                else f"model {r.get('model')!r}, which no --model names"
            )
        if wrong:
            raise Exit(
                2,
                f"{where} holds records of another command ({wrong}); start afresh without --resume "
                "(its records are then replaced), or pass another --out",
            )
