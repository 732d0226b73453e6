"""Derived checks: deterministic format checks read from a SKILL.md's own Output Format and Rules.

A skill written only in markdown still gets a deterministic reward. The grammar is deliberately
narrow: what it does not recognise is left to the judge, never guessed at. Only two sections are
read, through markdown-it-py's tokens: **Output Format** and **Rules**. The first fenced block of
Output Format is the *template*; every paragraph and list item of both sections is split into
sentences (at `.`, `!`, `?` or `;` followed by a space; code spans stay whole).

From the template (a `<placeholder>` is `<` text `>`, no nested brackets):
  headings             its literal heading lines (`## Findings`) each appear once, at the same level,
                       in template order. A gate: failing it zeroes format.
  template_lines       its literal lines (`---`) appear as lines, and each field label (`Severity` of
                       `Severity: <...>`) starts a line followed by a value; the share present
  placeholders_filled  no placeholder appears verbatim in the output, and each template section that
                       holds a placeholder line has some text under its heading
  <name>_one_of        a placeholder of alternatives `<a | b>`, as a field's value or alone under a
                       heading: the field's value (the section's text) is one of them
From sentences:
  <name>_one_of        "`Severity` is one of `low`, `medium`, `high`": a name before "one of" (in
                       backticks, or a template heading or field), at least two values in backticks after
  <target>_max_<unit>  "at most N <unit>", "no more than N", "up to N", "N <unit> or fewer", ...; "under N",
                       "fewer than N", "less than N" give at most N - 1; `_min_` for "at least N <unit>".
                       unit: characters, words, lines or items (list items); target, first found: a named
                       section or field before the number (`Name`, or "Name section|field|line" for a
                       template name); a template name in plain words before it (reference resolution: a
                       heading, field or short placeholder, any case, singular or plural, after a
                       determiner, a preposition or the sentence start: "the summary", "each risk" = each
                       item of `Risks`, "every line of the summary"); "first line", "each/every/any/no
                       line", "each/every item|entry|bullet"; a template name after the limit behind
                       in/under/of/for; or anywhere in the sentence "whole output", "the output", "in all".
                       "at most N <plural section name>" ("no more than six changes") counts its items.
  ranges, exact counts "one or two sentences", "3-5 items", "between 3 and 5 bullets", "exactly two risks": a `_min_`
                       and a `_max_` check on one target ("up to 200-300 words": the maximum only); units also
                       sentences and paragraphs; a placeholder opening with a limit or count (`<2-3 sentences on
                       ...>`) states it about its section or field; "each section", "each <field>", a trailing
                       "each", ", each under N" after a count and "and under N" after a limit resolve as written;
                       a hedged number ("about", "default", "if possible") derives nothing
  <name>_one_of        also plain values: "The decision is either ship or hold", "Severity: one of low, medium,
                       high", "Report one of four statuses: A, B, C, D" (1-3 words a value, no determiners)
  <field>_in_range     "FPS: 10-30." after a template field: its value is a number in the range
  not derived          a sentence that reads like a limit, count or enumeration (TRIGGERS) but derives no
                       check, or holds a limit whose subject is not resolved: `--check` lists it
  no_code_fence        a negated mention of code fences or blocks ("no code fences", "do not wrap it in a
                       code fence"): no output line opens with ``` or ~~~
  no_preamble          "no preamble", "nothing before", "no text before", "do not add text before",
                       "nothing but", "nothing else": the first line opens with the template's first
                       literal text (`# `, `## Summary`), or, when the template opens with a placeholder
                       or there is none, is not chatter ("Here is", "Sure", ...) and does not end in `:`
  <ph>_from_input      (correctness) a sentence naming "the input" with a token shape in backticks, a
  every_input_<ph>     literal prefix and one placeholder (`#<number>`: `<number>` is digits, another
                       placeholder a run of letters and digits after a prefix ending in a symbol). With
                       "only": the share of such tokens in the output that the input holds; with
                       "every", "each" or "all": the share of the input's tokens the output holds

Every check runs in time linear in the output, and the derivation in time linear in the SKILL.md (headings
and fields are indexed once; each sentence is read once for all its limits). One check per constraint: when
two sentences state the same constraint on the same target, the first one stated wins; two constraints
whose names read alike in ASCII (`Next steps`, `Next-steps`; `摘要`, `概要` are named by code point) are both
kept, the second as `<name>_2`. What no output can pass is a problem of the skill, reported by every command
that scores (`--check` included, exit 2): a limit above MAX_LIMIT, a minimum above a maximum on the same
target (or on a part of the whole output), and a format check that the template itself, filled in, fails.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterator, NamedTuple

from markdown_it import MarkdownIt

from skill_rl.scoring.checks import check
from skill_rl.skills import Section, Skill, SkillError
from skill_rl.text import display

_md = MarkdownIt("commonmark")
PLACEHOLDER = re.compile(r"<([^<>\s][^<>]*)>")
NAME_WORD = re.compile(r"\s*(section|field|line)\b")
FIELD = re.compile(r"^(?:\*\*|__)?([A-Za-z][\w ()/'-]{0,40})(?::(?:\*\*|__)?|(?:\*\*|__):)[ \t]+(<[^<>]+>)[ \t]*$")
"""A field line `Label: <value>`, the label also in bold (`**Goal:** <...>`, `**Goal**: <...>`)."""
SHAPE = re.compile(r"^([^\s<>`]+)<([A-Za-z][\w -]*)>$")
ITEM = re.compile(r"(?:[-*+]|\d{1,9}[.)])[ \t]")
SPLIT = re.compile(r"(?<=[.!?;])\s+")
NUMBERS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                      "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}
UNITS = {"character": "chars", "characters": "chars", "chars": "chars", "word": "words", "words": "words",
         "line": "lines", "lines": "lines", "item": "items", "items": "items", "entry": "items",
         "entries": "items", "bullet": "items", "bullets": "items", "sentence": "sentences", "sentences": "sentences",
         "paragraph": "paragraphs", "paragraphs": "paragraphs"}
NUM = r"(\d[\d,]*|" + "|".join(NUMBERS) + r")"
MAX_WORDS = r"at most|no more than|up to|no longer than|not more than|a maximum of|maximum of|max\.?|within"
BELOW_WORDS = r"under|fewer than|less than|shorter than|below"  # strictly below N: at most N - 1
MIN_WORDS = r"at least|no fewer than|no less than|not fewer than|not less than|a minimum of|minimum of"
LIMIT = re.compile(r"\b(" + MAX_WORDS + "|" + BELOW_WORDS + "|" + MIN_WORDS + r")\s+" + NUM + r"\s+(" + "|".join(UNITS) + r")\b"
                   r"|\b" + NUM + r"\s+(" + "|".join(UNITS) + r")\s+or\s+(fewer|less)\b"
                   r"|\b" + NUM + r"\s+or\s+(fewer|less)\s+(" + "|".join(UNITS) + r")\b")
BELOW = re.compile(BELOW_WORDS)
UNIT_RX = r"(" + "|".join(sorted(UNITS, key=len, reverse=True)) + r")\b"
RANGE = re.compile(r"\b(?:(between)\s+)?" + NUM + r"(?:\s*[-\u2013\u2014]\s*|\s+(?:to|or|and)\s+)" + NUM + r"\s+" + UNIT_RX
                   + r"|\b(exactly)\s+" + NUM + r"\s+" + UNIT_RX)
"""A range ("one or two sentences", "3-5 items", "between 3 and 5 bullets") or an exact count ("exactly three
bullets"): a minimum and a maximum on one target."""
HEDGE = re.compile(r"(?:\b(?:default|defaults to|usually|typically|ideally|roughly|about|around|approximately|"
                   r"preferably|if possible|recommended|aim for)|~)\s*$")
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
PREAMBLE_WORDS = re.compile(r"\bno preamble\b|\bnothing (?:before|but|else)\b|\bno (?:text|words|introduction) before\b"
                            r"|\b(?:not|never) (?:preface|precede)\b|\b(?:output|return|print|give) only the\b"
                            r"|\b(?:starts?|opens?|begins?) with (?:this|the) (?:header|heading|template)\b"
                            r"|\b(?:not|never) (?:add|write|put) (?:any )?(?:text|anything|words) before\b")
CHATTER = re.compile(r"(here is|here's|here are|sure\b|certainly|okay\b|ok\b|below is|as requested|i have|i've)", re.I)
WHOLE = re.compile(r"\b(?:whole|entire) (?:output|answer|response)\b|\bthe (?:output|answer|response)\b|\bin (?:all|total)\b")


class Sentence(NamedTuple):
    text: str  # the sentence, code spans in backticks
    codes: tuple[tuple[int, str], ...]  # (offset in text, content) of each code span
    line: int  # line in SKILL.md where it starts


@dataclass(frozen=True)
class Derived:
    """One derived check and where it came from, for `--check`."""

    fn: Callable  # a rubric check; its docstring says what it checks
    line: int  # line in SKILL.md of the sentence or template line it came from
    source: str  # that sentence or template line


@dataclass(frozen=True)
class Derivation:
    checks: tuple[Derived, ...]
    ignored: tuple[Sentence, ...]  # sentences that read like a limit, count or enumeration but derive no check (or
    # hold a limit whose subject the grammar cannot resolve): `--check` lists them as "not derived"
    path: str  # SKILL.md as displayed
    problems: tuple[str, ...] = ()  # one line per limit too big to read, contradiction or check no output can pass


# ------------------------------------------------------------------ the output, read once per output


class View(NamedTuple):
    lines: tuple[str, ...]
    heads: tuple[tuple[int, int, str], ...]  # (line index, level, lower-cased title)
    first_head: dict[str, int]  # lower-cased title -> index in `heads` of its first heading
    fields: dict[str, str]  # lower-cased text before a line's first ':' -> the rest of the first such line, stripped


def heading(line: str) -> tuple[int, str] | None:
    """(level, title) of an ATX heading line such as `## Findings`; None for any other line."""
    if not line.startswith("#"):
        return None
    level = len(line) - len(line.lstrip("#"))
    if level > 6 or (len(line) > level and line[level] not in " \t"):
        return None
    title = line[level:].strip().rstrip("#").strip()
    return (level, title) if title else None


@lru_cache(maxsize=128)  # every check of one output reads the same view
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
            if label[:2] in ("**", "__"):  # `**Goal:** text`, `**Goal**: text`: read under the bare label too
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
    key += ":"  # a label with a colon of its own (from a code span): read line by line
    return next((line[len(key):].strip() for line in v.lines if line[: len(key)].lower() == key), None)


def _named(v: View, kind: str, name: str) -> tuple[str, ...] | None:
    """The lines of a named target: a field's value, else (or for a section) the section's lines."""
    if kind != "section":
        value = _field(v, name)
        if value is not None or kind == "field":
            return None if value is None else (value,)
    return _section(v, name.lower())


def _is_item(line: str) -> bool:
    return ITEM.match(line) is not None


# ------------------------------------------------------------------ check factories


DERIVED_COVERS = 0.15  # one sentence of SKILL.md checked: of a judged dimension, a small part (rubric.py)


def _make(name: str, dimension: str, fn, doc: str, *, gate: bool = False, key: bool = False, target: str = "", limit=None):
    """A rubric check named `name`; `target` (the lower-cased section or field it reads) and `name` together
    identify the constraint it states; `limit` is (target, unit, bound, n) for a length limit."""
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    fn.constraint, fn.limit = (name, target), limit
    return check(dimension, gate=gate, key=key, covers=DERIVED_COVERS, kind="fact")(fn)  # what SKILL.md states


def headings_check(wanted: list[tuple[int, str]], shown: list[str]):
    wanted_set = set(wanted)

    def run(output: str, task) -> bool:
        return [(lvl, t) for _, lvl, t in view(output).heads if (lvl, t) in wanted_set] == wanted

    return _make("headings", "format", run, f"the headings {', '.join(shown)} appear once each, in this order",
                 gate=True, key=True)


def template_lines_check(literals: list[str], fields: list[str]):
    def run(output: str, task) -> float:
        v = view(output)
        present = {line.strip() for line in v.lines}
        found = sum(lit in present for lit in literals) + sum(bool(_field(v, f)) for f in fields)
        return found / (len(literals) + len(fields))

    shown = [repr(x) for x in literals] + [f"'{f}: <value>'" for f in fields]
    return _make("template_lines", "format", run, f"share of these template lines present: {', '.join(shown)}")


def placeholders_check(placeholders: list[str], sections: list[str | None]):
    def run(output: str, task) -> bool:
        if any(p in output for p in placeholders):
            return False
        v = view(output)
        return all(any(line.strip() for line in _section(v, s) or ()) for s in sections)

    where = ", ".join("the text before the first heading" if s is None else f"section '{s}'" for s in sections)
    return _make("placeholders_filled", "format", run,
                 f"no placeholder ({', '.join(placeholders)}) is left verbatim" + (f"; text in {where}" if where else ""))


def _bare(value: str) -> str:
    """A value without one pair of surrounding emphasis or code marks: **x**, `x`, *x*, _x_."""
    for mark in ("**", "`", "*", "_"):
        if len(value) > 2 * len(mark) and value.startswith(mark) and value.endswith(mark):
            return value[len(mark) : -len(mark)].strip()
    return value


def enum_check(kind: str, name: str, values: list[str]):
    allowed = {x.lower() for x in values}

    def run(output: str, task) -> bool:
        lines = _named(view(output), kind, name)
        return lines is not None and _bare(" ".join(x.strip() for x in lines if x.strip())).lower() in allowed

    return _make(f"{_slug(name)}_one_of", "format", run, f"{kind} '{name}' is one of {', '.join(values)}", target=name.lower())


def _measure(unit: str, lines: tuple[str, ...]) -> int:
    if unit == "chars":
        return len("\n".join(lines).strip())
    if unit == "words":
        return sum(len(x.split()) for x in lines)
    if unit == "lines":
        return sum(bool(x.strip()) for x in lines)
    if unit == "sentences":
        return sum(_sentence_count(x) for x in _paragraphs(lines))
    if unit == "paragraphs":
        return len(_paragraphs(lines))
    return sum(_is_item(x) for x in lines)


SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]*_]*\s+(?=\S)")
ABBREVIATION = re.compile(r"(?:\b(?:e\.g|i\.e|etc|vs|cf|approx|fig|no|mr|mrs|ms|dr|st|jr|sr|inc|ltd)|\b[a-z])\.$", re.I)


