"""What a sentence of Output Format or Rules demands, once read (sentences.py): the values of an enumeration,
limits and counts with their targets, value ranges, forbidden fences and preambles, and tokens that must come from
the input.
"""

from __future__ import annotations

import re
from typing import Iterator

from skill_rl.scoring.derived.checks import (
    _bare,
    _make,
    _slug,
    enum_check,
    from_input_check,
    limit_check,
    no_fence_check,
    no_preamble_check,
)
from skill_rl.scoring.derived.grammar import (
    BELOW,
    BELOW_WORDS,
    FENCE_WORDS,
    HEDGE,
    HEDGE_AFTER,
    LIMIT,
    MAX_LIMIT,
    MAX_WORDS,
    MIN_WORDS,
    MINIMUM,
    NEGATION,
    NUM,
    NUMBERS,
    PREAMBLE_WORDS,
    RANGE,
    SHAPE,
    UNITS,
    Derived,
    Sentence,
    _bounds,
    _limit_parts,
    _number,
)
from skill_rl.scoring.derived.output import _field, view
from skill_rl.scoring.derived.sentences import Names, Read, _code_target, _known_name, read_sentence
from skill_rl.scoring.derived.template import Template


def enum_sentence(s: Sentence, names: Names) -> Iterator[Derived]:
    at = s.text.lower().find("one of")
    values = [c for off, c in s.codes if off > at]
    target = None
    if at >= 0 and len(values) >= 2:
        before = [(off, code) for off, code in s.codes if off < at]
        target = _code_target(s, names.names, *before[-1], True) if before else _known_name(read_sentence(s, names), at)
    if target:
        yield Derived(enum_check(target[0], target[1], values), s.line, s.text)
    elif len(values) < 2 and (plain := _plain_values(s.text)):
        yield from _plain_enum(s, names, *plain)


ONE_OF = re.compile(r"\bone of\b\s*:?\s*")
EITHER = re.compile(r"\beither\s+([^,;:()]+?)\s+or\s+([^,;:()]+?)\s*(?=[,;:()]|\.?$)")
VALUE_SPLIT = re.compile(r"\s*,\s*(?:or\s+|and\s+)?|\s+or\s+|\s*/\s*|\s*\|\s*")
NOT_VALUE = re.compile(
    r"(?:the|a|an|these|those|this|that|following|your|its|their|our|some|any|several|many|more|"
    r"other|each|every|all|both|" + "|".join(NUMBERS) + r")\b"
)
IS_WORDS = re.compile(
    r"\s*(?::\s*|(?:is|are|must be|should be|has to be|will be|can be|can only be|may be|reads|says)\s+)"
    r"(?:always\s+|only\s+)?$"
)


def _plain_values(text: str) -> tuple[int, list[str]] | None:
    """Allowed values written in plain words: "either ship or hold", "one of: low, medium, high", "one of low, medium
    or high". Each value 1-3 words, none opening with a determiner or a number ("one of the scripts" is no list).
    "one of four statuses: A, B, C, D" names its subject after "one of" and is read only when the count matches.
    (offset where the enumeration starts, values, that subject or None) or None."""
    lower, counted = text.lower(), None
    m = EITHER.search(lower)
    if m:
        raw, at = [text[m.start(1) : m.end(1)], text[m.start(2) : m.end(2)]], m.start()
    elif (m := ONE_OF.search(lower)) is not None:
        tail = re.split(r"\s+[-\u2013\u2014]\s+|\s*\(|\s*;", text[m.end() :], maxsplit=1)[0]
        # "one of four statuses: ..."
        counted = re.match(NUM + r"\s+([a-z][\w-]*(?:\s+[a-z][\w-]*)?)\s*:\s*", tail.lower())
        if counted:
            tail = tail[counted.end() :]
        raw, at = VALUE_SPLIT.split(tail.rstrip(". ")), m.start()
    else:
        return None
    values = [v.strip().strip("\"'\u201c\u201d*_").strip() for v in raw]
    ok = len(values) >= 2 and all(
        v and len(v) <= 30 and len(v.split()) <= 3 and not NOT_VALUE.match(v.lower()) for v in values
    )
    if counted and _number(counted[1]) != len(values):
        # "one of four statuses" followed by three: not read
        return None
    return (
        (at, values, counted[2] if counted else None)
        if ok and len({v.lower() for v in values}) == len(values)
        else None
    )


