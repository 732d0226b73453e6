"""Reading sentences of Output Format and Rules: enumerations, limits and counts with their targets, value ranges,
forbidden fences and preambles, and tokens that must come from the input.
"""

from __future__ import annotations

import bisect
import re
from typing import Iterator, NamedTuple

from skill_rl.scoring.derived.grammar import NAME_WORD, SPLIT, WHOLE, Sentence, _md
from skill_rl.skills import Section


def _inline_sentences(tok, first_line: int) -> Iterator[Sentence]:
    """Split one paragraph's inline token into sentences, each with its code spans and its line."""
    text, codes, line, start = "", [], first_line, first_line
    for child in tok.children or ():
        if child.type == "code_inline":
            codes.append((len(text), child.content))
            text += f"`{child.content}`"
        elif child.type in ("softbreak", "hardbreak"):
            line += 1
            if text:
                text += " "
            else:
                start = line
        elif child.type in ("text", "html_inline"):
            if codes and text.endswith("`") and codes[-1][1][-1:] in ".!?" and child.content[:1].isspace():
                # it ended inside a code span: "... line `None.` The"
                yield Sentence(text.rstrip(), tuple(codes), start)
                text, codes, start = "", [], line
            parts = SPLIT.split(child.content)
            for k, part in enumerate(parts):
                if k:
                    if text.strip():
                        yield Sentence(text.rstrip(), tuple(codes), start)
                    text, codes, start = "", [], line
                # no leading space: code offsets stay right
                text += part if text else part.lstrip()
    if text.strip():
        yield Sentence(text.rstrip(), tuple(codes), start)


def sentences(section: Section, tokens=None) -> Iterator[Sentence]:
    tokens = _md.parse(section.text) if tokens is None else tokens
    for prev, tok in zip(tokens, tokens[1:]):
        if tok.type == "inline" and prev.type == "paragraph_open":
            yield from _inline_sentences(tok, section.text_line + tok.map[0])


# a template name longer than this is found in prose only in backticks
MAX_NAME_CHARS = 100


NOT_NAMES = frozenset(
    "line lines item items entry entries bullet bullets word words character characters output "
    "input first last value values name names".split()
)


def _forms(name: str) -> list[tuple[str, bool]]:
    """A name's plain-word forms, each with whether it is the singular of a plural name: `Risks` is read as
    "risks" and "risk" (singular), `Next step` as "next step" and "next steps"."""
    if name.endswith("ies") and len(name) > 4:
        return [(name, False), (name[:-3] + "y", True)]
    if name.endswith(("ches", "shes", "sses", "xes")):
        return [(name, False), (name[:-2], True)]
    if name.endswith("s") and not name.endswith(("ss", "us", "is")) and len(name) > 3:
        return [(name, False), (name[:-1], True)]
    plural = (
        name[:-1] + "ies"
        if name.endswith("y") and name[-2:-1] not in "aeiou"
        else name + ("es" if name.endswith(("s", "x", "ch", "sh")) else "s")
    )
    return [(name, False), (plural, False)]


class Names:
    """The template's headings and fields by lower-cased name, indexed once per derivation: finding the names a
    sentence mentions costs its length (times the few distinct name lengths), not the template's size. `plain`
    holds the names a sentence may use in plain words (headings, fields, short placeholders; singular and
    plural), matched by one regex built once."""

    def __init__(self, names: dict[str, tuple[str, str]], plain: dict[str, tuple[str, str]] | None = None):
        self.names = names
        # sections and fields whose template text names one value
        self.slots: set[tuple[str, str]] = set()
        self.lengths = sorted({len(n) for n in names if len(n) <= MAX_NAME_CHARS})
        self.plain: dict[str, tuple[tuple[str, str], bool]] = {}
        for name, target in (plain if plain is not None else names).items():
            if (
                3 <= len(name) <= 40
                and (name not in NOT_NAMES or (name == "name" and target[0] == "field"))
                and re.fullmatch(r"[a-z][a-z0-9 '-]*[a-z0-9]", name)
            ):
                for form, singular in _forms(name):
                    self.plain.setdefault(form, (target, singular))
        words = "|".join(re.escape(f) for f in sorted(self.plain, key=len, reverse=True))
        self.rx = (
            re.compile(r"(?<![\w`-])(?:(the|each|every|any|a|an|your|its|their)\s+)?(" + words + r")(?![\w`-])")
            if words
            else None
        )