def _paragraphs(lines: tuple[str, ...]) -> list[str]:
    """Runs of non-blank lines, each joined into one text; every list item is a paragraph of its own."""
    out, run = [], []
    for x in lines:
        if not x.strip() or _is_item(x.strip()):
            if run:
                out.append(" ".join(run))
            run = [x.strip()] if x.strip() else []
        else:
            run.append(x.strip())
    if run:
        out.append(" ".join(run))
    return out


def _sentence_count(text: str) -> int:
    """Sentences of one paragraph: split after . ! ? and a space, but not after an abbreviation ("e.g.", "etc.") or
    an initial ("J. Smith"); a lower-case start after a full stop still begins a sentence, so that lower-casing
    does not hide one."""
    count, run = 0, ""
    for part in SENTENCE_END.split(text):
        run = f"{run} {part}" if run else part
        if not ABBREVIATION.search(run.rstrip("\"')]*_")):
            count += any(ch.isalnum() for ch in run)
            run = ""
    return count + any(ch.isalnum() for ch in run)


def _pieces(v: View, target: tuple[str, str]) -> list[tuple[str, ...]] | None:
    kind, name = target
    if kind == "first_line":
        first = next((x for x in v.lines if x.strip()), None)
        return None if first is None else [(first,)]
    if kind == "each_line":
        return [(x,) for x in v.lines]
    if kind == "each_item":
        return [(x,) for x in v.lines if _is_item(x)]
    if kind == "output":
        return [v.lines]
    if kind == "heading_line":
        level = int(name.split(":", 1)[0])
        title = next((t for _, lvl, t in v.heads if lvl == level), None)
        return None if title is None else [(title,)]
    if kind == "each_section":
        bounds = [i for i, _, _ in v.heads] + [len(v.lines)]
        return [v.lines[a + 1 : b] for a, b in zip(bounds, bounds[1:])] or None
    if kind == "each_field":
        key = name.lower() + ":"
        values = [(x[len(key):].strip(),) for x in v.lines if x[: len(key)].lower() == key]
        return values or None
    if kind in ("items_in", "lines_in"):
        lines = _section(v, name.lower())
        if lines is None:
            return None
        items = [(x,) for x in lines if _is_item(x)] if kind == "items_in" else []
        return items or [(x,) for x in lines if x.strip()]
    lines = _named(v, kind, name)
    return None if lines is None else [lines]


