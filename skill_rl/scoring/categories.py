"""A skill's categorical fields: the few values an answer picks one of (a commit's type, a review's verdict, a
release's type), read from each answer so that a collapse to one value across different tasks is seen.

A policy that found the format worth more than the content answers every task alike: after ten CPU steps all
24 greedy commit headers were `feat` (docs/cpu-learning.md). The reward may not pay for it, and the mean reward
hides it; the distribution of these fields shows it. A skill declares them in one of two ways:

- checks.py's optional `categories(output) -> dict[str, str | None]`: each field's value in this answer (None:
  the answer has none), e.g. `{"type": "feat"}`; user code, run under the watchdog and its result checked;
- else its Output Format's placeholders with alternatives, `<a | b | c>`: `Release type: <major | minor | patch>`
  is the field `release type`; one alone on its line (`<approve | request-changes>`) is named by the heading
  above it. An answer's value is the first alternative (as a whole word, any case) on the line that names the
  field, or on the next non-empty line.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable

from skill_rl.skills import Skill
from skill_rl.text import brief, show
from skill_rl.watchdog import Timeout, Watchdog

PLACEHOLDER = re.compile(r"<([^<>\n|]+(?:\|[^<>\n|]+)+)>")
# one call of a skill's categories() on one answer
SECONDS = 5.0
# characters of a value kept
MAX_VALUE = 40


def _name(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def declared(skill: Skill) -> list[tuple[str, tuple[str, ...]]]:
    """The Output Format's fields with alternatives: (name, alternatives), in order."""
    text = skill.sections["output format"].text if "output format" in skill.sections else ""
    fields, heading = [], ""
    for line in text.split("\n"):
        if line.lstrip().startswith("#"):
            heading = _name(line.lstrip("# "))
        for m in PLACEHOLDER.finditer(line):
            alternatives = tuple(a.strip() for a in m[1].split("|") if a.strip())
            name = _name(line[: m.start()]) or heading or f"field {len(fields) + 1}"
            fields.append((name, alternatives))
    return fields


def _pick(line: str, alternatives: tuple[str, ...]) -> str | None:
    found = [
        (m.start(), a) for a in alternatives if (m := re.search(rf"(?<![\w-]){re.escape(a)}(?![\w-])", line, re.I))
    ]
    return min(found)[1] if found else None


def _from_format(fields: list[tuple[str, tuple[str, ...]]]) -> Callable[[str], dict[str, str | None]]:
    def read(output: str) -> dict[str, str | None]:
        lines = [ln for ln in output.split("\n") if ln.strip()]
        out = {}
        for name, alternatives in fields:
            at = next((i for i, ln in enumerate(lines) if name in _name(ln)), None)
            value = None
            if at is not None:
                rest = lines[at][re.search(r"[:#]", lines[at]).end() :] if re.search(r"[:#]", lines[at]) else lines[at]
                value = _pick(rest, alternatives) or (
                    _pick(lines[at + 1], alternatives) if at + 1 < len(lines) else None
                )
            out[name] = value
        return out

    return read


def reader(skill: Skill) -> Callable[[str], dict[str, str | None]] | None:
    """The skill's reader of an answer's categorical fields (checks.py's `categories`, else the Output Format's
    placeholders), or None when it declares none."""
    own = getattr(skill.checks, "categories", None) if skill.checks is not None else None
    if callable(own):
        return own
    fields = declared(skill)
    return _from_format(fields) if fields else None


def _valid(made) -> dict[str, str | None]:
    if not isinstance(made, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in made.items()
    ):
        raise ValueError(f"categories() returned {show(made, 60)}, not a dict of str to str or None")
    return {str.__str__(k)[:MAX_VALUE]: None if v is None else str.__str__(v)[:MAX_VALUE] for k, v in made.items()}


def read_all(skill: Skill, outputs: list[str]) -> tuple[list[dict[str, str | None]], str | None]:
    """Each output's fields ({} for one the reader failed on) and the first failure, said once by the caller."""
    read = reader(skill)
    if read is None:
        return [{} for _ in outputs], None
    rows, failure = [], None
    with Watchdog(SECONDS) as dog:
        for out in outputs:
            made, error = dog.call(read, out)
            if error is None:
                made, error = dog.call(_valid, made)
            if error is not None:
                failure = failure or (f"timed out after {SECONDS:g} s" if isinstance(error, Timeout) else brief(error))
                made = {}
            rows.append(made)
    return rows, failure


def distributions(rows: list[dict[str, str | None]]) -> dict[str, Counter]:
    """Per field, how many answers took each value (answers without one left out)."""
    out: dict[str, Counter] = {}
    for row in rows:
        for name, value in row.items():
            counts = out.setdefault(name, Counter())
            if value is not None:
                counts[value] += 1
    return out


def describe(counts: dict[str, Counter]) -> str:
    """'type: feat 20, fix 3, docs 1; verdict: approve 6'."""
    return "; ".join(
        f"{name}: "
        + (", ".join(f"{v} {n}" for v, n in c.most_common(6)) + (" ..." if len(c) > 6 else "") if c else "none")
        for name, c in counts.items()
    )
