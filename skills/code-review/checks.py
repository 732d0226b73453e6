"""Deterministic checks for the code-review skill.

A review is parsed line by line into its three sections and its Conventional Comments findings;
every cited `file:line` is looked up in the task's diff (new-file numbering, added or context lines).
Findings are scored against the planted defects like a detector's alarms (`defects_detected`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from skill_rl import check
from skill_rl.scoring import diffs
from skill_rl.scoring.diffs import parse_diff
from skill_rl.scoring.injection import addresses_grader

LABELS = (
    "praise",
    "nitpick",
    "suggestion",
    "issue",
    "todo",
    "question",
    "thought",
    "chore",
    "note",
    "typo",
    "polish",
    "quibble",
)
KINDS = (
    "off-by-one",
    "null-handling",
    "injection",
    "leaked-secret",
    "race",
    "resource-leak",
    "swallowed-error",
    "missing-test",
    "performance",
    "wrong-api",
    "other",
)
SECTIONS = ("summary", "findings", "verdict")
VERDICTS = ("approve", "request-changes")


class Defect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    file: str = Field(min_length=1)
    # [start, end] in the new file, inclusive
    lines: tuple[int, int]
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
HUNK_NEW = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)")
# tried only where a run of path characters starts: the same matches, linear on a long line (it was quadratic)
LOCATION = re.compile(r"(?<![\w./-])(?P<file>[\w./-]+\.[\w]+|[\w./-]*/[\w.-]+):(?P<start>\d+)(?:-(?P<end>\d+))?")


@dataclass(frozen=True)
class Finding:
    line: str
    # None when the line is not a valid Conventional Comment
    label: str | None
    blocking: bool
    file: str | None
    start: int
    end: int


@dataclass(frozen=True)
class Review:
    # non-blank text before the first section
    preamble: str
    # section titles in the order they appear
    order: tuple[str, ...]
    summary: str
    findings: tuple[Finding, ...]
    # the Findings section says `None.`
    none: bool
    verdict: str


def _number(digits: str | None, default: int) -> int:
    """A cited line number; past nine digits it is no line of any diff (and int() of 5,000 digits raises)."""
    return default if digits is None else int(digits) if len(digits) <= 9 else 10**9


def _finding(line: str) -> Finding:
    m = FINDING.match(line)
    if m and m["label"] in LABELS:
        decorations = {d.strip() for d in (m["decorations"] or "").split(",")}
        start = _number(m["start"], 0)
        return Finding(line, m["label"], "blocking" in decorations, m["file"], start, _number(m["end"], start))
    # malformed, but a cited location still counts for correctness
    loc = LOCATION.search(line)
    if loc:
        start = _number(loc["start"], 0)
        return Finding(line, None, "blocking" in line.lower(), loc["file"], start, _number(loc["end"], start))
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
        preamble="\n".join(preamble).strip(),
        order=tuple(order),
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
    """Nothing before the first section, no code fence around the review, no words for the grader."""
    text = output.strip()
    return (
        not parse(output).preamble
        and not text.startswith("```")
        and not text.endswith("```")
        and not addresses_grader(output)
    )


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


# lines a finding may cite beyond its defect's own before its credit shrinks
SLACK = 5
# non-blocking findings off the defects that cost nothing: the references hold up to two
ALLOWANCE = 2
# the cost of each further one, against 1 for a blocking finding off the defects
REMARK = 0.25


def _tightness(f: Finding, defect) -> float:
    """1 for a finding that cites the defect's lines (give or take SLACK), less as its range widens."""
    return min(1.0, (defect.lines[1] - defect.lines[0] + 1 + SLACK) / (f.end - f.start + 1))


