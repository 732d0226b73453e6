"""The output, read once per output: its lines, headings and `Label: value` fields (View), and the lines of a named
section or field.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from skill_rl.scoring.derived.grammar import ITEM


class View(NamedTuple):
    lines: tuple[str, ...]
    # (line index, level, lower-cased title)
    heads: tuple[tuple[int, int, str], ...]
    # lower-cased title -> index in `heads` of its first heading
    first_head: dict[str, int]
    # lower-cased text before a line's first ':' -> the rest of the first such line, stripped
    fields: dict[str, str]


def heading(line: str) -> tuple[int, str] | None:
    """(level, title) of an ATX heading line such as `## Findings`; None for any other line."""
    if not line.startswith("#"):
        return None
    level = len(line) - len(line.lstrip("#"))
    if level > 6 or (len(line) > level and line[level] not in " \t"):
        return None
    title = line[level:].strip().rstrip("#").strip()
    return (level, title) if title else None


# every check of one output reads the same view
@lru_cache(maxsize=128)
def view(output: str) -> View:
    lines = tuple(output.replace("\r\n", "\n").strip().split("\n"))
    heads = tuple((i, h[0], h[1].lower()) for i, line in enumerate(lines) if (h := heading(line)))
    first_head: dict[str, int] = {}
    for k, (_, _, title) in enumerate(heads):
        first_head.setdefault(title, k)
    fields: dict[str, str] = {}
    for line in lines:
        label, colon, value = line.partition(":")
        if colon:
            fields.setdefault(label.lower(), value.strip())
            # `**Goal:** text`, `**Goal**: text`: read under the bare label too
            if label[:2] in ("**", "__"):
                bold = label[:2]
                fields.setdefault(label.strip().strip(bold).strip().lower(), value.strip().removeprefix(bold).strip())
    return View(lines, heads, first_head, fields)


def _section(v: View, name: str | None) -> tuple[str, ...] | None:
    """The lines under the first heading titled `name` (to the next heading); None: text before any heading."""
    if name is None:
        return v.lines[: v.heads[0][0]] if v.heads else v.lines
    k = v.first_head.get(name)
    if k is None:
        return None
    return v.lines[v.heads[k][0] + 1 : v.heads[k + 1][0] if k + 1 < len(v.heads) else len(v.lines)]


def _field(v: View, label: str) -> str | None:
    key = label.lower()
    if ":" not in key:
        return v.fields.get(key)
    # a label with a colon of its own (from a code span): read line by line
    key += ":"
    return next((line[len(key) :].strip() for line in v.lines if line[: len(key)].lower() == key), None)


def _named(v: View, kind: str, name: str) -> tuple[str, ...] | None:
    """The lines of a named target: a field's value, else (or for a section) the section's lines."""
    if kind != "section":
        value = _field(v, name)
        if value is not None or kind == "field":
            return None if value is None else (value,)
    return _section(v, name.lower())


def _is_item(line: str) -> bool:
    return ITEM.match(line) is not None