class Read(NamedTuple):
    """One sentence, read once for every limit in it: positions of what `_limit_target` looks for."""

    lower: str
    # offsets of the code spans that name a target (see _known_name), ascending
    code_offsets: list[int]
    code_targets: list[tuple[str, str]]
    # end of each "<name> section|field|line" in `lower`, ascending
    name_ends: list[int]
    # the latest-starting such mention ending at or before name_ends[i]
    name_best: list[tuple[int, tuple[str, str]]]
    # where "first line" ends, or -1
    first_line: int
    each_line: int
    each_item: int
    whole: bool
    # (start, end, after each/every/any, target, singular) of each template name in plain words
    bare: list = []


def _code_target(s: Sentence, names: dict, offset: int, code: str, any_code: bool) -> tuple[str, str] | None:
    bare, word = code.lstrip("#").strip(), NAME_WORD.match(s.text, offset + len(code) + 2)
    if not (any_code or bare.lower() in names or word):
        return None
    kind = "name" if not word else "section" if word[1] == "section" else "field"
    return names.get(bare.lower(), (kind, bare))


def _end(rx: re.Pattern | str, lower: str) -> int:
    m = re.search(rx, lower)
    return m.end() if m else -1


SUBJECT_BEFORE = re.compile(r"(?:^|[:;,(]|\b(?:of|in|under|for|keep|limit|cap|and|to|per))\s*$")


def read_sentence(s: Sentence, names: Names) -> Read:
    lower = s.text.lower()
    codes = [(off, t) for off, code in s.codes if (t := _code_target(s, names.names, off, code, False))]
    # (end, start, target) of each "<name> <word>", a name ending where a word starts
    mentions = []
    for m in re.finditer(r"(?<= )(?:section|field|line)", lower):
        for length in names.lengths:
            start = m.start() - 1 - length
            if (
                start >= 0
                and lower[start : m.start() - 1] in names.names
                and (start == 0 or not lower[start - 1].isalnum())
            ):
                mentions.append((m.end(), start, names.names[lower[start : m.start() - 1]]))
    mentions.sort(key=lambda x: x[0])
    best, name_best = None, []
    for _, start, target in mentions:
        best = (start, target) if best is None or start >= best[0] else best
        name_best.append(best)
    return Read(
        lower,
        [o for o, _ in codes],
        [t for _, t in codes],
        [e for e, _, _ in mentions],
        name_best,
        _end(r"first line", lower),
        _end(r"\b(each|every|any|no) line\b|\ball lines\b", lower),
        _end(r"\b(each|every) (item|entry|bullet)\b", lower),
        WHOLE.search(lower) is not None,
        [
            (m.start(2), m.end(2), m[1] in ("each", "every", "any"), *names.plain[m[2]])
            for m in names.rx.finditer(lower)
            if m[1] or SUBJECT_BEFORE.search(lower[: m.start()])
        ]
        if names.rx
        else [],
    )


def _known_name(r: Read, end: int) -> tuple[str, str] | None:
    """The last target named before `end`: a code span naming a template heading or field (or one followed by
    section/field/line), else a template name followed by section/field/line."""
    k = bisect.bisect_left(r.code_offsets, end)
    if k:
        return r.code_targets[k - 1]
    k = bisect.bisect_right(r.name_ends, end)
    return r.name_best[k - 1][1] if k else None
