"""A small unified-diff reader for skills whose input is a `git diff` (review, commit messages, ...)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class FileDiff:
    path: str  # the new path (the old one for a deleted file)
    old_path: str | None = None
    added: set[int] = field(default_factory=set)  # new-file line numbers of '+' lines
    visible: set[int] = field(default_factory=set)  # new-file line numbers shown: '+' and context
    removed: int = 0


@dataclass(frozen=True)
class Diff:
    files: dict[str, FileDiff]

    @property
    def changed_lines(self) -> int:
        return sum(len(f.added) + f.removed for f in self.files.values())

    def has_lines(self, path: str, start: int, end: int) -> bool:
        """True when every line start..end of `path` is shown in the diff (added or context)."""
        f = self.files.get(path.removeprefix("b/").removeprefix("./"))
        return f is not None and start <= end and all(n in f.visible for n in range(start, end + 1))


def _strip(path: str) -> str:
    path = path.split("\t")[0].strip()
    return path[2:] if path[:2] in ("a/", "b/") else path


@lru_cache(maxsize=4096)
def parse_diff(text: str) -> Diff:
    """Parse `git diff` output; malformed lines are skipped rather than raised on."""
    files: dict[str, FileDiff] = {}
    cur: FileDiff | None = None
    old_path = None
    new_line = old_left = new_left = 0
    for line in text.split("\n"):
        if old_left > 0 or new_left > 0:  # inside a hunk
            tag = line[:1]
            if tag == "+":
                cur.added.add(new_line), cur.visible.add(new_line)
                new_line, new_left = new_line + 1, new_left - 1
                continue
            if tag == "-":
                cur.removed += 1
                old_left -= 1
                continue
            if tag == " " or line == "":
                cur.visible.add(new_line)
                new_line, old_left, new_left = new_line + 1, old_left - 1, new_left - 1
                continue
            if tag == "\\":  # "\ No newline at end of file"
                continue
            old_left = new_left = 0  # a malformed hunk ends here
        if line.startswith("--- "):
            old_path = _strip(line[4:])
        elif line.startswith("+++ "):
            new = _strip(line[4:])
            path = old_path if new == "/dev/null" else new
            cur = files.setdefault(path, FileDiff(path, old_path if old_path != "/dev/null" else None))
        elif cur is not None and (m := HUNK.match(line)):
            old_left = int(m[2]) if m[2] is not None else 1
            new_line = int(m[3])
            new_left = int(m[4]) if m[4] is not None else 1
    return Diff(files)