def _plain_enum(s: Sentence, names: Names, at: int, values: list[str], noun: str | None) -> Iterator[Derived]:
    """Plain-word values resolved against the template name right before them: "The decision is either ship or
    hold" (section `Decision`), "Severity: one of low, medium, high" (field `Severity`). A section or field counts
    only when its template text is one placeholder of one or two words naming a value (`<decision>`, not
    `<what changed>`) or an enumeration: "The summary is either short or
    long" about `<what changed>` describes the text, it does not list its values."""
    r = read_sentence(s, names)
    # "one of four statuses: ..." where `Status:` is a field
    named = names.plain.get(noun) if noun else None
    if named and named[0] in names.slots:
        yield Derived(enum_check(named[0][0], named[0][1], values), s.line, s.text)
        return
    before = [(end, target) for _, end, _, target, _ in r.bare if end <= at]
    if before and before[-1][1] in names.slots and IS_WORDS.fullmatch(r.lower[before[-1][0] : at]):
        yield Derived(enum_check(before[-1][1][0], before[-1][1][1], values), s.line, s.text)


def _limit_target(r: Read, start: int, end: int, unit: str, floor: int = 0) -> tuple[str, str] | None:
    """What a limit found at lower[start:end] is about: a name in backticks or followed by section/field/line,
    then a template name (a heading, field or placeholder) in the sentence's words before the limit ("the
    summary", "each risk"), then the first line, each line or each item, then a template name after the limit
    ("in the Risks section", "under Highlights"), then the whole output."""
    named = _known_name(r, start) or _bare_before(r, start, unit, floor)
    if named == SKIP:
        return None
    if named is None and not (0 <= r.first_line <= start or 0 <= r.each_line <= start or 0 <= r.each_item <= start):
        named = _bare_after(r, end, unit)
    if named:
        return (
            None
            if named[0] in ("field", "heading_line", "first_line") and unit in ("lines", "items", "paragraphs")
            else named
        )
    if unit in ("chars", "words") and 0 <= r.first_line <= start:
        return ("first_line", "")
    if unit in ("chars", "words") and 0 <= r.each_line <= start:
        return ("each_line", "")
    if unit in ("chars", "words") and 0 <= r.each_item <= start:
        return ("each_item", "")
    if unit != "items" and re.search(r"\b(?:each|every) section\b", r.lower[:start]):
        # "each section is up to 300 words": every headed section of the output
        return ("each_section", "")
    return ("output", "") if r.whole and not _other_subject(r.lower[:start]) else None


def _other_subject(before: str) -> bool:
    """Whether the words before a limit name a subject other than the output ("Frontmatter: at most 1024 characters
    in total", "the description has ..."): then "in total" is that subject's total, not the output's."""
    label = re.match(r"\s*([a-z][\w .-]{0,40}):", before)
    if label and label[1].strip() not in ("output", "answer", "response", "the output", "the answer", "the response"):
        return True
    m = re.search(r"\b(?:the|its|your|their)\s+([a-z][\w-]*)\s+(?:is|are|has|have|stays?|must|should|can)\b", before)
    return m is not None and m[1] not in ("output", "answer", "response", "whole", "entire", "reply")


# a subject named but not one a check can read: the limit derives nothing
SKIP = ("", "")


def _bare_before(r: Read, start: int, unit: str, floor: int = 0) -> tuple[str, str] | None:
    """The last template name written as plain words before `start`: "the summary" names its section or field;
    "each risk" (the singular of a plural section name, after each/every/any) names each item of that section;
    "each line of the summary" each line of it. Names before `floor` (the end of the sentence's previous limit) are
    that limit's."""
    best = None
    for m_start, m_end, each, target, singular in r.bare:
        if floor <= m_start and m_end <= start:
            best = (m_start, each, target, singular)
    if best is None:
        return None
    m_start, each, target, singular = best
    between = r.lower[m_start:start]
    per_line = re.search(r"\b(each|every|any|no) line\b|\ball lines\b", between)
    per_item = not per_line and re.search(r"\b(each|every|any)\b", between)
    if target[0] == "field" and (each or per_item) and not per_line:
        # "each title": every line that starts with `Title:`
        return ("each_field", target[1])
    if target[0] != "section" or unit not in ("chars", "words", "sentences"):
        # "each post" where `<post>` is one line: unclear
        return SKIP if per_line or per_item or each else target
    if (each and singular) or per_item:
        return ("items_in", target[1])
    if per_line or re.search(r"\b(each|every|any|no) line (?:of|in|under) (?:the )?$", r.lower[:m_start]):
        return ("lines_in", target[1])
    if re.search(r"\b(each|every|any|no) (?:item|entry|bullet) (?:of|in|under) (?:the )?$", r.lower[:m_start]):
        return ("items_in", target[1])
    return target


def _bare_after(r: Read, end: int, unit: str) -> tuple[str, str] | None:
    """A template name right after the limit, after in/under/of/for: "at most three bullets in the Risks section"."""
    for m_start, _, each, target, _ in r.bare:
        if m_start >= end and re.fullmatch(
            r"\s+(?:in|under|of|for|within)\s+(?:the\s+|each\s+|every\s+|your\s+)?", r.lower[end:m_start]
        ):
            return None if target[0] == "section" and each and unit in ("chars", "words") else target
    return None


