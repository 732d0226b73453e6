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
  <target>_max_<unit>  "at most N <unit>", "no more than N <unit>"; `_min_` for "at least N <unit>".
                       unit: characters, words, lines or items (list items); target, first found before
                       the number: a named section or field (`Name`, or "Name section|field|line" for a
                       template name), "first line", "each/every/any/no line", "each/every item|entry|
                       bullet", or anywhere in the sentence "whole output", "the output", "in all"
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

Every check runs in time linear in the output. Names collide only when two sentences state the same
constraint on the same target; the first one stated wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterator, NamedTuple

from markdown_it import MarkdownIt

from .rubric import check
from .skills import Section, Skill, display

_md = MarkdownIt("commonmark")
PLACEHOLDER = re.compile(r"<([^<>\s][^<>]*)>")
NAME_WORD = re.compile(r"\s*(section|field|line)\b")
FIELD = re.compile(r"^([A-Za-z][\w ()/'-]{0,40}):[ \t]+(<[^<>]+>)[ \t]*$")
SHAPE = re.compile(r"^([^\s<>`]+)<([A-Za-z][\w -]*)>$")
ITEM = re.compile(r"(?:[-*+]|\d{1,9}[.)])[ \t]")
SPLIT = re.compile(r"(?<=[.!?;])\s+")
NUMBERS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                      "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}
UNITS = {"character": "chars", "characters": "chars", "chars": "chars", "word": "words", "words": "words",
         "line": "lines", "lines": "lines", "item": "items", "items": "items", "entry": "items",
         "entries": "items", "bullet": "items", "bullets": "items"}
LIMIT = re.compile(r"\b(at most|no more than|at least)\s+(\d[\d,]*|" + "|".join(NUMBERS) + r")\s+("
                   + "|".join(UNITS) + r")\b")