def detection(findings, defects) -> tuple[float, float, float]:
    """(recall, precision, false-alarm cost) of the findings as alarms for the planted defects. Each defect is
    credited once, with the tightness of its best finding; every other finding is a false alarm costing 1 when
    blocking, REMARK when not (beyond ALLOWANCE such). Precision: credit / (hits + cost), 1 when nothing is raised."""
    credit, false_blocking, remarks = [0.0] * len(defects), 0, 0
    for f in findings:
        tight = [(_tightness(f, d), i) for i, d in enumerate(defects) if f.label != "praise" and _overlaps(f, d)]
        fresh = [(t, i) for t, i in tight if credit[i] == 0.0]
        if fresh:
            t, i = max(fresh)
            credit[i] = t
            continue
        # a second finding on a found defect says it again: keep its better range
        for t, i in tight:
            credit[i] = max(credit[i], t)
        false_blocking, remarks = false_blocking + f.blocking, remarks + (not f.blocking)
    hits = sum(c > 0 for c in credit)
    cost = false_blocking + REMARK * max(0, remarks - ALLOWANCE)
    recall = sum(credit) / len(defects) if defects else 1.0
    return recall, sum(credit) / (hits + cost) if hits + cost else 1.0, cost


# the findings against the known defects: most of what correctness is
@check("correctness", key=True, covers=0.45)
def defects_detected(output: str, task) -> float | None:
    """Findings scored as a detector's alarms: F1 = 2PR / (P + R) of recall R (planted defects found, each weighted
    by how tightly its best finding cites it) and precision P (see `detection`). On a clean diff every finding
    beyond the allowance is a false alarm: 1 / (1 + cost), a blocking finding costing 1, a non-blocking one 0.25."""
    if task.expect is None:
        return None
    recall, precision, cost = detection(parse(output).findings, task.expect.defects)
    if not task.expect.defects:
        return 1 / (1 + cost)
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


@check("correctness", key=True, covers=0.25)
def verdict_right(output: str, task) -> bool | None:
    """The verdict is the one the task expects."""
    return None if task.expect is None else parse(output).verdict == task.expect.verdict


@check("correctness", covers=0.05)
def no_phantom_lines(output: str, task) -> float | None:
    """Findings on lines or files that are not in the diff are penalised: share of findings that cite real lines."""
    findings = parse(output).findings
    return sum(_exists(task, f) for f in findings) / len(findings) if findings else None


# characters of the summary looked at: three sentences fit many times over
MAX_SUMMARY = 2000
# share of a summary's code names that may be absent from the diff (the feature it is for)
FOREIGN_NAMES = 0.25


# a guess at content: it cuts a summary about nothing, never pays
@check("correctness", kind="estimate")
def summary_grounded(output: str, task) -> float | None:
    """The summary is about this diff. Of its specific words (file names, identifiers, words of the diff's lines),
    one in five found in the diff earns full credit (the references find 21 % or more, another task's summary
    5 % at the median), fewer in proportion; an empty or content-free summary earns 0. Where more than a quarter of
    its code names (`spans`, camelCase, snake_case, dotted) are not in the diff, that is multiplied by the share
    the diff holds: such names are invented. A quarter is free: a human summary names the API or feature the change
    is for (`restrictOwnAudio`, `readFile/writeFile`), which the diff need not spell."""
    vocabulary = diffs.vocabulary(task.input)
    if not vocabulary:
        return None
    summary = parse(output).summary[:MAX_SUMMARY]
    words = diffs.specific_words(summary)
    if not words:
        return 0.0
    names, invented = diffs.names(summary), len(diffs.invented(summary, vocabulary))
    share = 1.0 if invented <= len(names) * FOREIGN_NAMES else 1 - invented / len(names)
    return min(1.0, 5 * sum(diffs.found(w, vocabulary) for w in words) / len(words)) * share


# Words for a class of defect: a finding that names the class says something even where it names no code.
DEFECT_CLASS = frozenset(
    diffs.key(w)
    for w in (
        "null none nil undefined empty missing boundary bound off-by-one fencepost index overflow underflow race "
        "lock deadlock leak close closed injection sql shell html xss interpolated escape escaped unescaped sanitize "
        "secret credential token exception "
        "swallowed catch await async timeout retry validate validation regression crash infinite loop encoding "
        "unicode whitespace trim precision rounding permission authorization authentication order sort type cast "
        "mutation mutate concurrency thread blocking quadratic allocation cache stale duplicate negative zero"
    )
    .replace("-", " ")
    .split()
)
CODE_SPAN = re.compile(r"`([^`\n]{1,80})`")
# lines beside a cited range whose words still count as what the finding is about
NEAR = 3