COUNT = re.compile(
    r"\b("
    + MAX_WORDS
    + "|"
    + BELOW_WORDS
    + "|"
    + MIN_WORDS
    + r")\s+"
    + NUM
    + r"\s+([a-z][a-z'-]*(?:\s+[a-z][a-z'-]*){0,3})"
)


COUNT_RANGE = re.compile(
    r"\b(?:(between)\s+)?"
    + NUM
    + r"(?:\s*[-\u2013\u2014]\s*|\s+(?:to|or|and)\s+)"
    + NUM
    + r"\s+([a-z][a-z'-]*(?:\s+[a-z][a-z'-]*){0,3})|\b(exactly)\s+"
    + NUM
    + r"\s+([a-z][a-z'-]*(?:\s+[a-z][a-z'-]*){0,3})"
)


ADJECTIVES = frozenset("numbered short brief concrete specific distinct separate open key main new other".split())
PAREN_MAX = re.compile(r"\(\s*(?:max\.?|maximum|at most|up to|no more than)\s+" + NUM + r"\s*\)")


def _paren_sentence(s: Sentence, names: Names, spans: list | None) -> Iterator[Derived]:
    """A plural section name followed by "(max N)": "add an Open questions section (max 3)" counts its items."""
    lower = s.text.lower()
    for m in PAREN_MAX.finditer(lower):
        before = [(n.end(2), *names.plain[n[2]]) for n in names.rx.finditer(lower[: m.start()])] if names.rx else []
        n = _number(m[1])
        if (
            before
            and n is not None
            and before[-1][1][0] == "section"
            and not before[-1][2]
            and re.fullmatch(r"\s*(?:section|list)?\s*", lower[before[-1][0] : m.start()])
        ):
            yield Derived(limit_check(before[-1][1], "items", "max", n), s.line, s.text)
            if spans is not None:
                spans.append(m.span())


def _count_sentence(s: Sentence, names: Names, spans: list | None) -> Iterator[Derived]:
    """ "at most N <things>" where <things> is a plural section name of the template, alone or before items,
    entries or bullets: "List no more than six changes", "at most 10 timeline entries" count that section's items;
    so do a range or exact count of them ("two to four risks", "exactly three options")."""
    lower = s.text.lower()
    found = [(m, m[3], False) for m in COUNT.finditer(lower)] + [
        (m, m[4] or m[7], True) for m in COUNT_RANGE.finditer(lower)
    ]
    for m, tail, ranged in found:
        words = tail.split()
        # "5-10 numbered questions"
        if words and words[0] in ADJECTIVES:
            words = words[1:]
        if HEDGE.search(lower[: m.start()]) or HEDGE_AFTER.match(lower, m.end()):
            continue
        for k in range(len(words), 0, -1):
            head = " ".join(words[:k])
            hit = names.plain.get(head)
            rest = words[k] if k < len(words) else ""
            if (
                hit
                and hit[0][0] == "section"
                and not hit[1]
                and (head.endswith("s") or rest in ("items", "entries", "bullets"))
                and head not in UNITS
            ):
                if ranged:
                    bounds = _bounds(m, lower)
                else:
                    n = _number(m[2])
                    below = BELOW.fullmatch(m[1]) is not None
                    bounds = (
                        None
                        if n is None or (below and n == 0)
                        else [("min" if MINIMUM.fullmatch(m[1]) else "max", n - 1 if below else n)]
                    )
                if not bounds:
                    break
                for bound, n in bounds:
                    yield Derived(limit_check(hit[0], "items", bound, n), s.line, s.text)
                if spans is not None:
                    spans.append(m.span())
                break