NEGATION = re.compile(r"\b(no|not|never|without|nor|don't|avoid)\b")
FENCE_WORDS = re.compile(r"\bcode (?:fences?|blocks?)\b|\bfenced\b|```")
PREAMBLE_WORDS = re.compile(r"\bno preamble\b|\bnothing (?:before|but|else)\b|\bno (?:text|words|introduction) before\b"
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
    ignored: tuple[Sentence, ...]  # sentences that look like constraints but match no form: the judge reads them
    path: str  # SKILL.md as displayed


# ------------------------------------------------------------------ the output, read once per output


class View(NamedTuple):
    lines: tuple[str, ...]
    heads: tuple[tuple[int, int, str], ...]  # (line index, level, lower-cased title)


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
    return View(lines, heads)


def _section(v: View, name: str | None) -> tuple[str, ...] | None:
    """The lines under the first heading titled `name` (to the next heading); None: text before any heading."""
    if name is None:
        return v.lines[: v.heads[0][0]] if v.heads else v.lines
    for k, (i, _, title) in enumerate(v.heads):
        if title == name:
            return v.lines[i + 1 : v.heads[k + 1][0] if k + 1 < len(v.heads) else len(v.lines)]
    return None


def _field(v: View, label: str) -> str | None:
    key = label.lower() + ":"
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


def _make(name: str, dimension: str, fn, doc: str, *, gate: bool = False, key: bool = False):
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return check(dimension, gate=gate, key=key, covers=DERIVED_COVERS)(fn)


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

    return _make(f"{_slug(name)}_one_of", "format", run, f"{kind} '{name}' is one of {', '.join(values)}")


def _measure(unit: str, lines: tuple[str, ...]) -> int:
    if unit == "chars":
        return len("\n".join(lines).strip())
    if unit == "words":
        return sum(len(x.split()) for x in lines)
    if unit == "lines":
        return sum(bool(x.strip()) for x in lines)
    return sum(_is_item(x) for x in lines)


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
    lines = _named(v, kind, name)
    return None if lines is None else [lines]


def limit_check(target: tuple[str, str], unit: str, bound: str, n: int):
    def run(output: str, task) -> bool | None:
        pieces = _pieces(view(output), target)
        if pieces is None or (bound == "max" and not output.strip()):
            return None  # a missing target, or nothing written: a limit is no credit for silence
        return all((_measure(unit, p) <= n) if bound == "max" else (_measure(unit, p) >= n) for p in pieces)

    kind, name = target
    label = {"first_line": "the first line", "each_line": "each line", "each_item": "each list item",
             "output": "the whole output"}.get(kind, f"{kind} '{name}'")
    slug = {"first_line": "first_line", "each_line": "each_line", "each_item": "each_item", "output": "output"}.get(kind, _slug(name))
    words = {"chars": "characters", "items": "list items"}.get(unit, unit)
    words = words.removesuffix("s") if n == 1 else words
    return _make(f"{slug}_{bound}_{unit}", "format", run, f"{label} has {'at most' if bound == 'max' else 'at least'} {n:,} {words}")


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
        return _make(f"every_input_{ph}", "correctness", run, f"share of the input's {shape} tokens that the output cites", key=True)
    return _make(f"{ph}_from_input", "correctness", run,
                 f"share of the output's {shape} tokens that the input holds (0 past {MAX_TOKENS:,} tokens)")


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "field"


# ------------------------------------------------------------------ reading the template


@dataclass
class Template:
    line: int  # SKILL.md line of the template's first line
    first_prefix: str = ""  # the first non-blank line's text before its first placeholder
    heads: list = field(default_factory=list)  # (level, lower title, line as written, SKILL.md line) of literal headings
    literals: list = field(default_factory=list)  # (line, SKILL.md line)
    fields: list = field(default_factory=list)  # (label, SKILL.md line)
    placeholders: list = field(default_factory=list)  # distinct, in order of appearance
    needs_text: list = field(default_factory=list)  # sections (lower title; None before any heading) with a placeholder line
    enums: list = field(default_factory=list)  # (kind, name, values, line as written, SKILL.md line)


def _alternatives(inner: str) -> list[str] | None:
    values = [x.strip().strip("`").strip() for x in inner.split("|")]
    return values if len(values) >= 2 and all(0 < len(x) <= 40 for x in values) else None


def read_template(source: str, first_line: int) -> Template:
    """Sort a template's lines into headings, literal lines, fields, placeholder lines and enumerations."""
    t = Template(first_line)
    section: str | None = None
    lines = source.split("\n")
    first = next((x.strip() for x in lines if x.strip()), "")
    t.first_prefix = PLACEHOLDER.split(first, 1)[0]
    for n, raw in enumerate(lines):
        line, where = raw.strip(), first_line + n
        holes = PLACEHOLDER.findall(line)
        t.placeholders += [f"<{h}>" for h in holes if f"<{h}>" not in t.placeholders]
        head, fld = heading(line), FIELD.match(line)
        if not line:
            continue
        if head:
            section = head[1].lower() if not holes else "\0"  # a heading with a placeholder: unnamed
            if not holes:
                t.heads.append((head[0], section, line, where))
        elif fld:
            t.fields.append((fld[1], where))
            if values := _alternatives(fld[2][1:-1]):
                t.enums.append(("field", fld[1], values, line, where))
        elif holes:
            if section != "\0" and section not in t.needs_text:
                t.needs_text.append(section)
            if line == f"<{holes[0]}>" and section not in (None, "\0") and (values := _alternatives(holes[0])):
                title = next(h[2] for h in reversed(t.heads) if h[1] == section).lstrip("#").strip()
                t.enums.append(("section", title, values, line, where))
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


def sentences(section: Section) -> Iterator[Sentence]:
    tokens = _md.parse(section.text)
    for prev, tok in zip(tokens, tokens[1:]):
        if tok.type == "inline" and prev.type == "paragraph_open":
            yield from _inline_sentences(tok, section.text_line + tok.map[0])


def _known_name(text: str, names: dict[str, tuple[str, str]], codes, end: int, any_code: bool = False) -> tuple[str, str] | None:
    """The last target named before `end`: a code span naming a template heading or field (any code span with
    `any_code`, or one followed by section/field/line), else a template name followed by section/field/line."""
    for offset, code in reversed(codes):
        bare, word = code.lstrip("#").strip(), NAME_WORD.match(text, offset + len(code) + 2)
        if offset < end and (any_code or bare.lower() in names or word):
            kind = "name" if not word else "section" if word[1] == "section" else "field"
            return names.get(bare.lower(), (kind, bare))
    lower = text[:end].lower()
    hits = [(lower.rfind(f"{n} {w}"), v) for n, v in names.items() for w in ("section", "field", "line")]
    best = max(hits, default=(-1, None))
    return best[1] if best[0] >= 0 else None


def enum_sentence(s: Sentence, names) -> Iterator[Derived]:
    at = s.text.lower().find("one of")
    values = [c for off, c in s.codes if off > at]
    target = _known_name(s.text, names, s.codes, at, any_code=True) if at >= 0 and len(values) >= 2 else None
    if target:
        yield Derived(enum_check(target[0], target[1], values), s.line, s.text)


def _limit_target(s: Sentence, names, end: int, unit: str) -> tuple[str, str] | None:
    lower = s.text[:end].lower()
    named = _known_name(s.text, names, s.codes, end)
    if named:
        return None if named[0] == "field" and unit in ("lines", "items") else named
    if unit in ("chars", "words") and "first line" in lower:
        return ("first_line", "")
    if unit in ("chars", "words") and re.search(r"\b(each|every|any|no) line\b|\ball lines\b", lower):
        return ("each_line", "")
    if unit in ("chars", "words") and re.search(r"\b(each|every) (item|entry|bullet)\b", lower):
        return ("each_item", "")
    return ("output", "") if WHOLE.search(s.text.lower()) else None


def limit_sentence(s: Sentence, names) -> Iterator[Derived]:
    for m in LIMIT.finditer(s.text.lower()):
        unit = UNITS[m[3]]
        target = _limit_target(s, names, m.start(), unit)
        if target:
            n = NUMBERS.get(m[2]) if m[2] in NUMBERS else int(m[2].replace(",", ""))
            yield Derived(limit_check(target, unit, "min" if m[1] == "at least" else "max", n), s.line, s.text)


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

TRIGGERS = re.compile(r"\b(at most|no more than|at least|one of)\b")
TEMPLATE_INFO = ("", "markdown", "md", "text")


@lru_cache(maxsize=64)
def _derive(path: str, output_format: Section | None, rules: Section | None) -> Derivation:
    template, names, found, ignored = None, {}, [], []
    if output_format is not None:
        tokens = _md.parse(output_format.text)
        fence = next((t for t in tokens if t.type == "fence" and t.info.strip().lower() in TEMPLATE_INFO), None)
        if fence is not None:
            template = read_template(fence.content, output_format.text_line + fence.map[0] + 1)
            found += template_checks(template)
            names = {title: ("section", shown.lstrip("#").strip()) for _, title, shown, _ in template.heads}
            names.update({label.lower(): ("field", label) for label, _ in template.fields})
    for section in (output_format, rules):
        for s in sentences(section) if section is not None else ():
            got = [*enum_sentence(s, names), *limit_sentence(s, names), *forbid_sentence(s, template), *input_sentence(s)]
            found += got
            if not got and TRIGGERS.search(s.text.lower()):
                ignored.append(s)
    unique: dict[str, Derived] = {}
    for d in found:
        unique.setdefault(d.fn.__name__, d)  # the same constraint stated twice: the first statement wins
    return Derivation(tuple(unique.values()), tuple(ignored), path)


def derive(skill: Skill) -> Derivation:
    """Every check the skill's SKILL.md yields, whether or not `derive-checks` is on."""
    return _derive(display(skill.path / "SKILL.md"), skill.sections.get("output format"), skill.sections.get("rules"))


def derived_checks(skill: Skill) -> list[Callable]:
    """The derived checks that score this skill: none when its metadata says `derive-checks: "false"`."""
    return [d.fn for d in derive(skill).checks] if skill.derive else []
