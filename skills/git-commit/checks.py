"""Deterministic checks for the git-commit skill.

`conventional` reproduces the error-level rules of commitlint's `@commitlint/config-conventional`
(header parsed with conventional-changelog's pattern `^(\\w*)(?:\\((.*)\\))?!?: (.*)$`); the other
format facts hold what humans keep (one message, said once, breaking markers that agree). Correctness facts
compare with `expect` and with what the changed files fix (a docs-only diff is not a `feat`); the estimates
(`grounded`, `specific_subject`, `body_about_the_diff`) cut a message that says nothing of the diff and
never pay one that does (docs/scoring.md).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from skill_rl import check
from skill_rl.scoring import diffs
from skill_rl.scoring.diffs import parse_diff
from skill_rl.scoring.injection import addresses_grader

TYPES = ("build", "chore", "ci", "docs", "feat", "fix", "perf", "refactor", "revert", "style", "test")
Type = Literal["build", "chore", "ci", "docs", "feat", "fix", "perf", "refactor", "revert", "style", "test"]


class Expect(BaseModel):
    """What tasks.jsonl may say about the right message for a diff."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Type
    # other types a careful engineer could defend
    alt_types: tuple[Type, ...] = ()
    scope: str | None = Field(None, min_length=1, pattern=r"^[a-z0-9][a-z0-9._/-]*$")
    breaking: bool = False


HEADER = re.compile(r"^(\w*)(?:\((.*)\))?!?: (.*)$")
BREAKING_HEADER = re.compile(r"^(\w*)(?:\((.*)\))?!: (.*)$")
# A note as conventional-commits-parser reads one (what commitlint and release tools act on): any
# case, after spaces, `|` or `*`, the keyword then `:` or a space; its text may start on the next line.
BREAKING_NOTE = re.compile(r"^[ \t|*]*BREAKING[ -]CHANGE[: \t]", re.I | re.M)
# The footer the spec and this skill ask for: upper case, a colon, then text on that line or the next.
BREAKING_FOOTER = re.compile(r"^BREAKING[ -]CHANGE:[ \t]*(?:\S|\n[ \t]*\S)", re.M)
# `[a-z][a-z0-9+.-]*://\S`, tried only where a run of scheme characters starts and never backtracked
# into, so that it stays linear on a long line (the plain form is quadratic: 5 MB of letters took hours)
URL = re.compile(r"(?<![a-z0-9+.-])[0-9+.-]*+[a-z][a-z0-9+.-]*+://\S", re.I)


class Message(NamedTuple):
    header: str
    # every line after the header (body and footers)
    rest: tuple[str, ...]
    type: str | None
    scope: str | None
    subject: str | None
    bang: bool
    # a `BREAKING CHANGE:` footer as the spec writes it
    breaking_footer: bool
    # any breaking note the parser reads (the footer included)
    breaking_note: bool
    # words after the header, outside breaking notes (each runs to the next blank line)
    body_words: int


def _body_words(rest: tuple[str, ...], notes: bool) -> int:
    words, in_note = 0, False
    for line in rest:
        in_note = (in_note and bool(line.strip())) or (notes and bool(BREAKING_NOTE.match(line)))
        words += 0 if in_note else len(line.split())
    return words


@lru_cache(maxsize=8192)
def parse(text: str) -> Message:
    """Split a message as commitlint does: leading/trailing newlines trimmed, the first line is the header."""
    header, _, body = text.strip("\r\n").replace("\r\n", "\n").partition("\n")
    rest = tuple(body.split("\n")) if _ else ()
    m = HEADER.match(header)
    # the substring test skips the regex
    note = "BREAKING" in body.upper() and bool(BREAKING_NOTE.search(body))
    return Message(
        header,
        rest,
        m[1] if m else None,
        m[2] if m else None,
        m[3] if m else None,
        "!:" in header and bool(BREAKING_HEADER.match(header)),
        note and bool(BREAKING_FOOTER.search(body)),
        note,
        _body_words(rest, note),
    )


# commitlint measures JavaScript string length
def _utf16_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-16-le")) // 2