def limit_check(target: tuple[str, str], unit: str, bound: str, n: int):
    def run(output: str, task) -> bool | None:
        pieces = _pieces(view(output), target)
        if pieces is None or (bound == "max" and not output.strip()):
            return None  # a missing target, or nothing written: a limit is no credit for silence
        return all((_measure(unit, p) <= n) if bound == "max" else (_measure(unit, p) >= n) for p in pieces)

    kind, name = target
    shown = name.split(":", 1)[-1]
    label = {"first_line": "the first line", "each_line": "each line", "each_item": "each list item", "each_section": "each section",
             "output": "the whole output", "items_in": f"each item of section '{name}'",
             "lines_in": f"each line of section '{name}'", "each_field": f"each field '{name}'",
             "heading_line": f"the first level-{name.split(':')[0]} heading's title (<{shown}>)"}.get(kind, f"{kind} '{name}'")
    slug = {"first_line": "first_line", "each_line": "each_line", "each_item": "each_item", "output": "output", "each_section": "each_section",
            "items_in": f"{_slug(name)}_each_item", "lines_in": f"{_slug(name)}_each_line", "each_field": f"each_{_slug(name)}"}.get(kind, _slug(shown))
    words = {"chars": "characters", "items": "list items"}.get(unit, unit)
    words = words.removesuffix("s") if n == 1 else words
    return _make(f"{slug}_{bound}_{unit}", "format", run, f"{label} has {'at most' if bound == 'max' else 'at least'} {n:,} {words}",
                 target=name.lower(), limit=(target, unit, bound, n))


def no_fence_check():
    def run(output: str, task) -> bool | None:
        if not output.strip():
            return None  # nothing written: no credit for what is not there
        return not any(x.lstrip().startswith(("```", "~~~")) for x in view(output).lines)

    return _make("no_code_fence", "format", run, "no line opens a code fence (``` or ~~~)")


