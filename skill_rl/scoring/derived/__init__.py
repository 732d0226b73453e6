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

from skill_rl.scoring.derived.derivation import derive, derived_checks
from skill_rl.scoring.derived.grammar import Derivation, Derived, Sentence
from skill_rl.scoring.derived.output import View, view

__all__ = ["Derivation", "Derived", "Sentence", "View", "derive", "derived_checks", "view"]
