"""The grammar's words and patterns (limits, ranges, counts, enumerations), numbers read from prose, and the records a
derivation is made of (Sentence, Derived, Derivation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, NamedTuple

from markdown_it import MarkdownIt

_md = MarkdownIt("commonmark")
PLACEHOLDER = re.compile(r"<([^<>\s][^<>]*)>")
NAME_WORD = re.compile(r"\s*(section|field|line)\b")
FIELD = re.compile(r"^(?:\*\*|__)?([A-Za-z][\w ()/'-]{0,40})(?::(?:\*\*|__)?|(?:\*\*|__):)[ \t]+(<[^<>]+>)[ \t]*$")
"""A field line `Label: <value>`, the label also in bold (`**Goal:** <...>`, `**Goal**: <...>`)."""
SHAPE = re.compile(r"^([^\s<>`]+)<([A-Za-z][\w -]*)>$")
ITEM = re.compile(r"(?:[-*+]|\d{1,9}[.)])[ \t]")
SPLIT = re.compile(r"(?<=[.!?;])\s+")
NUMBERS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve "
        "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
}
UNITS = {
    "character": "chars",
    "characters": "chars",
    "chars": "chars",
    "word": "words",
    "words": "words",
    "line": "lines",
    "lines": "lines",
    "item": "items",
    "items": "items",
    "entry": "items",
    "entries": "items",
    "bullet": "items",
    "bullets": "items",
    "sentence": "sentences",
    "sentences": "sentences",
    "paragraph": "paragraphs",
    "paragraphs": "paragraphs",
}
NUM = r"(\d[\d,]*|" + "|".join(NUMBERS) + r")"
MAX_WORDS = r"at most|no more than|up to|no longer than|not more than|a maximum of|maximum of|max\.?|within"
# strictly below N: at most N - 1
BELOW_WORDS = r"under|fewer than|less than|shorter than|below"
MIN_WORDS = r"at least|no fewer than|no less than|not fewer than|not less than|a minimum of|minimum of"
LIMIT = re.compile(
    r"\b(" + MAX_WORDS + "|" + BELOW_WORDS + "|" + MIN_WORDS + r")\s+" + NUM + r"\s+(" + "|".join(UNITS) + r")\b"
    r"|\b" + NUM + r"\s+(" + "|".join(UNITS) + r")\s+or\s+(fewer|less)\b"
    r"|\b" + NUM + r"\s+or\s+(fewer|less)\s+(" + "|".join(UNITS) + r")\b"
)
BELOW = re.compile(BELOW_WORDS)
UNIT_RX = r"(" + "|".join(sorted(UNITS, key=len, reverse=True)) + r")\b"
RANGE = re.compile(
    r"\b(?:(between)\s+)?"
    + NUM
    + r"(?:\s*[-\u2013\u2014]\s*|\s+(?:to|or|and)\s+)"
    + NUM
    + r"\s+"
    + UNIT_RX
    + r"|\b(exactly)\s+"
    + NUM
    + r"\s+"
    + UNIT_RX
)
"""A range ("one or two sentences", "3-5 items", "between 3 and 5 bullets") or an exact count ("exactly three
bullets"): a minimum and a maximum on one target."""
HEDGE = re.compile(
    r"(?:\b(?:default|defaults to|usually|typically|ideally|roughly|about|around|approximately|"
    r"preferably|if possible|recommended|aim for)|~)\s*$"
)
HEDGE_AFTER = re.compile(r"\s*(?:\(?\s*(?:if possible|where possible|if you can|ideally|or so|roughly|recommended)\b)")
"""Words right before a number that make it a suggestion, not a limit ("default 6-10 items", "about 100 words"): no
check is derived; the sentence is listed as not derived."""
MINIMUM = re.compile(MIN_WORDS)


def _limit_parts(m: re.Match) -> tuple[str, str, str]:
    """(bound word, number, unit) of a LIMIT match in any of its three shapes; "N or fewer" reads "at most"."""
    if m[1]:
        return m[1], m[2], m[3]
    if m[4]:
        return "at most", m[4], m[5]
    return "at most", m[7], m[9]


NEGATION = re.compile(r"\b(no|not|never|without|nor|don't|avoid)\b")
FENCE_WORDS = re.compile(r"\bcode (?:fences?|blocks?)\b|\bfenced\b|```")
PREAMBLE_WORDS = re.compile(
    r"\bno preamble\b|\bnothing (?:before|but|else)\b|\bno (?:text|words|introduction) before\b"
    r"|\b(?:not|never) (?:preface|precede)\b|\b(?:output|return|print|give) only the\b"
    r"|\b(?:starts?|opens?|begins?) with (?:this|the) (?:header|heading|template)\b"
    r"|\b(?:not|never) (?:add|write|put) (?:any )?(?:text|anything|words) before\b"
)
CHATTER = re.compile(r"(here is|here's|here are|sure\b|certainly|okay\b|ok\b|below is|as requested|i have|i've)", re.I)
WHOLE = re.compile(
    r"\b(?:whole|entire) (?:output|answer|response)\b|\bthe (?:output|answer|response)\b|\bin (?:all|total)\b"
)


class Sentence(NamedTuple):
    # the sentence, code spans in backticks
    text: str
    # (offset in text, content) of each code span
    codes: tuple[tuple[int, str], ...]
    # line in SKILL.md where it starts
    line: int


@dataclass(frozen=True)
class Derived:
    """One derived check and where it came from, for `--check`."""

    # a rubric check; its docstring says what it checks
    fn: Callable
    # line in SKILL.md of the sentence or template line it came from
    line: int
    # that sentence or template line
    source: str


@dataclass(frozen=True)
class Derivation:
    checks: tuple[Derived, ...]
    # sentences that read like a limit, count or enumeration but derive no check (or
    ignored: tuple[Sentence, ...]
    # hold a limit whose subject the grammar cannot resolve): `--check` lists them as "not derived"
    # SKILL.md as displayed
    path: str
    # one line per limit too big to read, contradiction or check no output can pass
    problems: tuple[str, ...] = ()


# a length limit above this (characters of one output) is not a limit
MAX_LIMIT = 1_000_000_000


def _number(word: str) -> int | None:
    """A number written in digits (`3,000`) or as a word from zero to twenty; None past MAX_LIMIT."""
    if word in NUMBERS:
        return NUMBERS[word]
    digits = word.replace(",", "")
    return int(digits) if len(digits) <= len(str(MAX_LIMIT)) and int(digits) <= MAX_LIMIT else None


def _bounds(m: re.Match, lower: str) -> list[tuple[str, int]] | None:
    """(bound, n) pairs a RANGE or COUNT_RANGE match states (the same groups: 2-3 the range, 5-6 "exactly N"): "one or two" gives min 1 and max 2, "exactly 3" min 3 and max 3, "up to
    200-300" max 300 only. None for a backward range or a number too big."""
    if m[5]:
        n = _number(m[6])
        return None if n is None else [("min", n), ("max", n)]
    low, high = _number(m[2]), _number(m[3])
    if low is None or high is None or low >= high:
        return None
    if re.search(r"\b(?:" + MAX_WORDS + r")\s*$", lower[: m.start()]):
        return [("max", high)]
    if re.search(r"\b(?:" + MIN_WORDS + r")\s*$", lower[: m.start()]):
        return [("min", low)]
    return [("min", low), ("max", high)]