def no_preamble_check(prefix: str):
    def run(output: str, task) -> bool | None:
        first = next((x for x in view(output).lines if x.strip()), "")
        if prefix:
            return first.lower().startswith(prefix.lower())
        if not first:
            return None  # nothing written: no credit for what is not there
        return not CHATTER.match(first) and not first.rstrip().endswith(":")

    doc = f"the first line opens with {prefix!r}" if prefix else "the first line is not chatter (Here is, Sure, ...) and does not end in ':'"
    return _make("no_preamble", "format", run, doc)


MAX_TOKENS = 1000  # an output holding more such tokens than this is not grounded in anything: it scores 0


@lru_cache(maxsize=64)
def _input_tokens(rx: re.Pattern, text: str) -> frozenset[str]:
    return frozenset(rx.findall(text))


def from_input_check(shape: str, prefix: str, placeholder: str, every: bool):
    digits = "number" in placeholder.lower() or placeholder.lower() in ("n", "num")
    rx = re.compile(re.escape(prefix) + (r"\d+" if digits else r"\w+"))
    end = r"(?!\d)" if digits else r"(?!\w)"

    def run(output: str, task) -> float | None:
        given = _input_tokens(rx, getattr(task, "input", "") or "")
        if every:  # a search per input token: no list of the output's tokens is ever built
            return sum(re.search(re.escape(t) + end, output) is not None for t in given) / len(given) if given else None
        have = set()
        for k, m in enumerate(rx.finditer(output)):
            if k == MAX_TOKENS:
                return 0.0
            have.add(m[0])
        return len(have & given) / len(have) if have else None

    ph = _slug(placeholder)
    if every:
        return _make(f"every_input_{ph}", "correctness", run, f"share of the input's {shape} tokens that the output cites", key=True,
                     target=shape)
    return _make(f"{ph}_from_input", "correctness", run,
                 f"share of the output's {shape} tokens that the input holds (0 past {MAX_TOKENS:,} tokens)", target=shape)


def _slug(name: str) -> str:
    """A check-name part for a section or field name in any script: ASCII letters and digits as they are, accents
    dropped (`Überblick`: uberblick), other letters and digits by code point (`摘要`: u6458_u8981)."""
    out = []
    for ch in unicodedata.normalize("NFKD", name.lower()):
        if ch.isascii():
            out.append(ch if ch.isalnum() else "_")
        elif ch.isalnum():
            out.append(f"_u{ord(ch):x}_")
        elif not unicodedata.combining(ch):
            out.append("_")
    return re.sub(r"_+", "_", "".join(out)).strip("_") or "field"


# ------------------------------------------------------------------ reading the template


@dataclass
class Template:
    line: int  # SKILL.md line of the template's first line
    source: str = ""  # the template as written
    first_prefix: str = ""  # the first non-blank line's text before its first placeholder
    heads: list = field(default_factory=list)  # (level, lower title, line as written, SKILL.md line) of literal headings
    literals: list = field(default_factory=list)  # (line, SKILL.md line)
    fields: list = field(default_factory=list)  # (label, SKILL.md line)
    placeholders: list = field(default_factory=list)  # distinct, in order of appearance
    needs_text: list = field(default_factory=list)  # sections (lower title; None before any heading) with a placeholder line
    enums: list = field(default_factory=list)  # (kind, name, values, line as written, SKILL.md line)
    roles: dict = field(default_factory=dict)  # a short placeholder's lower text -> the target it stands for
    sized: list = field(default_factory=list)  # (target, placeholder text, SKILL.md line) of a placeholder that opens
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
    shown_title = ""  # the current literal heading's title as written
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
        if opening and not head:  # "the subject line" for `<type>: <subject>` opening the template
            for h in holes:
                if SHORT_PLACEHOLDER.fullmatch(f"<{h}>") and len(h.split()) <= 2:
                    t.roles.setdefault(f"{h.strip()} line", ("first_line", ""))
        if fld and re.match(r"<\s*[\w~]", fld[2]):
            t.sized.append((("field", fld[1]), fld[2][1:-1], where))
        elif not head and holes and line == f"<{holes[0]}>" and section not in (None, "\0"):
            t.sized.append((("section", shown_title), holes[0], where))
        if head:
            seen_head = True  # `# <title>` opens the template: the line after it is not the first line
            section = head[1].lower() if not holes else "\0"  # a heading with a placeholder: unnamed
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
        yield Derived(headings_check([(lvl, title) for lvl, title, _, _ in t.heads], [s for _, _, s, _ in t.heads]),
                      t.heads[0][3], " / ".join(s for _, _, s, _ in t.heads))
    if t.literals or t.fields:
        where = (t.literals or t.fields)[0][1]
        yield Derived(template_lines_check([x for x, _ in t.literals], [f for f, _ in t.fields]), where,
                      " / ".join([x for x, _ in t.literals] + [f"{f}: ..." for f, _ in t.fields]))
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
        bounds = None if n is None or (below and n == 0) else [("min" if MINIMUM.fullmatch(word) else "max", n - 1 if below else n)]
    elif (m := RANGE.match(lower)) is not None:
        unit_word, bounds = m[4] or m[7], _bounds(m, lower)
    elif (m := re.match(NUM + r"\s+(?:short\s+|brief\s+)?" + UNIT_RX, lower)) is not None:
        n = _number(m[1])  # `<one sentence>`, `<two paragraphs>`: at most that many
        unit_word, bounds = m[2], None if n is None or n == 0 else [("max", n)]
    else:
        return
    unit = UNITS[unit_word]
    if bounds and not (target[0] == "field" and unit in ("lines", "items", "paragraphs")) and \
            re.match(r"\s*(?:[:,;(\u2013\u2014-]|$)|\s+(?:on|about|describing|explaining|saying|that|of|with|for)\b", lower[m.end():]):
        for bound, n in bounds:
            yield Derived(limit_check(target, unit, bound, n), where, f"<{text}>")


# ------------------------------------------------------------------ reading sentences


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
                yield Sentence(text.rstrip(), tuple(codes), start)  # it ended inside a code span: "... line `None.` The"
                text, codes, start = "", [], line
            parts = SPLIT.split(child.content)
            for k, part in enumerate(parts):
                if k:
                    if text.strip():
                        yield Sentence(text.rstrip(), tuple(codes), start)
                    text, codes, start = "", [], line
                text += part if text else part.lstrip()  # no leading space: code offsets stay right
    if text.strip():
        yield Sentence(text.rstrip(), tuple(codes), start)