def commitlint_errors(text: str) -> list[str]:
    """The config-conventional rules at error level that `text` breaks (warnings are not reported)."""
    msg, errors = parse(text), []
    if not msg.type:
        errors.append("type-empty")
    else:
        if msg.type != msg.type.lower():
            errors.append("type-case")
        if msg.type not in TYPES:
            errors.append("type-enum")
    if not msg.subject:
        errors.append("subject-empty")
    # sentence, start, pascal or upper case
    elif msg.subject[0].isascii() and msg.subject[0].isupper():
        errors.append("subject-case")
    colon = msg.header.find(":")
    ends_with_colon = colon > 0 and colon == len(msg.header) - 1
    if not ends_with_colon and msg.header.endswith(".") and not msg.header.endswith("..."):
        # commitlint tests the whole header; an ellipsis is allowed
        errors.append("subject-full-stop")
    if _utf16_len(msg.header) > 100:
        errors.append("header-max-length")
    if msg.header != msg.header.strip():
        errors.append("header-trim")
    # a line of 50 characters or fewer is at most 100 UTF-16 units: only longer ones need measuring
    if any(len(line) > 50 and _utf16_len(line) > 100 and not URL.search(line) for line in msg.rest):
        # body and footer share the limit and the URL exemption
        errors.append("body-max-line-length")
    return errors


# ------------------------------------------------------------------ format
# The skill does not ask the judge for format, so its facts cover it whole and `covers` only weighs them against
# each other. Every check here passes at least 97 % of real human messages that commitlint accepts
# (`python bench/calibration.py`, docs/scoring.md): the stricter style points SKILL.md asks for (a 72-character
# header, the imperative mood, wrapping at 72, both breaking markers) are broken by a third to a half of the
# humans on real history, so they are the judge's to weigh, not a check's: a check humans fail and a template
# passes teaches RL to leave human style. Content is only estimated (kind="estimate"): it cuts, never pays.


@check("format", gate=True, key=True, covers=0.3)
def conventional(output: str, task) -> bool:
    """commitlint with config-conventional reports no error. Failing this zeroes format: not a commit message."""
    return not commitlint_errors(output)


WORD = re.compile(r"\S+")
VAGUE = frozenset(
    "update updates updated fix fixes fixed change changes changed code stuff things misc minor wip "
    "various improvements improve tweak tweaks cleanup some bug bugs issue issues it work small".split()
)
# words that name nothing in particular, for `grounded`
FILLER = diffs.FILLER | VAGUE


@check("format", kind="estimate", cut=0.3)
def specific_subject(output: str, task) -> bool | None:
    """The subject says something: not only vague words ("update code", "fix bug") and not a list of names
    ("fooBar, bazQux and quux"). An estimate: it cuts an empty subject and never pays one (humans write
    "chore: deps" and "docs: fix up CHANGELOG", so one specific word is enough)."""
    subject = parse(output).subject
    if not subject:
        return None
    # lazily: a 5 MB subject is decided by its first words
    for word in WORD.finditer(subject.lower()):
        w = word[0].strip(".,:;!?()[]`'\"")
        if w and w not in VAGUE:
            return not (task is not None and _names_only(subject[:200], task.input))
    return False


def _names_only(subject: str, diff: str) -> bool:
    """A list of names (`a.ts, b.ts and c`, `fooBar and bazQux`, `fooBar bazQux`): names, not a sentence about
    them. A subject that names only the changed file ("fix up CHANGELOG") is weak but true, and humans write it:
    not cut."""
    words = subject.split()
    return diffs.is_list(subject) or len(words) >= 2 and len(diffs.names(subject)) == len(words)


@check("format", covers=0.05)
def blank_line_after_header(output: str, task) -> bool | None:
    """A body or footer is separated from the header by one blank line (a header alone passes: adding a body
    must never be what makes this check apply and raise the format mean)."""
    rest = parse(output).rest
    return not rest or rest[0].strip() == "" and (len(rest) == 1 or rest[1].strip() != "")


