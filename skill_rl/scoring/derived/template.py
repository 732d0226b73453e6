"""Reading the template, the first fenced block of Output Format: its headings, literal lines, fields and
placeholders, and the checks they give.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

from skill_rl.scoring.derived.checks import (
    enum_check,
    headings_check,
    limit_check,
    placeholders_check,
    template_lines_check,
)
from skill_rl.scoring.derived.grammar import (
    BELOW,
    FIELD,
    LIMIT,
    MINIMUM,
    NUM,
    PLACEHOLDER,
    RANGE,
    UNIT_RX,
    UNITS,
    Derived,
    _bounds,
    _limit_parts,
    _number,
)
from skill_rl.scoring.derived.output import heading


@dataclass
class Template:
    # SKILL.md line of the template's first line
    line: int
    # the template as written
    source: str = ""
    # the first non-blank line's text before its first placeholder
    first_prefix: str = ""
    # (level, lower title, line as written, SKILL.md line) of literal headings
    heads: list = field(default_factory=list)
    # (line, SKILL.md line)
    literals: list = field(default_factory=list)
    # (label, SKILL.md line)
    fields: list = field(default_factory=list)
    # distinct, in order of appearance
    placeholders: list = field(default_factory=list)
    # sections (lower title; None before any heading) with a placeholder line
    needs_text: list = field(default_factory=list)
    # (kind, name, values, line as written, SKILL.md line)
    enums: list = field(default_factory=list)
    # a short placeholder's lower text -> the target it stands for
    roles: dict = field(default_factory=dict)
    # (target, placeholder text, SKILL.md line) of a placeholder that opens
    sized: list = field(default_factory=list)
    # with a limit: `<1-3 sentences: the intent>` alone under `## Plan`, `Summary: <at most 20 words>`


def _alternatives(inner: str) -> list[str] | None:
    values = [x.strip().strip("`").strip() for x in inner.split("|")]
    return values if len(values) >= 2 and all(0 < len(x) <= 40 for x in values) else None


SHORT_PLACEHOLDER = re.compile(r"<([a-z][a-z -]{1,30})>$")


def _role(line: str, head, fld, section, shown_title: str, first: bool) -> tuple[str, tuple[str, str]] | None:
    """What a short placeholder (`<title>`, `<summary>`) stands for, so that prose can name it: a field's value,
    a heading line's title (`# <title>`), a section's sole text, or the first line."""
    if fld:
        m = SHORT_PLACEHOLDER.match(fld[2])
        return (m[1].strip(), ("field", fld[1])) if m else None
    m = SHORT_PLACEHOLDER.search(line)
    if not m or len(m[1].split()) > 3:
        return None
    if head and line == "#" * head[0] + " " + m[0]:
        return m[1].strip(), ("heading_line", f"{head[0]}:{m[1].strip()}")
    if line != m[0]:
        return None
    if first:
        return m[1].strip(), ("first_line", "")
    if section not in (None, "\0"):
        return m[1].strip(), ("section", shown_title)
    return None


def read_template(source: str, first_line: int) -> Template:
    """Sort a template's lines into headings, literal lines, fields, placeholder lines and enumerations."""
    t = Template(first_line, source)
    section: str | None = None
    # the current literal heading's title as written
    shown_title = ""
    lines = source.split("\n")
    first = next((x.strip() for x in lines if x.strip()), "")
    t.first_prefix = PLACEHOLDER.split(first, 1)[0]
    seen_placeholders, seen_sections, seen_head = set(), set(), False
    for n, raw in enumerate(lines):
        line, where = raw.strip(), first_line + n
        holes = PLACEHOLDER.findall(line)
        for h in holes:
            if f"<{h}>" not in seen_placeholders:
                seen_placeholders.add(f"<{h}>")
                t.placeholders.append(f"<{h}>")
        head, fld = heading(line), FIELD.match(line)
        if not line:
            continue
        opening = not t.heads and not t.literals and not t.fields and not t.needs_text and not seen_head
        role = _role(line, head, fld, section, shown_title, first=opening)
        if role:
            t.roles.setdefault(role[0], role[1])
        # "the subject line" for `<type>: <subject>` opening the template
        if opening and not head:
            for h in holes:
                if SHORT_PLACEHOLDER.fullmatch(f"<{h}>") and len(h.split()) <= 2:
                    t.roles.setdefault(f"{h.strip()} line", ("first_line", ""))
        if fld and re.match(r"<\s*[\w~]", fld[2]):
            t.sized.append((("field", fld[1]), fld[2][1:-1], where))
        elif not head and holes and line == f"<{holes[0]}>" and section not in (None, "\0"):
            t.sized.append((("section", shown_title), holes[0], where))
        if head:
            # `# <title>` opens the template: the line after it is not the first line
            seen_head = True
            # a heading with a placeholder: unnamed
            section = head[1].lower() if not holes else "\0"
            if not holes:
                t.heads.append((head[0], section, line, where))
                shown_title = head[1]
        elif fld:
            t.fields.append((fld[1], where))
            if values := _alternatives(fld[2][1:-1]):
                t.enums.append(("field", fld[1], values, line, where))
        elif holes:
            if section != "\0" and section not in seen_sections:
                seen_sections.add(section)
                t.needs_text.append(section)
            if line == f"<{holes[0]}>" and section not in (None, "\0") and (values := _alternatives(holes[0])):
                t.enums.append(("section", shown_title, values, line, where))
        else:
            t.literals.append((line, where))
    return t