def limit_sentence(
    s: Sentence, names: Names, problems: list[tuple[int, str]], spans: list | None = None
) -> Iterator[Derived]:
    r, floor, last = None, 0, None
    lower = s.text.lower()
    yield from _count_sentence(s, names, spans)
    yield from _paren_sentence(s, names, spans)
    taken = [sp for sp in spans or () if sp]
    # (match, unit word, [(bound, n)] or None)
    found = []
    for m in LIMIT.finditer(lower):
        word, number, unit_word = _limit_parts(m)
        n = _number(number)
        if n is None:
            problems.append(
                (
                    s.line,
                    f"the limit '{word} {number if len(number) <= 20 else number[:17] + '...'} {unit_word}' is above {MAX_LIMIT:,}: "
                    "state a smaller number, or leave the length to the judge",
                )
            )
            continue
        below = BELOW.fullmatch(word) is not None
        found.append(
            (
                m,
                unit_word,
                None if below and n == 0 else [("min" if MINIMUM.fullmatch(word) else "max", n - 1 if below else n)],
            )
        )
    for m in RANGE.finditer(lower):
        if not any(a <= m.start() < b for a, b in taken):
            found.append((m, m[4] or m[7], _bounds(m, lower)))
    for m, unit_word, bounds in sorted(found, key=lambda x: x[0].start()):
        r = r or read_sentence(s, names)
        unit = UNITS[unit_word]
        hedged = HEDGE.search(lower[: m.start()]) or HEDGE_AFTER.match(lower, m.end())
        target = None if hedged else _limit_target(r, m.start(), m.end(), unit, floor)
        if (
            target is None
            and last
            and last[0] in ("section", "items_in")
            and unit in ("chars", "words", "sentences")
            and re.fullmatch(r"[\s,;]*(?:and\s+|with\s+)?each\s+(?:is\s+|of\s+them\s+)?", lower[floor : m.start()])
        ):
            # "three to five bullets, each under 60 characters"
            target = ("items_in", last[1])
        elif (
            target is None
            and last
            and re.fullmatch(r"\s*(?:,\s*)?(?:and|but)\s+(?:is\s+|are\s+)?", lower[floor : m.start()])
            and not (last[0] in ("field", "heading_line") and unit in ("lines", "items"))
        ):
            # "at most 2 sentences and under 300 characters": the same subject
            target = last
        floor, last = m.end(), target or last
        if (
            target
            and target[0] in ("section", "field")
            and unit in ("chars", "words", "sentences")
            and re.match(r"\s+each\b", lower[m.end() :])
        ):
            # "risks under 80 characters each"
            target = ("items_in" if target[0] == "section" else "each_field", target[1])
        if target and bounds:
            for bound, n in bounds:
                yield Derived(limit_check(target, unit, bound, n), s.line, s.text)
            if spans is not None:
                spans.append(m.span())
        elif spans is not None:
            spans.append(None)


VALUE_RANGE = re.compile(
    r"([a-z][\w ()/'-]{0,40}):\s*(?:between\s+)?(-?\d+(?:\.\d+)?)\s*(?:[-\u2013\u2014]|to|and)\s*(-?\d+(?:\.\d+)?)\s*\.?"
)
NUMBER_VALUE = re.compile(r"(-?\d+(?:\.\d+)?)\s*[a-z%]*")


def value_range_check(label: str, low: float, high: float):
    def run(output: str, task) -> bool | None:
        value = _field(view(output), label)
        if value is None:
            # a missing field: the headings and template-lines checks say so
            return None
        m = NUMBER_VALUE.fullmatch(_bare(value).lower())
        return m is not None and low <= float(m[1]) <= high

    shown = f"{low:g} to {high:g}"
    return _make(
        f"{_slug(label)}_in_range", "format", run, f"field '{label}' is a number from {shown}", target=label.lower()
    )


def value_sentence(s: Sentence, names: Names) -> Iterator[Derived]:
    """ "FPS: 10-30.", "Score: between 1 and 5": a template field's value is a number in that range (a unit word
    after it is allowed, nothing else)."""
    m = VALUE_RANGE.fullmatch(s.text.lower().strip())
    if m and names.names.get(m[1].strip(), ("",))[0] == "field" and float(m[2]) < float(m[3]):
        yield Derived(value_range_check(names.names[m[1].strip()][1], float(m[2]), float(m[3])), s.line, s.text)


def forbid_sentence(s: Sentence, t: Template | None) -> Iterator[Derived]:
    lower = s.text.lower()
    fence = FENCE_WORDS.search(lower)
    if fence and NEGATION.search(lower[: fence.start()]):
        yield Derived(no_fence_check(), s.line, s.text)
    if PREAMBLE_WORDS.search(lower):
        # `# ` keeps its space: `## x` is not a title
        prefix = t.first_prefix if t and t.first_prefix.strip() else ""
        yield Derived(no_preamble_check(prefix), s.line, s.text)


def input_sentence(s: Sentence) -> Iterator[Derived]:
    lower = s.text.lower()
    if not re.search(r"\b(the|its|their) input\b", lower):
        return
    # a sentence names a shape or two, not a thousand
    for _, code in s.codes[:10]:
        m = SHAPE.match(code)
        if not m or not ("number" in m[2].lower() or not m[1][-1].isalnum()):
            continue
        if re.search(r"\bonly\b", lower):
            yield Derived(from_input_check(code, m[1], m[2], every=False), s.line, s.text)
        if re.search(r"\b(every|each|all)\b", lower):
            yield Derived(from_input_check(code, m[1], m[2], every=True), s.line, s.text)