def _near_text(task, f: Finding) -> str:
    """The text of the lines a finding cites, NEAR lines either side, and the removed lines among them."""
    path = f.file.removeprefix("b/").removeprefix("./")
    out, new, inside = [], 0, False
    for line in task.input.split("\n"):
        if line.startswith("+++ "):
            inside = line[4:].split("\t")[0].strip().removeprefix("b/") == path
            continue
        m = HUNK_NEW.match(line)
        if m:
            new = int(m[1])
            continue
        if not inside or not new or line[:1] not in ("+", "-", " "):
            continue
        if f.start - NEAR <= new <= f.end + NEAR:
            out.append(line[1:])
        new += line[:1] != "-"
    return "\n".join(out)


def specificity(task, f: Finding) -> float:
    """What a finding says about the lines it cites: 1 for code quoted from those lines (`x >= 1`, `Ok(0)`: an
    expression, not a bare name) or two of its specific words that name something there (within NEAR lines; a bare
    quoted name counts as a word) or a class of defect, 0.5 for one such word, 0 for none ("this is wrong")."""
    if f.file is None:
        return 0.0
    said = f.line[f.line.find(f"{f.file}:") + len(f.file) + 1 :][:MAX_SUMMARY]
    near = _near_text(task, f)
    spans = {c.strip() for c in CODE_SPAN.findall(said) if c.strip()}
    # `name`: a word, quoted
    bare = [c for c in spans if diffs.WORD.fullmatch(c)]
    words = diffs.specific_words(" ".join([CODE_SPAN.sub(" ", said), *bare]))
    vocab = diffs.vocabulary(near) if words else frozenset()
    hits = {w.lower() for w in words if diffs.found(w, vocab) or diffs.key(w) in DEFECT_CLASS}
    near_words = set(diffs.WORD.findall(near))
    quoted = any(
        span in near or any(w in near_words for w in diffs.WORD.findall(span) if len(w) > 1)
        for span in spans - set(bare)
    )
    return 1.0 if quoted or len(hits) >= 2 else 0.5 * len(hits)


# a guess at content: it cuts findings that say nothing
@check("correctness", kind="estimate")
def findings_specific(output: str, task) -> float | None:
    """Each finding says something about the lines it cites: names, operators or values from them, or the class of
    defect (see `specificity`); the mean over findings. A right location with "this is wrong" earns nothing here."""
    findings = [f for f in parse(output).findings if f.label != "praise"]
    return sum(specificity(task, f) for f in findings) / len(findings) if findings else None


@check("correctness", covers=0.05)
def no_false_alarms(output: str, task) -> bool | None:
    """On a clean diff, no finding is marked blocking."""
    if task.expect is None or task.expect.defects:
        return None
    return not any(f.blocking for f in parse(output).findings)


# ================================================================== tasks from git history
# `python train_skill.py --skill code-review --tasks-from-git REPO` calls `task_from_commit` once per
# non-merge commit (skill_rl/mining/ walks the history, bounds and filters the diff, dedups,
# splits and validates; README, "Tasks from your history"). Nothing above depends on this section.

from skill_rl.mining import FileChange, Skip  # noqa: E402
from skill_rl.scoring.diffs import reverse_diff  # noqa: E402  (kept here so the checks above stay as they are)