def sentences(section: Section, tokens=None) -> Iterator[Sentence]:
    tokens = _md.parse(section.text) if tokens is None else tokens
    for prev, tok in zip(tokens, tokens[1:]):
        if tok.type == "inline" and prev.type == "paragraph_open":
            yield from _inline_sentences(tok, section.text_line + tok.map[0])


MAX_NAME_CHARS = 100  # a template name longer than this is found in prose only in backticks


NOT_NAMES = frozenset("line lines item items entry entries bullet bullets word words character characters output "
                      "input first last value values name names".split())


def _forms(name: str) -> list[tuple[str, bool]]:
    """A name's plain-word forms, each with whether it is the singular of a plural name: `Risks` is read as
    "risks" and "risk" (singular), `Next step` as "next step" and "next steps"."""
    if name.endswith("ies") and len(name) > 4:
        return [(name, False), (name[:-3] + "y", True)]
    if name.endswith(("ches", "shes", "sses", "xes")):
        return [(name, False), (name[:-2], True)]
    if name.endswith("s") and not name.endswith(("ss", "us", "is")) and len(name) > 3:
        return [(name, False), (name[:-1], True)]
    plural = name[:-1] + "ies" if name.endswith("y") and name[-2:-1] not in "aeiou" else name + ("es" if name.endswith(("s", "x", "ch", "sh")) else "s")
    return [(name, False), (plural, False)]


class Names:
    """The template's headings and fields by lower-cased name, indexed once per derivation: finding the names a
    sentence mentions costs its length (times the few distinct name lengths), not the template's size. `plain`
    holds the names a sentence may use in plain words (headings, fields, short placeholders; singular and
    plural), matched by one regex built once."""

    def __init__(self, names: dict[str, tuple[str, str]], plain: dict[str, tuple[str, str]] | None = None):
        self.names = names
        self.slots: set[tuple[str, str]] = set()  # sections and fields whose template text names one value
        self.lengths = sorted({len(n) for n in names if len(n) <= MAX_NAME_CHARS})
        self.plain: dict[str, tuple[tuple[str, str], bool]] = {}
        for name, target in (plain if plain is not None else names).items():
            if 3 <= len(name) <= 40 and (name not in NOT_NAMES or (name == "name" and target[0] == "field")) and re.fullmatch(r"[a-z][a-z0-9 '-]*[a-z0-9]", name):
                for form, singular in _forms(name):
                    self.plain.setdefault(form, (target, singular))
        words = "|".join(re.escape(f) for f in sorted(self.plain, key=len, reverse=True))
        self.rx = re.compile(r"(?<![\w`-])(?:(the|each|every|any|a|an|your|its|their)\s+)?(" + words + r")(?![\w`-])") if words else None


class Read(NamedTuple):
    """One sentence, read once for every limit in it: positions of what `_limit_target` looks for."""

    lower: str
    code_offsets: list[int]  # offsets of the code spans that name a target (see _known_name), ascending
    code_targets: list[tuple[str, str]]
    name_ends: list[int]  # end of each "<name> section|field|line" in `lower`, ascending
    name_best: list[tuple[int, tuple[str, str]]]  # the latest-starting such mention ending at or before name_ends[i]
    first_line: int  # where "first line" ends, or -1
    each_line: int
    each_item: int
    whole: bool
    bare: list = []  # (start, end, after each/every/any, target, singular) of each template name in plain words


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
    mentions = []  # (end, start, target) of each "<name> <word>", a name ending where a word starts
    for m in re.finditer(r"(?<= )(?:section|field|line)", lower):
        for length in names.lengths:
            start = m.start() - 1 - length
            if start >= 0 and lower[start : m.start() - 1] in names.names and (start == 0 or not lower[start - 1].isalnum()):
                mentions.append((m.end(), start, names.names[lower[start : m.start() - 1]]))
    mentions.sort(key=lambda x: x[0])
    best, name_best = None, []
    for _, start, target in mentions:
        best = (start, target) if best is None or start >= best[0] else best
        name_best.append(best)
    return Read(lower, [o for o, _ in codes], [t for _, t in codes], [e for e, _, _ in mentions], name_best,
                _end(r"first line", lower), _end(r"\b(each|every|any|no) line\b|\ball lines\b", lower),
                _end(r"\b(each|every) (item|entry|bullet)\b", lower), WHOLE.search(lower) is not None,
                [(m.start(2), m.end(2), m[1] in ("each", "every", "any"), *names.plain[m[2]]) for m in names.rx.finditer(lower)
                 if m[1] or SUBJECT_BEFORE.search(lower[: m.start()])] if names.rx else [])


def _known_name(r: Read, end: int) -> tuple[str, str] | None:
    """The last target named before `end`: a code span naming a template heading or field (or one followed by
    section/field/line), else a template name followed by section/field/line."""
    k = bisect.bisect_left(r.code_offsets, end)
    if k:
        return r.code_targets[k - 1]
    k = bisect.bisect_right(r.name_ends, end)
    return r.name_best[k - 1][1] if k else None


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
NOT_VALUE = re.compile(r"(?:the|a|an|these|those|this|that|following|your|its|their|our|some|any|several|many|more|"
                       r"other|each|every|all|both|" + "|".join(NUMBERS) + r")\b")
IS_WORDS = re.compile(r"\s*(?::\s*|(?:is|are|must be|should be|has to be|will be|can be|can only be|may be|reads|says)\s+)"
                      r"(?:always\s+|only\s+)?$")


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
        tail = re.split(r"\s+[-\u2013\u2014]\s+|\s*\(|\s*;", text[m.end():], maxsplit=1)[0]
        counted = re.match(NUM + r"\s+([a-z][\w-]*(?:\s+[a-z][\w-]*)?)\s*:\s*", tail.lower())  # "one of four statuses: ..."
        if counted:
            noun, tail = counted[2], tail[counted.end():]
        raw, at = VALUE_SPLIT.split(tail.rstrip(". ")), m.start()
    else:
        return None
    values = [v.strip().strip("\"'\u201c\u201d*_").strip() for v in raw]
    ok = len(values) >= 2 and all(v and len(v) <= 30 and len(v.split()) <= 3 and not NOT_VALUE.match(v.lower()) for v in values)
    if counted and _number(counted[1]) != len(values):
        return None  # "one of four statuses" followed by three: not read
    return (at, values, counted[2] if counted else None) if ok and len({v.lower() for v in values}) == len(values) else None