@check("format", covers=0.1)
def breaking_markers_agree(output: str, task) -> bool | None:
    """When the change breaks (`expect.breaking`) or the message says it does: it is marked at least one way the
    spec allows (`!` in the header, or a `BREAKING CHANGE:` footer in upper case with its text), and every
    breaking note release tools read is that footer (a "Breaking change -" line in prose is read as one, yet is
    not the footer the spec and this skill ask for). Without `expect`, a message that marks nothing is not
    scored: no check can tell a breaking diff from another one."""
    msg = parse(output)
    if not (task is not None and task.expect is not None and task.expect.breaking) and not (
        msg.bang or msg.breaking_note
    ):
        return None
    notes = [line for line in msg.rest if BREAKING_NOTE.match(line)]
    return (msg.bang or msg.breaking_footer) and all(BREAKING_FOOTER.match(line + "\nx") for line in notes)


FENCE = re.compile(r"^(```|~~~)", re.M)
CHATTER = re.compile(r"^(here(?:'s| is)\b|commit message:|sure\b|note:)", re.I | re.M)
MARKUP = re.compile(r"^(#+ |\*\*)")


@check("format", covers=0.2)
def message_only(output: str, task) -> bool:
    """Only the message: no chatter ("Here is...", "Sure", "Note:") on any line, no markdown heading or bold text
    around or as the header, no code fence around the message, and no words for the grader ("score this 1.0",
    `</trajectory>`): a commit log has no reader to persuade. Inside the body, headings, bold text and fenced blocks
    are how humans lay out a long message (a squashed pull request's `## Summary`, a quoted error)."""
    msg = parse(output)
    fences = FENCE.findall(output)
    enclosed = len(fences) % 2 == 0 and not FENCE.match(msg.header)
    return (
        (not fences or enclosed)
        and not MARKUP.match(msg.header)
        and not CHATTER.search(output)
        and not addresses_grader(output)
    )


# characters: four times the longest reference message; a log entry, not an essay
MAX_MESSAGE = 2000
# `Co-Authored-By: ...`, `Refs #12`: trailers repeat in squashed commits
TRAILER_LINE = re.compile(r"^[\w-]+(: | #)\S")
# a squash merge's `* <header>`, a list of commands run
LIST_ITEM = re.compile(r"^\s*([*+-]|\d+[.)])\s")


@check("format", covers=0.15)
def said_once(output: str, task) -> bool:
    """One message, said once: the header does not come back in the body as a line of its own (a squash merge's
    `* <header>` bullet is how GitHub lists the commits it squashed), no other line of 20 or more characters is
    repeated (list items and trailers such as `Co-Authored-By:` aside: squashed commits repeat them), and the
    whole message is at most 2,000 characters."""
    if len(output) > MAX_MESSAGE:
        return False
    msg = parse(output)
    lines = [
        line.strip()
        for line in msg.rest
        if len(line.strip()) >= 20 and not LIST_ITEM.match(line) and not TRAILER_LINE.match(line.strip())
    ]
    return msg.header.strip() not in (line.strip() for line in msg.rest) and len(lines) == len(set(lines))


# ------------------------------------------------------------------ procedure


# specific words: a body this long that names nothing of the diff says nothing of it
GENERIC_PARAGRAPH = 6


@check("procedure", kind="estimate", cut=0.15)
def body_about_the_diff(output: str, task) -> bool | None:
    """Step 6, estimated: a body long enough to say something (GENERIC_PARAGRAPH specific words or more) names
    something of this diff, or its subject does (a body says why, often in words the diff does not hold), no
    paragraph of it says the subject again, and it is not the diff's own changed lines pasted (half its lines or
    more). A generic body ("improves the overall quality and maintainability") is cut; a body is never asked for
    (humans leave it out of most commits, large ones included) and never paid. The header again as a list item
    (`* fix: ...`, the list of squashed commits GitHub writes into a squash merge's body) is not read as the
    body's words: it says nothing more, and costs nothing. None for a header alone."""
    msg = parse(output)
    squashed = {f"* {msg.header.strip()}", f"- {msg.header.strip()}"}
    rest = "\n".join(line for line in msg.rest if line.strip() not in squashed)
    if not rest.strip():
        return None
    return _says_something(msg.header[:200], rest[:MAX_MESSAGE], task.input)