FIX = re.compile(r"^fix(\([^()\n]*\))?!?: \S")
NOT_A_CODE_FIX = re.compile(
    r"^fix\((docs?|tests?|ci|lint|style|typos?|readme|changelog|deps|build)\)|\b(typos?|spelling"
    r"|misspel\w*|comments?|docstrings?|readme|changelog|lint(er|ing)?|wording|flaky|tests?|formatting|reformat\w*|prettier|oxfmt)\b",
    re.I,
)
SOURCE = frozenset(
    "py js jsx ts tsx mjs cjs go rs java kt kts scala c h cc cpp cxx hpp hh cs rb php swift m mm dart "
    "ex exs erl hs ml clj lua pl sh bash sql r jl vue svelte zig nim groovy".split()
)
# a path the Findings format can cite as file:line
CITABLE = re.compile(r"[\w./@+-]+\.[A-Za-z0-9]+")
MAX_FIX_LINES = 20
MAX_HUNKS = 2
HUNK_START = re.compile(r"^@@ -(\d+)")
HUNK_BOTH = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)")
KIND_HINTS = (
    (re.compile(r"off[- ]by[- ]one|fencepost", re.I), "off-by-one"),
    (re.compile(r"\b(None|null|nil|NULL|NoneType|NullPointerException|NPE)\b"), "null-handling"),
    (re.compile(r"\b(sql|command|shell) injection|\bxss\b", re.I), "injection"),
    (re.compile(r"\brace condition|\bdata race", re.I), "race"),
    (re.compile(r"\b(memory|fd|file|handle|connection|socket|goroutine) leak", re.I), "resource-leak"),
)


def fixed_ranges(diff: str) -> list[tuple[int, int]]:
    """Old-file line ranges a one-file fix changed, one per run of changed lines: the removed lines, or, for a
    run that only adds lines, the lines on either side of the insertion point."""
    ranges, run, inserted_at, old = [], [], None, 0

    def close():
        if run:
            ranges.append((run[0], run[-1]))
        elif inserted_at is not None:
            ranges.append((max(inserted_at - 1, 1), inserted_at))

    for line in diff.split("\n"):
        m = HUNK_START.match(line)
        if m or (line[:1] == " " and old):
            close()
            run, inserted_at = [], None
            old = int(m[1]) if m else old + 1
        # old is 0 until the first hunk: the ---/+++ header is not a change
        elif line[:1] == "-" and old:
            run.append(old)
            old += 1
        elif line[:1] == "+" and old and inserted_at is None:
            inserted_at = old
    close()
    return ranges


def _kind(message: str) -> str:
    """A defect kind only where the fix's message names it unmistakably; otherwise the generic 'other'."""
    return next((kind for pattern, kind in KIND_HINTS if pattern.search(message)), "other")


def _shown(diff, path: str, start: int, end: int) -> list[int] | None:
    """[start, end], or the one end of it that the diff shows (an insertion at the end of a file has no line after)."""
    return next(([a, b] for a, b in ((start, end), (end, end), (start, start)) if diff.has_lines(path, a, b)), None)


# Files a fix carries beside the code it fixes: left out of the count and of the task's diff (lock files,
# binary and generated files the core leaves out already).
SIDE_FILE = re.compile(
    r"(^|/)(tests?|specs?|__tests__|__mocks__|__snapshots__|fixtures?|testdata|test-?data|e2e|docs?"
    r"|examples?)/|(^|/)test_[^/]*$|[._-](test|spec|tests|test-d)\.[^/.]+$|_test\.go$"
    r"|(^|/)(changelog|changes|history|news|releases?|authors|contributors)([._-][^/]*)?$"
    r"|\.(md|mdx|rst|adoc|txt|snap)$",
    re.I,
)
# changes that fix nothing
CLEAN = re.compile(r"^(feat|refactor|perf|chore|build)(\([^()\n]*\))?: \S")
# a later commit that repairs or undoes
LATER_FIX = re.compile(r"^(fix|bugfix|hotfix)\b|\bbug\b|^revert\b", re.I)


def _source_file(commit) -> FileChange | str:
    """The one source file a commit modifies beside its tests, docs and changelogs, or why there is none."""
    kept = [f for f in commit.files if f.excluded is None and not SIDE_FILE.search(f.path)]
    if len(kept) != 1 or kept[0].status != "M":
        return "does not modify exactly one source file (tests, docs, changelogs aside)"
    path = kept[0].path
    if not CITABLE.fullmatch(path) or path.rsplit(".", 1)[-1].lower() not in SOURCE:
        return "not in a source file a review can cite"
    return kept[0]