def _plain_enum(s: Sentence, names: Names, at: int, values: list[str], noun: str | None) -> Iterator[Derived]:
    """Plain-word values resolved against the template name right before them: "The decision is either ship or
    hold" (section `Decision`), "Severity: one of low, medium, high" (field `Severity`). A section or field counts
    only when its template text is one placeholder of one or two words naming a value (`<decision>`, not
    `<what changed>`) or an enumeration: "The summary is either short or
    long" about `<what changed>` describes the text, it does not list its values."""
    r = read_sentence(s, names)
    named = names.plain.get(noun) if noun else None  # "one of four statuses: ..." where `Status:` is a field
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
        return None if named[0] in ("field", "heading_line", "first_line") and unit in ("lines", "items", "paragraphs") else named
    if unit in ("chars", "words") and 0 <= r.first_line <= start:
        return ("first_line", "")
    if unit in ("chars", "words") and 0 <= r.each_line <= start:
        return ("each_line", "")
    if unit in ("chars", "words") and 0 <= r.each_item <= start:
        return ("each_item", "")
    if unit != "items" and re.search(r"\b(?:each|every) section\b", r.lower[:start]):
        return ("each_section", "")  # "each section is up to 300 words": every headed section of the output
    return ("output", "") if r.whole and not _other_subject(r.lower[:start]) else None


def _other_subject(before: str) -> bool:
    """Whether the words before a limit name a subject other than the output ("Frontmatter: at most 1024 characters
    in total", "the description has ..."): then "in total" is that subject's total, not the output's."""
    label = re.match(r"\s*([a-z][\w .-]{0,40}):", before)
    if label and label[1].strip() not in ("output", "answer", "response", "the output", "the answer", "the response"):
        return True
    m = re.search(r"\b(?:the|its|your|their)\s+([a-z][\w-]*)\s+(?:is|are|has|have|stays?|must|should|can)\b", before)
    return m is not None and m[1] not in ("output", "answer", "response", "whole", "entire", "reply")


SKIP = ("", "")  # a subject named but not one a check can read: the limit derives nothing


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
        return ("each_field", target[1])  # "each title": every line that starts with `Title:`
    if target[0] != "section" or unit not in ("chars", "words", "sentences"):
        return SKIP if per_line or per_item or each else target  # "each post" where `<post>` is one line: unclear
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
        if m_start >= end and re.fullmatch(r"\s+(?:in|under|of|for|within)\s+(?:the\s+|each\s+|every\s+|your\s+)?",
                                           r.lower[end:m_start]):
            return None if target[0] == "section" and each and unit in ("chars", "words") else target
    return None


MAX_LIMIT = 1_000_000_000  # a length limit above this (characters of one output) is not a limit


COUNT = re.compile(r"\b(" + MAX_WORDS + "|" + BELOW_WORDS + "|" + MIN_WORDS + r")\s+" + NUM
                   + r"\s+([a-z][a-z'-]*(?:\s+[a-z][a-z'-]*){0,3})")


COUNT_RANGE = re.compile(r"\b(?:(between)\s+)?" + NUM + r"(?:\s*[-\u2013\u2014]\s*|\s+(?:to|or|and)\s+)" + NUM
                         + r"\s+([a-z][a-z'-]*(?:\s+[a-z][a-z'-]*){0,3})|\b(exactly)\s+" + NUM + r"\s+([a-z][a-z'-]*(?:\s+[a-z][a-z'-]*){0,3})")


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


ADJECTIVES = frozenset("numbered short brief concrete specific distinct separate open key main new other".split())
PAREN_MAX = re.compile(r"\(\s*(?:max\.?|maximum|at most|up to|no more than)\s+" + NUM + r"\s*\)")


def _paren_sentence(s: Sentence, names: Names, spans: list | None) -> Iterator[Derived]:
    """A plural section name followed by "(max N)": "add an Open questions section (max 3)" counts its items."""
    lower = s.text.lower()
    for m in PAREN_MAX.finditer(lower):
        before = [(n.end(2), *names.plain[n[2]]) for n in names.rx.finditer(lower[: m.start()])] if names.rx else []
        n = _number(m[1])
        if before and n is not None and before[-1][1][0] == "section" and not before[-1][2] \
                and re.fullmatch(r"\s*(?:section|list)?\s*", lower[before[-1][0] : m.start()]):
            yield Derived(limit_check(before[-1][1], "items", "max", n), s.line, s.text)
            if spans is not None:
                spans.append(m.span())


def _count_sentence(s: Sentence, names: Names, spans: list | None) -> Iterator[Derived]:
    """"at most N <things>" where <things> is a plural section name of the template, alone or before items,
    entries or bullets: "List no more than six changes", "at most 10 timeline entries" count that section's items;
    so do a range or exact count of them ("two to four risks", "exactly three options")."""
    lower = s.text.lower()
    found = [(m, m[3], False) for m in COUNT.finditer(lower)] + [(m, m[4] or m[7], True) for m in COUNT_RANGE.finditer(lower)]
    for m, tail, ranged in found:
        words = tail.split()
        if words and words[0] in ADJECTIVES:  # "5-10 numbered questions"
            words = words[1:]
        if HEDGE.search(lower[: m.start()]) or HEDGE_AFTER.match(lower, m.end()):
            continue
        for k in range(len(words), 0, -1):
            head = " ".join(words[:k])
            hit = names.plain.get(head)
            rest = words[k] if k < len(words) else ""
            if hit and hit[0][0] == "section" and not hit[1] and (head.endswith("s") or rest in ("items", "entries", "bullets")) \
                    and head not in UNITS:
                if ranged:
                    bounds = _bounds(m, lower)
                else:
                    n = _number(m[2])
                    below = BELOW.fullmatch(m[1]) is not None
                    bounds = None if n is None or (below and n == 0) else \
                        [("min" if MINIMUM.fullmatch(m[1]) else "max", n - 1 if below else n)]
                if not bounds:
                    break
                for bound, n in bounds:
                    yield Derived(limit_check(hit[0], "items", bound, n), s.line, s.text)
                if spans is not None:
                    spans.append(m.span())
                break


