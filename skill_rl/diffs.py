"""A small unified-diff reader for skills whose input is a `git diff` (review, commit messages, ...)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
INDEX = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$")


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


def _swap_side(path: str, prefix: str) -> str:
    """`b/x` as the other side's `a/x` (quoted paths too); /dev/null stays."""
    quote = '"' if path.startswith('"') else ""
    bare = path[len(quote):]
    return path if path == "/dev/null" else quote + prefix + (bare[2:] if bare[:2] in ("a/", "b/") else bare)


def _reverse_header(line: str, pending: dict) -> list[str]:
    """One file-header line of a patch, reversed; '---' and 'old mode' wait for the line they pair with."""
    if line.startswith("--- "):
        pending["---"] = line[4:]
        return []
    if line.startswith("+++ ") and "---" in pending:
        return [f"--- {_swap_side(line[4:], 'a/')}", f"+++ {_swap_side(pending.pop('---'), 'b/')}"]
    if m := INDEX.match(line):
        return [f"index {m[2]}..{m[1]}{m[3]}"]
    if line.startswith(("new file mode ", "deleted file mode ")):
        return ["deleted" + line[3:] if line.startswith("new") else "new" + line[7:]]
    if line.startswith("old mode "):
        pending["old mode"] = line[9:]
        return []
    if line.startswith("new mode ") and "old mode" in pending:
        return [f"old mode {line[9:]}", f"new mode {pending.pop('old mode')}"]
    return [line]


def reverse_diff(text: str) -> str:
    """The patch that undoes `text`, a git patch without renames: '+' and '-' lines (a run of changes still
    lists its removals first), hunk ranges, blob ids, modes and the /dev/null side all swap."""
    out: list[str] = []
    minus: list[str] = []
    plus: list[str] = []
    last, pending, in_hunk = None, {}, False
    for line in text.split("\n"):
        tag = line[:1]
        if in_hunk and tag in ("+", "-", "\\"):
            if tag == "\\":  # "\ No newline at end of file" stays after the line it describes
                (last if last is not None else out).append(line)
            else:
                last = minus if tag == "+" else plus
                last.append(("-" if tag == "+" else "+") + line[1:])
            continue
        out += minus + plus
        minus, plus, last = [], [], None
        if m := HUNK.match(line):
            in_hunk = True
            old, new = m[1] + (f",{m[2]}" if m[2] is not None else ""), m[3] + (f",{m[4]}" if m[4] is not None else "")
            out.append(f"@@ -{new} +{old} @@{line[m.end():]}")
        elif in_hunk and not line.startswith("diff --git "):
            out.append(line)
        else:
            in_hunk = False
            out += _reverse_header(line, pending)
    return "\n".join(out + minus + plus)
