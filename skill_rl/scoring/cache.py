"""The judge cache: a RULER judgement already paid for is not paid again.

One entry per judge call: the key is a digest of everything that can change the judgement (the judge
model and where it is served, the rubric text, the SKILL.md the judge reads, the task's input, and the
group's distinct outputs in their order, as sent; the scorer's and ART's versions); the value is the
scores and explanations, with the tokens and cost the call took (what a hit saves). RULER ranks the
group as a whole, so a new output anywhere in it, or the same outputs in another order, is a new key:
no policy gets an old group's score for a new answer. Failed calls are never stored.

SQLite (standard library): each entry is committed as it is written, so a killed run keeps what it had
judged; processes share the file. A file that is not a readable cache is moved aside, with one warning
line, and a fresh one started; a folder that cannot be written leaves the run uncached, also said once.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

from skill_rl.scoring.usage import JudgeUsage

# of the key's recipe and of how candidates are shown to the judge: bump when either changes
VERSION = 1
FILE = "judge.sqlite3"


def default_path() -> Path:
    """$XDG_CACHE_HOME/skill-rl/judge.sqlite3, else ~/.cache/skill-rl/judge.sqlite3."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "skill-rl" / FILE


def key(model: str, base_url: str | None, rubric: str, skill_md: str, task_input: str, outputs: list[str]) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        # RULER's own prompt is part of what the judge reads
        art = version("openpipe-art")
    except PackageNotFoundError:
        art = None
    parts = {
        "v": VERSION,
        "art": art,
        "model": model,
        "base_url": (base_url or "").rstrip("/"),
        "rubric": rubric,
        "skill_md": hashlib.sha256(skill_md.encode()).hexdigest(),
        "input": task_input,
        "outputs": outputs,
    }
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


@dataclass
class Tally:
    """What the cache did in this process: hits, misses, and the judge use the hits did not repeat."""

    hits: int = 0
    misses: int = 0
    saved: JudgeUsage = field(default_factory=JudgeUsage)

    def describe(self) -> str:
        calls = self.hits + self.misses
        line = f"judge cache: {self.hits} of {calls} judge call(s) answered from the cache"
        if not self.hits:
            return line
        tokens = self.saved.prompt_tokens + self.saved.completion_tokens
        money = f"${self.saved.cost:.4f}" if self.saved.priced else "cost unknown"
        return f"{line}, saving {tokens:,} tokens ({money})"

    def as_dict(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "saved": self.saved.as_dict()}


class JudgeCache:
    """`get` and `put` judgements by key; never raises for a cache problem (the judge is asked instead)."""

    def __init__(self, path: Path, report=None):
        self.path, self.tally = Path(path), Tally()
        self._report = report or (lambda line: print(line, file=sys.stderr, flush=True))
        self._db = self._open()

    def _open(self) -> sqlite3.Connection | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._private()
            return self._connect()
        # cannot open, locked, read-only: left as it is
        except sqlite3.OperationalError as e:
            self._report(f"warning: judge cache {self.path} cannot be used ({e}); judging without it")
            return None
        # not a database, or not ours: keep it aside, start afresh
        except sqlite3.DatabaseError as e:
            aside = self.path.with_name(self.path.name + ".corrupt")
            try:
                os.replace(self.path, aside)
                self._private()
                db = self._connect()
            except (OSError, sqlite3.Error) as again:
                self._report(f"warning: judge cache {self.path} cannot be used ({e}; {again}); judging without it")
                return None
            self._report(
                f"warning: judge cache {self.path} was not a readable cache ({e}); moved to {aside.name}, "
                "starting a fresh one"
            )
            return db
        except (OSError, sqlite3.Error) as e:
            self._report(f"warning: judge cache {self.path} cannot be used ({e}); judging without it")
            return None

    def _private(self) -> None:
        """The cache file the user's alone (0600): the judge's explanations quote the user's tasks. Created so when
        missing (sqlite would make it 0644), and an existing one readable by others narrowed to it."""
        if not self.path.exists():
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        elif self.path.stat().st_mode & 0o077:
            os.chmod(self.path, 0o600)

    def _connect(self) -> sqlite3.Connection:
        # autocommit: each entry durable at once
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            db.execute("CREATE TABLE IF NOT EXISTS judgements (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute("SELECT key, value FROM judgements LIMIT 1").fetchall()
        except sqlite3.Error:
            db.close()
            raise
        return db

    def get(self, key: str, outputs: int) -> list[tuple[float, str]] | None:
        """The stored judgement of `outputs` candidates, or None (counted as a miss when the call is made)."""
        if self._db is None:
            return None
        try:
            row = self._db.execute("SELECT value FROM judgements WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as e:
            self._disable(e)
            return None
        try:
            value = json.loads(row[0]) if row else None
            scores = [(float(s), str(e)) for s, e in value["scores"]] if value else None
            saved = JudgeUsage(**value.get("usage", {})) if value else None
        except (ValueError, TypeError, KeyError, AttributeError):
            # an entry that is not ours: the judge is asked, and the answer replaces it
            return None
        if scores is None or len(scores) != outputs or not all(0.0 <= s <= 1.0 for s, _ in scores):
            # not what this call would return: ask the judge
            return None
        self.tally.hits += 1
        self.tally.saved.add(saved)
        return scores

    def put(self, key: str, scores: list[tuple[float, str]], usage: JudgeUsage) -> None:
        self.tally.misses += 1
        if self._db is None:
            return
        value = {"scores": [[s, e] for s, e in scores], "usage": {k: v for k, v in vars(usage).items()}}
        try:
            self._db.execute("INSERT OR REPLACE INTO judgements (key, value) VALUES (?, ?)", (key, json.dumps(value)))
        except sqlite3.Error as e:
            self._disable(e)

    def _disable(self, error: Exception) -> None:
        self._report(
            f"warning: judge cache {self.path} failed ({type(error).__name__}: {error}); judging without it "
            "for the rest of this run"
        )
        if self._db is not None:
            self._db.close()
        self._db = None