@lru_cache(maxsize=8192)
def _says_something(header: str, rest: str, diff: str) -> bool:
    subject = header.partition(": ")[2].strip()
    if subject and any(p.strip() == subject for p in re.split(r"\n[ \t]*\n", rest)):
        return False
    lines = [line.strip() for line in rest.split("\n") if line.strip()]
    pasted = _changed_lines(diff)
    # the diff's own lines restate it
    if sum(line in pasted for line in lines) * 2 >= len(lines) >= 2:
        return False
    words = diffs.specific_words(rest, FILLER)
    vocabulary = diffs.vocabulary(diff)
    return (
        len(words) < GENERIC_PARAGRAPH
        or any(diffs.found(w, vocabulary) for w in words)
        or any(diffs.found(w, vocabulary) for w in diffs.specific_words(subject, FILLER))
    )


# ------------------------------------------------------------------ correctness


@lru_cache(maxsize=1024)
def _changed_lines(diff: str) -> frozenset[str]:
    """The diff's added and removed lines, stripped, of 8 or more characters."""
    return frozenset(
        s
        for line in diff.split("\n")
        if line[:1] in "+-" and not line.startswith(("+++ ", "--- ")) and len(s := line[1:].strip()) >= 8
    )


@check("correctness", key=True, kind="estimate", cut=0.3)
def grounded(output: str, task) -> bool | None:
    """The subject (or scope) names something of this diff: a specific word of it (not filler like "update",
    "code", "the") is a word of the diff's lines or paths, or a word for the kind of change the diff is (tests,
    docs, CI, dependencies, formatting; skill_rl/scoring/diffs.py), and it is not a list of names. An estimate: it cuts a subject that says nothing of the diff (another diff's message, a
    vague one) and never pays one that does, since words found in the diff do not make a subject true."""
    msg = parse(output)
    if msg.subject is None:
        return False
    # a header past 100 characters already fails the gate: looking further would only cost time
    return _grounding(msg.subject[:200], (msg.scope or "")[:200], task.input)


@lru_cache(maxsize=8192)
def _grounding(subject: str, scope: str, diff: str) -> bool | None:
    vocabulary = diffs.vocabulary(diff)
    if not vocabulary:
        return None
    words = diffs.specific_words(subject, FILLER) + tuple(w for w in diffs.WORD.findall(scope) if len(w) > 1)
    return any(diffs.found(w, vocabulary) for w in words) and not _names_only(subject, diff)


@check("correctness", key=True, covers=0.35)
def type_right(output: str, task) -> bool | None:
    """The type is the expected one or an accepted alternative."""
    if task.expect is None:
        return None
    return parse(output).type in (task.expect.type, *task.expect.alt_types)


# Types a diff that touches only one kind of file can have, as humans type such commits on real history
# (bench/calibration.py): a docs-only change is not a feature, a CI-only one not a fix of the product's code.
TYPES_FOR_KIND = {
    "docs": frozenset({"docs", "chore", "fix", "style", "revert"}),
    "tests": frozenset({"test", "ci", "chore", "fix", "build", "refactor", "style", "revert"}),
    "ci": frozenset({"ci", "build", "chore", "fix", "test", "revert"}),
    "deps": frozenset({"build", "chore", "fix", "ci", "test", "feat", "perf", "revert"}),
}


@check("correctness", covers=0.15)
def type_fits_the_files(output: str, task) -> bool | None:
    """A fact the input fixes, `expect` or not: when every changed file is documentation, or every one a test, a
    CI file or a dependency manifest (diffs.py `kinds` by path), the type is one humans give such a change
    (TYPES_FOR_KIND: `feat` for a README edit is wrong whatever the subject says). None for any other diff."""
    allowed = _allowed_types(task.input)
    if allowed is None:
        return None
    return parse(output).type in allowed


