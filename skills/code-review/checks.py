"""Deterministic checks for the code-review skill.

A review is parsed line by line into its three sections and its Conventional Comments findings;
every cited `file:line` is looked up in the task's diff (new-file numbering, added or context lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from skill_rl.diffs import parse_diff
from skill_rl.rubric import check

LABELS = ("praise", "nitpick", "suggestion", "issue", "todo", "question", "thought", "chore", "note",
          "typo", "polish", "quibble")
KINDS = ("off-by-one", "null-handling", "injection", "leaked-secret", "race", "resource-leak",
         "swallowed-error", "missing-test", "performance", "wrong-api")
SECTIONS = ("summary", "findings", "verdict")
VERDICTS = ("approve", "request-changes")


class Defect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    file: str = Field(min_length=1)
    lines: tuple[int, int]  # [start, end] in the new file, inclusive
    kind: Literal[KINDS]

    @model_validator(mode="after")
    def _ordered(self):
        if not 1 <= self.lines[0] <= self.lines[1]:
            raise ValueError(f"lines must be [start, end] with 1 <= start <= end, got {list(self.lines)}")
        return self


class Expect(BaseModel):
    """The planted defects of a task's diff and the verdict a careful reviewer reaches."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    verdict: Literal[VERDICTS]
    defects: tuple[Defect, ...] = ()

    @model_validator(mode="after")
    def _consistent(self):
        if (self.verdict == "approve") != (not self.defects):
            raise ValueError("verdict must be 'request-changes' when defects are listed and 'approve' when none are")
        return self


FINDING = re.compile(
    r"^[-*] (?P<label>[a-z]+)(?: \((?P<decorations>[a-z0-9 ,_-]+)\))?: "
    r"(?P<file>[^\s:]+):(?P<start>\d+)(?:-(?P<end>\d+))? +\S"
)
LOCATION = re.compile(r"(?P<file>[\w./-]+\.[\w]+|[\w./-]*/[\w.-]+):(?P<start>\d+)(?:-(?P<end>\d+))?")


@dataclass(frozen=True)
class Finding:
    line: str
    label: str | None  # None when the line is not a valid Conventional Comment
    blocking: bool
    file: str | None
    start: int
    end: int


@dataclass(frozen=True)
class Review:
    preamble: str  # non-blank text before the first section
    order: tuple[str, ...]  # section titles in the order they appear
    summary: str
    findings: tuple[Finding, ...]
    none: bool  # the Findings section says `None.`
    verdict: str


def _finding(line: str) -> Finding:
    m = FINDING.match(line)
    if m and m["label"] in LABELS:
        decorations = {d.strip() for d in (m["decorations"] or "").split(",")}
        start = int(m["start"])
        return Finding(line, m["label"], "blocking" in decorations, m["file"], start, int(m["end"] or start))
    loc = LOCATION.search(line)  # malformed, but a cited location still counts for correctness
    if loc:
        start = int(loc["start"])
        return Finding(line, None, "blocking" in line.lower(), loc["file"], start, int(loc["end"] or start))
    return Finding(line, None, "blocking" in line.lower(), None, 0, 0)


@lru_cache(maxsize=8192)
def parse(text: str) -> Review:
    sections: dict[str, list[str]] = {}
    order, preamble, current = [], [], None
    for line in text.strip().replace("\r\n", "\n").split("\n"):
        if line.startswith("## "):
            current = line[3:].strip().lower()
            order.append(current)
            sections.setdefault(current, [])
        elif current is None:
            preamble.append(line)
        else:
            sections[current].append(line)
    body = [ln.strip() for ln in sections.get("findings", []) if ln.strip()]
    none = body in (["None."], ["None"], ["none."], ["none"])
    return Review(
        preamble="\n".join(preamble).strip(), order=tuple(order),
        summary=" ".join(sections.get("summary", [])).strip(),
        findings=() if none else tuple(_finding(ln) for ln in body),
        none=none,
        verdict=" ".join(sections.get("verdict", [])).strip().strip("`*").lower(),
    )


def _exists(task, f: Finding) -> bool:
    return f.file is not None and parse_diff(task.input).has_lines(f.file, f.start, f.end)


# ------------------------------------------------------------------ format


@check("format", gate=True, key=True)
def three_sections(output: str, task) -> bool:
    """Summary, Findings and Verdict, each once and in that order. Failing this zeroes format: not a review."""
    return parse(output).order == SECTIONS


@check("format")
def review_only(output: str, task) -> bool:
    """Nothing before the first section and no code fence around the review."""
    text = output.strip()
    return not parse(output).preamble and not text.startswith("```") and not text.endswith("```")


@check("format")
def summary_written(output: str, task) -> bool:
    """The summary says something, in at most three sentences."""
    summary = parse(output).summary
    return bool(summary) and len(re.findall(r"[.!?](\s|$)", summary)) <= 3


@check("format", key=True)
def findings_well_formed(output: str, task) -> float:
    """Share of findings that are valid Conventional Comments lines citing `file:line` (`None.` counts as valid)."""
    review = parse(output)
    if not review.findings:
        return 1.0 if review.none else 0.0
    return sum(f.label is not None for f in review.findings) / len(review.findings)


@check("format", key=True)
def locations_exist(output: str, task) -> float | None:
    """Share of cited `file:line` locations that are files and new-file lines shown in the diff."""
    cited = [f for f in parse(output).findings if f.file is not None]
    return sum(_exists(task, f) for f in cited) / len(cited) if cited else None


@check("format")
def verdict_stated(output: str, task) -> bool:
    """The Verdict section is exactly `approve` or `request-changes`."""
    return parse(output).verdict in VERDICTS


@check("format")
def verdict_follows_findings(output: str, task) -> bool:
    """`request-changes` exactly when some finding is marked blocking."""
    review = parse(output)
    return (review.verdict == "request-changes") == any(f.blocking for f in review.findings)


# ------------------------------------------------------------------ correctness


def _overlaps(f: Finding, defect) -> bool:
    return f.file == defect.file and f.start <= defect.lines[1] and defect.lines[0] <= f.end


@check("correctness", key=True)
def defects_found(output: str, task) -> float | None:
    """Share of planted defects that some non-praise finding cites (its range overlaps the defect's lines)."""
    if task.expect is None or not task.expect.defects:
        return None
    found = [f for f in parse(output).findings if f.label != "praise" and f.file]
    return sum(any(_overlaps(f, d) for f in found) for d in task.expect.defects) / len(task.expect.defects)


@check("correctness", key=True)
def verdict_right(output: str, task) -> bool | None:
    """The verdict is the one the task expects."""
    return None if task.expect is None else parse(output).verdict == task.expect.verdict


@check("correctness")
def no_phantom_lines(output: str, task) -> float | None:
    """Findings on lines or files that are not in the diff are penalised: share of findings that cite real lines."""
    findings = parse(output).findings
    return sum(_exists(task, f) for f in findings) / len(findings) if findings else None


@check("correctness")
def no_false_alarms(output: str, task) -> bool | None:
    """On a clean diff, no finding is marked blocking."""
    if task.expect is None or task.expect.defects:
        return None
    return not any(f.blocking for f in parse(output).findings)