def template_checks(t: Template) -> Iterator[Derived]:
    if t.heads:
        yield Derived(
            headings_check([(lvl, title) for lvl, title, _, _ in t.heads], [s for _, _, s, _ in t.heads]),
            t.heads[0][3],
            " / ".join(s for _, _, s, _ in t.heads),
        )
    if t.literals or t.fields:
        where = (t.literals or t.fields)[0][1]
        yield Derived(
            template_lines_check([x for x, _ in t.literals], [f for f, _ in t.fields]),
            where,
            " / ".join([x for x, _ in t.literals] + [f"{f}: ..." for f, _ in t.fields]),
        )
    if t.placeholders:
        yield Derived(placeholders_check(t.placeholders, t.needs_text), t.line, "the template")
    for kind, name, values, shown, where in t.enums:
        yield Derived(enum_check(kind, name, values), where, shown)
    for target, text, where in t.sized:
        yield from _sized(target, text, where)


def _sized(target: tuple[str, str], text: str, where: int) -> Iterator[Derived]:
    """A placeholder that opens with a limit or a range states it about what it stands for: `<1-3 sentences: ...>`
    alone under a heading is that section's, `Title: <at most 60 characters>` the field's."""
    lower = text.lower().strip()
    m = LIMIT.match(lower)
    if m:
        word, number, unit_word = _limit_parts(m)
        n = _number(number)
        below = BELOW.fullmatch(word) is not None
        bounds = (
            None
            if n is None or (below and n == 0)
            else [("min" if MINIMUM.fullmatch(word) else "max", n - 1 if below else n)]
        )
    elif (m := RANGE.match(lower)) is not None:
        unit_word, bounds = m[4] or m[7], _bounds(m, lower)
    elif (m := re.match(NUM + r"\s+(?:short\s+|brief\s+)?" + UNIT_RX, lower)) is not None:
        # `<one sentence>`, `<two paragraphs>`: at most that many
        n = _number(m[1])
        unit_word, bounds = m[2], None if n is None or n == 0 else [("max", n)]
    else:
        return
    unit = UNITS[unit_word]
    if (
        bounds
        and not (target[0] == "field" and unit in ("lines", "items", "paragraphs"))
        and re.match(
            r"\s*(?:[:,;(\u2013\u2014-]|$)|\s+(?:on|about|describing|explaining|saying|that|of|with|for)\b",
            lower[m.end() :],
        )
    ):
        for bound, n in bounds:
            yield Derived(limit_check(target, unit, bound, n), where, f"<{text}>")