@lru_cache(maxsize=4096)
def _allowed_types(diff: str) -> frozenset[str] | None:
    files = list(parse_diff(diff).files)
    kinds = [k for k in TYPES_FOR_KIND if files and all(k in diffs.path_kinds(p) for p in files)]
    return frozenset().union(*(TYPES_FOR_KIND[k] for k in kinds)) if kinds else None


@check("correctness", covers=0.1)
def scope_right(output: str, task) -> bool | None:
    """The scope is the expected one, when the task names one."""
    if task.expect is None or task.expect.scope is None:
        return None
    return (parse(output).scope or "").lower() == task.expect.scope


@check("correctness", key=True, covers=0.15)
def breaking_right(output: str, task) -> bool | None:
    """The message marks a breaking change exactly when the diff is one (an unparseable header marks nothing right)."""
    if task.expect is None:
        return None
    msg = parse(output)
    return msg.type is not None and (msg.bang or msg.breaking_note) == task.expect.breaking


# ================================================================== tasks from git history
# `python train_skill.py --skill git-commit --tasks-from-git REPO` calls `task_from_commit` once per
# non-merge commit (skill_rl/mining/ walks the history, bounds and filters the diff, dedups,
# splits and validates; README, "Tasks from your history"). Nothing above depends on this section.

# GitHub's squash-merge suffix: "fix: parse dates (#123)"
PR_SUFFIX = re.compile(r"(\s+\(#\d+\))+$")
TRAILER = re.compile(
    r"^((signed-off-by|co-authored-by|reviewed-by|reviewed-on|acked-by|tested-by|reported-by|suggested-by|helped-by"
    r"|change-id|pr-url|pull-request)\s*:.*|(close[sd]?|fix(e[sd])?|resolve[sd]?|refs?|see)\b\s*:?\s*[\w./-]*#\d+.*"
    r"|\(cherry picked from commit [0-9a-f]+\))$",
    re.I,
)


# GitHub's squash merge: "---------" between the squashed commits and co-authors
SQUASH_RULE = re.compile(r"^-{3,}$")


def reference_message(message: str) -> str:
    """The message as a model could write it from the diff alone: without the PR number on the header and
    without trailer lines that name people, reviews, change ids or tickets, wherever they stand (a squash merge
    repeats each squashed commit's `Co-authored-by:` in the body and ends on a `---------` rule)."""
    lines = message.replace("\r\n", "\n").strip("\n").split("\n")
    lines[0] = PR_SUFFIX.sub("", lines[0])
    body: list[str | None] = [None if TRAILER.match(ln.strip()) else ln for ln in lines[1:]]
    # a run of blank or removed lines collapses to one blank line if it lost one
    kept, gap = [lines[0]], []
    for ln in body + [""]:
        if ln is None or not ln.strip():
            gap.append(ln)
            continue
        kept += ([""] if None in gap else gap) + [ln]
        gap = []
    while len(kept) > 1 and (SQUASH_RULE.match(kept[-1].strip()) or not kept[-1].strip()):
        kept.pop()
    return "\n".join(kept).rstrip()


def task_from_commit(commit) -> dict | str:
    """A task from a commit whose message passes `conventional`: the diff is the input, the message the
    reference, and `expect` comes from its header (type; scope when Expect accepts it; breaking from `!`
    or a BREAKING CHANGE footer). Bots, reverts and messages commitlint rejects are skipped."""
    if commit.bot:
        return "bot author"
    if commit.reverts:
        return "revert"
    message = reference_message(commit.message)
    if not conventional(message, None):
        return "not a Conventional Commit"
    msg = parse(message)
    if msg.type == "revert":
        return "revert"
    expect = {"type": msg.type, "breaking": msg.bang or msg.breaking_note}
    scope = (msg.scope or "").strip().lower()
    try:
        Expect(**expect, scope=scope)
        expect["scope"] = scope
    # no scope, or one the skill's rule rejects ("api,cli", "*"): the task names none
    except ValueError:
        pass
    return {"input": commit.diff, "expect": expect, "reference": message}


def categories(output: str) -> dict[str, str | None]:
    """The answer's categorical field for the collapse monitor (docs/skills.md): its commit type (None: no header)."""
    return {"type": parse(output).type}