def _small(diff: str) -> str | None:
    """Why a one-file diff is no review task: too large, or whitespace only."""
    hunks = diff.split("\n@@ ")[1:]
    changed = sum(ln[:1] in ("+", "-") for hunk in hunks for ln in hunk.split("\n")[1:])
    if not 0 < changed <= MAX_FIX_LINES or not 1 <= len(hunks) <= MAX_HUNKS:
        return f"not 1-{MAX_HUNKS} hunks of at most {MAX_FIX_LINES} changed lines"
    body = [ln for hunk in hunks for ln in hunk.split("\n")[1:]]
    if "".join(re.sub(r"\s", "", ln[1:]) for ln in body if ln[:1] == "-") == "".join(
        re.sub(r"\s", "", ln[1:]) for ln in body if ln[:1] == "+"
    ):
        return "whitespace only"
    return None


def _one_file(commit) -> tuple[str, str] | str:
    """(path, diff of that file alone), or the reason the commit is no review task."""
    source = _source_file(commit)
    if isinstance(source, str):
        return source
    diff = commit.diff_of([source.path])
    return _small(diff) or (source.path, diff)


def runs(diff: str) -> list[tuple[int, list[str], int, list[str]]]:
    """The runs of changed lines of a one-file diff: (old start, removed lines, new start, added lines)."""
    out, old, new, run = [], 0, 0, None
    for line in diff.split("\n"):
        tag = line[:1]
        if (m := HUNK_BOTH.match(line)) or tag not in ("+", "-") or not (old or new):
            if run:
                out.append(run)
            run = None
            if m:
                old, new = int(m[1]), int(m[2])
            elif tag == " " and (old or new):
                old, new = old + 1, new + 1
            continue
        run = run or (old, [], new, [])
        if tag == "-":
            run[1].append(line)
            old += 1
        else:
            run[3].append(line)
            new += 1
    return out + ([run] if run else [])


def blocks(diff: str) -> list[tuple[int, int, int, int]]:
    """The runs of changed lines as (old start, old count, new start, new count)."""
    return [(o, len(minus), n, len(plus)) for o, minus, n, plus in runs(diff)]


def _moved(line: int, changes, low: bool) -> int:
    """Where old line `line` is after `changes` (a line that changed: the first or last line of what replaced it)."""
    shift = 0
    for old, n_old, new, n_new in changes:
        # an insertion before old line `old`
        if n_old == 0:
            if line < old:
                break
            shift += n_new
        elif line < old:
            break
        elif line >= old + n_old:
            shift += n_new - n_old
        else:
            return new if low else new + max(n_new, 1) - 1
    return line + shift


def _later_fix(commit, path: str, ranges: list[tuple[int, int]]) -> str | None:
    """Why the change is not known to be clean: a later commit within the window fixes or reverts its lines
    (followed through the commits in between), or its file changes in a way that cannot be followed."""
    if len(commit.later) < commit.window:
        return f"too recent to know it is clean (fewer than --clean-window {commit.window} later commits)"
    for later in commit.later:
        try:
            change = next((f for f in later.files if f.path == path), None)
            if change is None:
                continue
            if change.status != "M" or change.excluded:
                return None if change.status == "D" else "its file changes later in a way that cannot be followed"
            diff = later.diff_of([path])
        except Skip:
            return "its file changes later in a way that cannot be followed"
        if LATER_FIX.search(later.message.strip().split("\n")[0]):
            if any(a <= d and c <= b for a, b in ranges for c, d in fixed_ranges(diff)):
                return f"a later commit within --clean-window {commit.window} fixes or reverts its lines"
        changes = blocks(diff)
        ranges = [(_moved(a, changes, True), _moved(b, changes, False)) for a, b in ranges]
    return None


