"""The check factories: each makes one rubric check (a pure function of an output and its task) from what the
derivation read in SKILL.md.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from skill_rl.scoring.checks import check
from skill_rl.scoring.derived.grammar import CHATTER
from skill_rl.scoring.derived.output import View, _field, _is_item, _named, _section, view

# one sentence of SKILL.md checked: of a judged dimension, a small part (rubric.py)
DERIVED_COVERS = 0.15


def _make(
    name: str, dimension: str, fn, doc: str, *, gate: bool = False, key: bool = False, target: str = "", limit=None
):
    """A rubric check named `name`; `target` (the lower-cased section or field it reads) and `name` together
    identify the constraint it states; `limit` is (target, unit, bound, n) for a length limit."""
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    fn.constraint, fn.limit = (name, target), limit
    # what SKILL.md states
    return check(dimension, gate=gate, key=key, covers=DERIVED_COVERS, kind="fact")(fn)


def headings_check(wanted: list[tuple[int, str]], shown: list[str]):
    wanted_set = set(wanted)

    def run(output: str, task) -> bool:
        return [(lvl, t) for _, lvl, t in view(output).heads if (lvl, t) in wanted_set] == wanted

    return _make(
        "headings",
        "format",
        run,
        f"the headings {', '.join(shown)} appear once each, in this order",
        gate=True,
        key=True,
    )


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
    return _make(
        "placeholders_filled",
        "format",
        run,
        f"no placeholder ({', '.join(placeholders)}) is left verbatim" + (f"; text in {where}" if where else ""),
    )


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

    return _make(
        f"{_slug(name)}_one_of", "format", run, f"{kind} '{name}' is one of {', '.join(values)}", target=name.lower()
    )


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
        values = [(x[len(key) :].strip(),) for x in v.lines if x[: len(key)].lower() == key]
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
            # a missing target, or nothing written: a limit is no credit for silence
            return None
        return all((_measure(unit, p) <= n) if bound == "max" else (_measure(unit, p) >= n) for p in pieces)

    kind, name = target
    shown = name.split(":", 1)[-1]
    label = {
        "first_line": "the first line",
        "each_line": "each line",
        "each_item": "each list item",
        "each_section": "each section",
        "output": "the whole output",
        "items_in": f"each item of section '{name}'",
        "lines_in": f"each line of section '{name}'",
        "each_field": f"each field '{name}'",
        "heading_line": f"the first level-{name.split(':')[0]} heading's title (<{shown}>)",
    }.get(kind, f"{kind} '{name}'")
    slug = {
        "first_line": "first_line",
        "each_line": "each_line",
        "each_item": "each_item",
        "output": "output",
        "each_section": "each_section",
        "items_in": f"{_slug(name)}_each_item",
        "lines_in": f"{_slug(name)}_each_line",
        "each_field": f"each_{_slug(name)}",
    }.get(kind, _slug(shown))
    words = {"chars": "characters", "items": "list items"}.get(unit, unit)
    words = words.removesuffix("s") if n == 1 else words
    return _make(
        f"{slug}_{bound}_{unit}",
        "format",
        run,
        f"{label} has {'at most' if bound == 'max' else 'at least'} {n:,} {words}",
        target=name.lower(),
        limit=(target, unit, bound, n),
    )


def no_fence_check():
    def run(output: str, task) -> bool | None:
        if not output.strip():
            # nothing written: no credit for what is not there
            return None
        return not any(x.lstrip().startswith(("```", "~~~")) for x in view(output).lines)

    return _make("no_code_fence", "format", run, "no line opens a code fence (``` or ~~~)")


def no_preamble_check(prefix: str):
    def run(output: str, task) -> bool | None:
        first = next((x for x in view(output).lines if x.strip()), "")
        if prefix:
            return first.lower().startswith(prefix.lower())
        if not first:
            # nothing written: no credit for what is not there
            return None
        return not CHATTER.match(first) and not first.rstrip().endswith(":")

    doc = (
        f"the first line opens with {prefix!r}"
        if prefix
        else "the first line is not chatter (Here is, Sure, ...) and does not end in ':'"
    )
    return _make("no_preamble", "format", run, doc)


# an output holding more such tokens than this is not grounded in anything: it scores 0
MAX_TOKENS = 1000


@lru_cache(maxsize=64)
def _input_tokens(rx: re.Pattern, text: str) -> frozenset[str]:
    return frozenset(rx.findall(text))


def from_input_check(shape: str, prefix: str, placeholder: str, every: bool):
    digits = "number" in placeholder.lower() or placeholder.lower() in ("n", "num")
    rx = re.compile(re.escape(prefix) + (r"\d+" if digits else r"\w+"))
    end = r"(?!\d)" if digits else r"(?!\w)"

    def run(output: str, task) -> float | None:
        given = _input_tokens(rx, getattr(task, "input", "") or "")
        # a search per input token: no list of the output's tokens is ever built
        if every:
            return sum(re.search(re.escape(t) + end, output) is not None for t in given) / len(given) if given else None
        have = set()
        for k, m in enumerate(rx.finditer(output)):
            if k == MAX_TOKENS:
                return 0.0
            have.add(m[0])
        return len(have & given) / len(have) if have else None

    ph = _slug(placeholder)
    if every:
        return _make(
            f"every_input_{ph}",
            "correctness",
            run,
            f"share of the input's {shape} tokens that the output cites",
            key=True,
            target=shape,
        )
    return _make(
        f"{ph}_from_input",
        "correctness",
        run,
        f"share of the output's {shape} tokens that the input holds (0 past {MAX_TOKENS:,} tokens)",
        target=shape,
    )


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