def limit_sentence(s: Sentence, names: Names, problems: list[tuple[int, str]], spans: list | None = None) -> Iterator[Derived]:
    r, floor, last = None, 0, None
    lower = s.text.lower()
    yield from _count_sentence(s, names, spans)
    yield from _paren_sentence(s, names, spans)
    taken = [sp for sp in spans or () if sp]
    found = []  # (match, unit word, [(bound, n)] or None)
    for m in LIMIT.finditer(lower):
        word, number, unit_word = _limit_parts(m)
        n = _number(number)
        if n is None:
            problems.append((s.line, f"the limit '{word} {number if len(number) <= 20 else number[:17] + '...'} {unit_word}' is above {MAX_LIMIT:,}: "
                                     "state a smaller number, or leave the length to the judge"))
            continue
        below = BELOW.fullmatch(word) is not None
        found.append((m, unit_word, None if below and n == 0 else [("min" if MINIMUM.fullmatch(word) else "max", n - 1 if below else n)]))
    for m in RANGE.finditer(lower):
        if not any(a <= m.start() < b for a, b in taken):
            found.append((m, m[4] or m[7], _bounds(m, lower)))
    for m, unit_word, bounds in sorted(found, key=lambda x: x[0].start()):
        r = r or read_sentence(s, names)
        unit = UNITS[unit_word]
        hedged = HEDGE.search(lower[: m.start()]) or HEDGE_AFTER.match(lower, m.end())
        target = None if hedged else _limit_target(r, m.start(), m.end(), unit, floor)
        if target is None and last and last[0] in ("section", "items_in") and unit in ("chars", "words", "sentences") \
                and re.fullmatch(r"[\s,;]*(?:and\s+|with\s+)?each\s+(?:is\s+|of\s+them\s+)?", lower[floor : m.start()]):
            target = ("items_in", last[1])  # "three to five bullets, each under 60 characters"
        elif target is None and last and re.fullmatch(r"\s*(?:,\s*)?(?:and|but)\s+(?:is\s+|are\s+)?", lower[floor : m.start()]) \
                and not (last[0] in ("field", "heading_line") and unit in ("lines", "items")):
            target = last  # "at most 2 sentences and under 300 characters": the same subject
        floor, last = m.end(), target or last
        if target and target[0] in ("section", "field") and unit in ("chars", "words", "sentences") \
                and re.match(r"\s+each\b", lower[m.end():]):
            target = ("items_in" if target[0] == "section" else "each_field", target[1])  # "risks under 80 characters each"
        if target and bounds:
            for bound, n in bounds:
                yield Derived(limit_check(target, unit, bound, n), s.line, s.text)
            if spans is not None:
                spans.append(m.span())
        elif spans is not None:
            spans.append(None)


VALUE_RANGE = re.compile(r"([a-z][\w ()/'-]{0,40}):\s*(?:between\s+)?(-?\d+(?:\.\d+)?)\s*(?:[-\u2013\u2014]|to|and)\s*(-?\d+(?:\.\d+)?)\s*\.?")
NUMBER_VALUE = re.compile(r"(-?\d+(?:\.\d+)?)\s*[a-z%]*")


def value_range_check(label: str, low: float, high: float):
    def run(output: str, task) -> bool | None:
        value = _field(view(output), label)
        if value is None:
            return None  # a missing field: the headings and template-lines checks say so
        m = NUMBER_VALUE.fullmatch(_bare(value).lower())
        return m is not None and low <= float(m[1]) <= high

    shown = f"{low:g} to {high:g}"
    return _make(f"{_slug(label)}_in_range", "format", run, f"field '{label}' is a number from {shown}", target=label.lower())


