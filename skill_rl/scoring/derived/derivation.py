"""The whole derivation of one SKILL.md (cached), one check per constraint, and what no output can pass: contradictory
limits and format checks the filled-in template fails.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Iterator, NamedTuple

from skill_rl.scoring.derived.demands import (
    enum_sentence,
    forbid_sentence,
    input_sentence,
    limit_sentence,
    value_sentence,
)
from skill_rl.scoring.derived.grammar import (
    BELOW_WORDS,
    MAX_WORDS,
    MIN_WORDS,
    NUM,
    PLACEHOLDER,
    Derivation,
    Derived,
    _md,
)
from skill_rl.scoring.derived.sentences import Names, sentences
from skill_rl.scoring.derived.template import Template, _alternatives, read_template, template_checks
from skill_rl.skills import Section, Skill, SkillError
from skill_rl.text import display

COUNTED = r"(?:sentences?|paragraphs?|lines?|words?|items?|bullets?|entries|entry|characters?|chars)"
TRIGGERS = re.compile(
    r"\b(?:" + MAX_WORDS + "|" + BELOW_WORDS + "|" + MIN_WORDS + r"|exactly|between|only)\s+" + NUM + r"\b"
    r"|\b(?:at most|no more than|at least|one of)\b|\beither\b.{1,80}?\bor\b"
    r"|\b" + NUM + r"\s+(?:or|to)\s+" + NUM + r"\s+" + COUNTED + r"\b"
    r"|\b" + NUM + r"\s+" + COUNTED + r"\s+or\s+(?:fewer|less|more)\b"
    r"|\b" + NUM + r"\s+(?:short\s+)?(?:sentences?|paragraphs?)\b"
    r"|(?:\b(?:about|around|roughly|approximately|usually|typically|ideally|default)\s+|~\s*)" + NUM + r"\b"
)
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
    # sections that hold one short value: a plain-word enumeration may be about them
    if template is not None:
        index.slots = {
            v
            for k, v in template.roles.items()
            if v[0] in ("section", "field")
            and len(k.split()) <= 2
            and not re.match(r"(?:what|why|how|who|when|where|which|a|an|the|one|two|some|any)\b", k)
        } | {(e[0], e[1]) for e in template.enums}
    for section in (output_format, rules):
        for s in sentences(section, parsed[id(section)]) if section is not None else ():
            # of each limit derived; None for a limit whose subject is not resolved
            spans: list = []
            got = [
                *enum_sentence(s, index),
                *limit_sentence(s, index, problems, spans),
                *forbid_sentence(s, template),
                *value_sentence(s, index),
                *input_sentence(s),
            ]
            found += got
            lower = s.text.lower()
            if (
                None in spans
                or (not got and TRIGGERS.search(lower))
                or any(not any(a <= m.end() - 1 < b for a, b in spans) for m in BARE_LIMIT.finditer(lower))
            ):
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


# ------------------------------------------------------------------ checks no output can pass


def contradictions(checks: tuple[Derived, ...], path: str) -> Iterator[tuple[int, str]]:
    """A minimum above a maximum of the same unit, on the same target or on a part of a whole output."""
    # (target, unit) -> the smallest maximum
    most: dict[tuple, Derived] = {}
    for d in checks:
        if d.fn.limit and d.fn.limit[2] == "max":
            key = d.fn.limit[:2]
            if key not in most or d.fn.limit[3] < most[key].fn.limit[3]:
                most[key] = d
    for d in checks:
        if not d.fn.limit or d.fn.limit[2] != "min":
            continue
        target, unit, _, n = d.fn.limit
        wider = [most.get((target, unit))] + (
            [most.get((("output", ""), unit))] if target[0] in ("section", "field", "name", "first_line") else []
        )
        for cap in wider:
            if cap is not None and cap.fn.limit[3] < n:
                (first, second) = sorted((cap, d), key=lambda x: x.line)
                yield (
                    second.line,
                    f"'{second.fn.__doc__}' contradicts '{first.fn.__doc__}' ({path}:{first.line}): "
                    "no output can meet both; drop or change one",
                )
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
            # correctness needs a task's input; a template's `x` is short of any minimum
            continue
        if fn.constraint[0].endswith(("_one_of", "_in_range")) and not template.line <= d.line < end:
            # allowed values stated in prose: the template's `x` stands where one of them goes
            continue
        result = fn(example, task)
        if result is not None and result is not True and not (result is not False and result >= 1):
            yield (
                d.line,
                f"derived check '{fn.__name__}' ({fn.__doc__}) fails on the template itself, filled in: "
                "no output can pass it and keep the template; reword the template or the sentence, or "
                'set metadata derive-checks: "false"',
            )


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