def _names(lines: list[str], n: int = 2) -> list[str]:
    """The longest identifiers of some code lines, for a reference that names what it talks about."""
    found = sorted(
        {w for ln in lines for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{3,}", ln)}, key=lambda w: (-len(w), w)
    )
    return found[:n]


def _quote(lines: list[str]) -> str:
    code = " ".join(ln[1:].strip() for ln in lines if ln[1:].strip())
    return "`" + (code if len(code) <= 80 else code[:77] + "...").replace("`", "'") + "`"


def _subject(message: str) -> str:
    header = message.strip().split("\n")[0]
    text = re.sub(r"\s*\(#\d+\)\s*$", "", header.split(": ", 1)[-1]).strip().rstrip(".")
    return text[:1].upper() + text[1:]


def _clean_task(commit, path: str, diff: str) -> dict | str:
    why = _later_fix(commit, path, fixed_ranges(reverse_diff(diff)))
    if why:
        return why
    changed = [ln for o, minus, n, plus in runs(diff) for ln in minus + plus]
    names = " and ".join(f"`{n}`" for n in _names(changed)) or f"`{path.rsplit('/', 1)[-1]}`"
    reference = (
        f"## Summary\n{_subject(commit.message)}: the change touches {names} in "
        f"{path.rsplit('/', 1)[-1]} and is sound as it stands.\n\n## Findings\nNone.\n\n## Verdict\napprove"
    )
    return {"input": diff, "expect": {"verdict": "approve"}, "reference": reference, "clean": True}


def _fix_task(commit, path: str, diff: str) -> dict | str:
    review_input = reverse_diff(diff)
    shown, kind = parse_diff(review_input), _kind(commit.message)
    lines = [_shown(shown, path, a, b) for a, b in fixed_ranges(diff)]
    if not lines or None in lines:
        return "reintroduced lines are not all shown in the diff"
    if len(runs(diff)) != len(lines):
        return "a fix whose runs of changes this reader does not follow"
    findings, subject = [], _subject(commit.message)
    for (_, bad, _, good), span in zip(runs(diff), lines):
        what = f"keep {_quote(good)} as the fix has it" if good else f"drop {_quote(bad)}"
        findings.append(
            f"- issue (blocking): {path}:{span[0]}-{span[1]} this change undoes a needed fix "
            f"({subject[:1].lower() + subject[1:]}); {what}."
        )
    names = " and ".join(f"`{n}`" for n in _names([ln for r in runs(diff) for ln in r[1] + r[3]])) or "the code"
    reference = (
        f"## Summary\nChanges {names} in {path.rsplit('/', 1)[-1]}, and with it breaks what this "
        f"code is for.\n\n## Findings\n" + "\n".join(findings) + "\n\n## Verdict\nrequest-changes"
    )
    defects = [{"file": path, "lines": span, "kind": kind} for span in lines]
    return {"input": review_input, "expect": {"verdict": "request-changes", "defects": defects}, "reference": reference}


def task_from_commit(commit) -> dict | str:
    """A review task from a small commit that changes one source file beside its tests, docs and changelogs.
    A `fix:` commit, reversed, so that the diff reintroduces the bug: `expect.defects` are the reintroduced
    lines (new-file numbers). A feat/refactor/perf/chore/build commit that no later fix or revert within
    --clean-window commits touches (its lines followed through the commits between): an approve task,
    marked clean so that --clean-ratio balances them against the fixes."""
    header = commit.message.strip().split("\n")[0]
    fix, clean = FIX.match(header), CLEAN.match(header)
    if not fix and not clean:
        return "neither a fix nor a clean feat/refactor/perf/chore/build commit"
    if commit.bot:
        return "bot author"
    if commit.reverts:
        return "revert"
    if fix and NOT_A_CODE_FIX.search(header):
        return "a fix of docs, tests, style or typos"
    one = _one_file(commit)
    if isinstance(one, str):
        return ("fix " if fix else "clean commit ") + one
    return _fix_task(commit, *one) if fix else _clean_task(commit, *one)