def value_sentence(s: Sentence, names: Names) -> Iterator[Derived]:
    """"FPS: 10-30.", "Score: between 1 and 5": a template field's value is a number in that range (a unit word
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
        prefix = t.first_prefix if t and t.first_prefix.strip() else ""  # `# ` keeps its space: `## x` is not a title
        yield Derived(no_preamble_check(prefix), s.line, s.text)


def input_sentence(s: Sentence) -> Iterator[Derived]:
    lower = s.text.lower()
    if not re.search(r"\b(the|its|their) input\b", lower):
        return
    for _, code in s.codes[:10]:  # a sentence names a shape or two, not a thousand
        m = SHAPE.match(code)
        if not m or not ("number" in m[2].lower() or not m[1][-1].isalnum()):
            continue
        if re.search(r"\bonly\b", lower):
            yield Derived(from_input_check(code, m[1], m[2], every=False), s.line, s.text)
        if re.search(r"\b(every|each|all)\b", lower):
            yield Derived(from_input_check(code, m[1], m[2], every=True), s.line, s.text)


# ------------------------------------------------------------------ the whole derivation

COUNTED = r"(?:sentences?|paragraphs?|lines?|words?|items?|bullets?|entries|entry|characters?|chars)"
TRIGGERS = re.compile(r"\b(?:" + MAX_WORDS + "|" + BELOW_WORDS + "|" + MIN_WORDS + r"|exactly|between|only)\s+" + NUM + r"\b"
                      r"|\b(?:at most|no more than|at least|one of)\b|\beither\b.{1,80}?\bor\b"
                      r"|\b" + NUM + r"\s+(?:or|to)\s+" + NUM + r"\s+" + COUNTED + r"\b"
                      r"|\b" + NUM + r"\s+" + COUNTED + r"\s+or\s+(?:fewer|less|more)\b"
                      r"|\b" + NUM + r"\s+(?:short\s+)?(?:sentences?|paragraphs?)\b"
                      r"|(?:\b(?:about|around|roughly|approximately|usually|typically|ideally|default)\s+|~\s*)" + NUM + r"\b")
BARE_LIMIT = re.compile(r"\b(?:" + MAX_WORDS + "|" + BELOW_WORDS + "|" + MIN_WORDS + r"|exactly)\s+" + NUM + r"\b")
"""A sentence that reads like a limit, count or enumeration: when nothing is derived from it (or one of its limits
has no target), `--check` lists it as not derived, so that the author sees what the reward will not check."""
TEMPLATE_INFO = ("", "markdown", "md", "text")


@lru_cache(maxsize=64)
def _derive(path: str, output_format: Section | None, rules: Section | None) -> Derivation:
    template, names, found, ignored, problems = None, {}, [], [], []
    parsed = {id(sec): _md.parse(sec.text) for sec in (output_format, rules) if sec is not None}
    if output_format is not None:
        tokens = parsed[id(output_format)]
        fence = next((t for t in tokens if t.type == "fence" and t.info.strip().lower() in TEMPLATE_INFO), None)
        if fence is not None:
            template = read_template(fence.content, output_format.text_line + fence.map[0] + 1)
            found += template_checks(template)
            names = {title: ("section", shown.lstrip("#").strip()) for _, title, shown, _ in template.heads}
            names.update({label.lower(): ("field", label) for label, _ in template.fields})
    index = Names(names, {**(template.roles if template else {}), **names})
    if template is not None:  # sections that hold one short value: a plain-word enumeration may be about them
        index.slots = {v for k, v in template.roles.items() if v[0] in ("section", "field") and len(k.split()) <= 2
                       and not re.match(r"(?:what|why|how|who|when|where|which|a|an|the|one|two|some|any)\b", k)} \
            | {(e[0], e[1]) for e in template.enums}
    for section in (output_format, rules):
        for s in sentences(section, parsed[id(section)]) if section is not None else ():
            spans: list = []  # of each limit derived; None for a limit whose subject is not resolved
            got = [*enum_sentence(s, index), *limit_sentence(s, index, problems, spans), *forbid_sentence(s, template),
                   *value_sentence(s, index),
                   *input_sentence(s)]
            found += got
            lower = s.text.lower()
            if None in spans or (not got and TRIGGERS.search(lower)) or any(
                    not any(a <= m.end() - 1 < b for a, b in spans) for m in BARE_LIMIT.finditer(lower)):
                ignored.append(s)
    checks = _unique(found)
    problems += contradictions(checks, path)
    if template is not None:
        problems += unsatisfiable(checks, template)
    return Derivation(checks, tuple(ignored), path, tuple(f"{path}:{line}: {msg}" for line, msg in sorted(problems)))


def _unique(found: list[Derived]) -> tuple[Derived, ...]:
    """One check per constraint (the first statement wins), each under its own name: two constraints whose
    names read alike (`Next steps`, `Next-steps`) are both kept, the second as `<name>_2`."""
    unique: dict[tuple, Derived] = {}
    for d in found:
        unique.setdefault(d.fn.constraint, d)
    taken: set[str] = set()
    for d in unique.values():
        name, k = d.fn.__name__, 1
        while name in taken:
            k += 1
            name = f"{d.fn.__name__}_{k}"
        taken.add(name)
        d.fn.__name__ = d.fn.__qualname__ = name
    return tuple(unique.values())


# ------------------------------------------------------------------ checks no output can pass


def contradictions(checks: tuple[Derived, ...], path: str) -> Iterator[tuple[int, str]]:
    """A minimum above a maximum of the same unit, on the same target or on a part of a whole output."""
    most: dict[tuple, Derived] = {}  # (target, unit) -> the smallest maximum
    for d in checks:
        if d.fn.limit and d.fn.limit[2] == "max":
            key = d.fn.limit[:2]
            if key not in most or d.fn.limit[3] < most[key].fn.limit[3]:
                most[key] = d
    for d in checks:
        if not d.fn.limit or d.fn.limit[2] != "min":
            continue
        target, unit, _, n = d.fn.limit
        wider = [most.get((target, unit))] + ([most.get((("output", ""), unit))] if target[0] in ("section", "field", "name", "first_line") else [])
        for cap in wider:
            if cap is not None and cap.fn.limit[3] < n:
                (first, second) = sorted((cap, d), key=lambda x: x.line)
                yield (second.line, f"'{second.fn.__doc__}' contradicts '{first.fn.__doc__}' ({path}:{first.line}): "
                                    "no output can meet both; drop or change one")
                break


def filled(template: Template) -> str:
    """The template with each placeholder filled in: an enumeration's first value, else `x`."""
    def fill(m: re.Match) -> str:
        values = _alternatives(m[1])
        return values[0] if values else "x"

    return "\n".join(PLACEHOLDER.sub(fill, line) for line in template.source.split("\n"))


def unsatisfiable(checks: tuple[Derived, ...], template: Template) -> Iterator[tuple[int, str]]:
    """The format checks that the template itself, filled in, fails: an output written to the template would
    fail them too (a lone `<a | b>` that shares its section with a field line, a limit the template overruns)."""
    example, task, end = filled(template), _NO_TASK, template.line + template.source.count("\n") + 1
    for d in checks:
        fn = d.fn
        if fn.dimension != "format" or (fn.limit and fn.limit[2] == "min"):
            continue  # correctness needs a task's input; a template's `x` is short of any minimum
        if fn.constraint[0].endswith(("_one_of", "_in_range")) and not template.line <= d.line < end:
            continue  # allowed values stated in prose: the template's `x` stands where one of them goes
        result = fn(example, task)
        if result is not None and result is not True and not (result is not False and result >= 1):
            yield (d.line, f"derived check '{fn.__name__}' ({fn.__doc__}) fails on the template itself, filled in: "
                           "no output can pass it and keep the template; reword the template or the sentence, or "
                           "set metadata derive-checks: \"false\"")


class _Task(NamedTuple):
    input: str = ""


_NO_TASK = _Task()


def derive(skill: Skill) -> Derivation:
    """Every check the skill's SKILL.md yields, whether or not `derive-checks` is on."""
    return _derive(display(skill.path / "SKILL.md"), skill.sections.get("output format"), skill.sections.get("rules"))


def derived_checks(skill: Skill) -> list[Callable]:
    """The derived checks that score this skill: none when its metadata says `derive-checks: "false"`.
    Raise SkillError when the derivation found problems (a limit too big to read, a contradiction, a check no
    output can pass): every command that scores, `--check` included, says so and exits 2."""
    if not skill.derive:
        return []
    found = derive(skill)
    if found.problems:
        raise SkillError(list(found.problems))
    return [d.fn for d in found.checks]
