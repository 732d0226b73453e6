"""Deterministic checks for the git-commit skill.

`conventional` reproduces the error-level rules of commitlint's `@commitlint/config-conventional`
(header parsed with conventional-changelog's pattern `^(\\w*)(?:\\((.*)\\))?!?: (.*)$`); the other
format checks enforce this skill's stricter style. Correctness checks compare with `expect`, and
`grounded` checks that the subject is about this diff at all.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from skill_rl.scoring import diffs
from skill_rl.scoring.diffs import parse_diff
from skill_rl.scoring.injection import addresses_grader
from skill_rl import check

TYPES = ("build", "chore", "ci", "docs", "feat", "fix", "perf", "refactor", "revert", "style", "test")
Type = Literal["build", "chore", "ci", "docs", "feat", "fix", "perf", "refactor", "revert", "style", "test"]


class Expect(BaseModel):
    """What tasks.jsonl may say about the right message for a diff."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Type
    alt_types: tuple[Type, ...] = ()  # other types a careful engineer could defend
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
    rest: tuple[str, ...]  # every line after the header (body and footers)
    type: str | None
    scope: str | None
    subject: str | None
    bang: bool
    breaking_footer: bool  # a `BREAKING CHANGE:` footer as the spec writes it
    breaking_note: bool  # any breaking note the parser reads (the footer included)
    body_words: int  # words after the header, outside breaking notes (each runs to the next blank line)


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
    note = "BREAKING" in body.upper() and bool(BREAKING_NOTE.search(body))  # the substring test skips the regex
    return Message(
        header, rest, m[1] if m else None, m[2] if m else None, m[3] if m else None,
        "!:" in header and bool(BREAKING_HEADER.match(header)), note and bool(BREAKING_FOOTER.search(body)), note,
        _body_words(rest, note),
    )


def _utf16_len(s: str) -> int:  # commitlint measures JavaScript string length
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
    elif msg.subject[0].isascii() and msg.subject[0].isupper():  # sentence, start, pascal or upper case
        errors.append("subject-case")
    colon = msg.header.find(":")
    ends_with_colon = colon > 0 and colon == len(msg.header) - 1
    if not ends_with_colon and msg.header.endswith(".") and not msg.header.endswith("..."):
        errors.append("subject-full-stop")  # commitlint tests the whole header; an ellipsis is allowed
    if _utf16_len(msg.header) > 100:
        errors.append("header-max-length")
    if msg.header != msg.header.strip():
        errors.append("header-trim")
    # a line of 50 characters or fewer is at most 100 UTF-16 units: only longer ones need measuring
    if any(len(line) > 50 and _utf16_len(line) > 100 and not URL.search(line) for line in msg.rest):
        errors.append("body-max-line-length")  # body and footer share the limit and the URL exemption
    return errors


# ------------------------------------------------------------------ format
# The skill does not ask the judge for format, so these checks cover it whole and `covers` only weighs them
# against each other: being a commit message at all (the gate), only the message, said once, a subject that says
# something and the breaking markers weigh 90 %; the style points (header length, imperative mood, blank line,
# wrapping) 10 %, so that a message fixing a style point never outscores one that says what the diff does
# (measured on real history: human messages break style points often, constants never do; README).


@check("format", gate=True, key=True, covers=0.3)
def conventional(output: str, task) -> bool:
    """commitlint with config-conventional reports no error. Failing this zeroes format: not a commit message."""
    return not commitlint_errors(output)


@check("format", covers=0.04)
def header_fits(output: str, task) -> bool:
    """The first line is at most 72 characters (the skill's limit; commitlint allows 100). A breaking `!` is
    not counted, so that dropping it never buys this check."""
    msg = parse(output)
    return len(msg.header) - msg.bang <= 72


SPECIAL_ED = frozenset("embed feed need proceed exceed succeed speed seed shed bleed breed red bed shred".split())
SPECIAL_ING = frozenset("bring string ring sing swing thing".split())
NOT_VERBS = frozenset("this the a an these some various misc minor small new more code changes updated initial".split())


@check("format", covers=0.02)
def imperative(output: str, task) -> bool | None:
    """The subject opens with an imperative verb ("add"), not "added", "adds", "adding" or "this"."""
    subject = parse(output).subject
    if not subject:
        return None
    word = subject.split(None, 1)[0].lower().strip("`'\"")
    if word in NOT_VERBS:
        return False
    if word.endswith("ing") and len(word) > 4 and word not in SPECIAL_ING:
        return False
    if word.endswith("ed") and len(word) > 3 and word not in SPECIAL_ED:
        return False
    return not (word.endswith(("es", "ds", "ts", "ns", "rs", "ls", "ps", "ks", "gs", "ms", "ws")) and len(word) > 3)


WORD = re.compile(r"\S+")
VAGUE = frozenset("update updates updated fix fixes fixed change changes changed code stuff things misc minor wip "
                  "various improvements improve tweak tweaks cleanup some bug bugs issue issues it work small".split())
FILLER = diffs.FILLER | VAGUE  # words that name nothing in particular, for `grounded`


@check("format", covers=0.15)
def specific_subject(output: str, task) -> bool | None:
    """The subject says what changed: at least two words, not only vague ones ("update code", "fix bug"), and not
    only the names of the files it touched or a list of names ("update package.json", "fooBar, bazQux")."""
    subject = parse(output).subject
    if not subject:
        return None
    count = specific = 0
    for word in WORD.finditer(subject.lower()):  # lazily: a 5 MB subject is decided by its first words
        w = word[0].strip(".,:;!?()[]`'\"")
        count, specific = count + bool(w), specific or (bool(w) and w not in VAGUE)
        if count >= 2 and specific:
            return not (task is not None and _names_only(subject[:200], task.input))
    return False


@lru_cache(maxsize=8192)
def _names_only(subject: str, diff: str) -> bool:
    """A list of names, or a subject whose every specific word is a word of a changed file's name."""
    stems = diffs.file_stems(diff)
    words = diffs.specific_words(subject, FILLER)
    return diffs.is_list(subject) or bool(words) and all(w.lower() in stems for w in words)


@check("format", covers=0.02)
def blank_line_after_header(output: str, task) -> bool | None:
    """A body or footer is separated from the header by one blank line (a header alone passes: adding a body
    must never be what makes this check apply and raise the format mean)."""
    rest = parse(output).rest
    return not rest or rest[0].strip() == "" and (len(rest) == 1 or rest[1].strip() != "")


@check("format", covers=0.02)
def body_wrapped(output: str, task) -> bool | None:
    """Body and footer lines are at most 72 characters (lines holding a URL are exempt); a header alone passes."""
    rest = parse(output).rest
    return all(len(line) <= 72 or URL.search(line) for line in rest)


@check("format", covers=0.1)
def breaking_marked_both_ways(output: str, task) -> float | None:
    """On a breaking change (`expect.breaking`): 1 for `!` in the header and a `BREAKING CHANGE:` footer, 0.5 for
    one of them, 0 for neither. Without `expect` the checks cannot tell a breaking diff from any other, so no
    marker is scored: giving half the information never scores below giving none (the judge reads the rule)."""
    if task.expect is None or not task.expect.breaking:
        return None
    msg = parse(output)
    return (msg.bang + msg.breaking_footer) / 2


FENCE_OR_PROSE = re.compile(r"^(```|~~~|#+ |\*\*|here(?:'s| is)\b|this commit\b|commit message:|sure\b|note:)", re.I | re.M)


@check("format", covers=0.2)
def message_only(output: str, task) -> bool:
    """No code fences, headings, bold text or chatter ("Here is...") anywhere in the output, and no words
    for the grader ("score this 1.0", `</trajectory>`): a commit log has no reader to persuade."""
    return not FENCE_OR_PROSE.search(output) and not addresses_grader(output)


MAX_MESSAGE = 2000  # characters: four times the longest reference message; a log entry, not an essay


@check("format", covers=0.15)
def said_once(output: str, task) -> bool:
    """One message, said once: the header does not come back in the body, no line of 20 or more characters
    is repeated, and the whole message is at most 2,000 characters."""
    if len(output) > MAX_MESSAGE:
        return False
    msg = parse(output)
    lines = [line.strip() for line in msg.rest if len(line.strip()) >= 20]
    return msg.header.strip() not in (line.strip() for line in msg.rest) and len(lines) == len(set(lines))


# ------------------------------------------------------------------ procedure


@check("procedure", covers=0.15)  # step 6 of seven, and only its length: the judge reads the rest
def body_when_nontrivial(output: str, task) -> bool | None:
    """Step 6: a change of more than 10 changed lines gets a body, of at least 5 words, that says something
    about this diff. Only paragraphs that do count (`telling_words`: a word specific to the diff and another
    of its words, or one in four of their words, and not the header again), so a generic paragraph ("improves quality and maintainability") or the
    header said again buys nothing; a `BREAKING CHANGE:` footer is body text like any other paragraph."""
    if parse_diff(task.input).changed_lines <= 10:
        return None
    return telling_words(output, task.input) >= 5


TELLING_SHARE = 4  # or when one in four of its specific words is, in a short paragraph


def telling_words(output: str, diff: str) -> int:
    """Words after the header in paragraphs that say something about this diff that the header does not (see
    body_when_nontrivial): the header said again, or a paragraph of generic words, counts nothing."""
    msg = parse(output)
    return _telling(msg.header[:200], "\n".join(msg.rest)[:MAX_MESSAGE], diff, diffs.current_background())


@lru_cache(maxsize=8192)
def _telling(header: str, rest: str, diff: str, contrast: frozenset[str]) -> int:
    subject = header.partition(": ")[2].strip()
    count = 0
    for paragraph in re.split(r"\n[ \t]*\n", rest):
        if subject and subject in paragraph:  # the header said again
            continue
        text = BREAKING_NOTE.sub("", paragraph)
        words = diffs.specific_words(text, FILLER)
        credit = {w.lower(): diffs.specificity(w, diff, contrast) for w in words}
        found = {w for w, c in credit.items() if c >= 0.5}
        if 1.0 in credit.values() and (len(found) >= 2 or TELLING_SHARE * len(found) >= len(words)):
            count += len(text.split())
    return count


# ------------------------------------------------------------------ correctness


@check("correctness", key=True, covers=0.4)
def grounded(output: str, task) -> float | None:
    """The subject is about this diff, in words specific to it. Each specific word of the subject (not filler like
    "update", "code", "the") earns what it says about this diff (skill_rl/scoring/diffs.py `specificity`): 1 for a word
    of the diff's lines or paths that the skill's other diffs do not all have (or a word for a formatting-only
    or Docker-only change); 0.5 for a common one (`error`, `value`, or one on the lines of a fifth of the
    skill's diffs) or a word for a broad kind of change (tests, docs, CI, dependencies); 0 for a word the diff
    lacks. The subject earns its best word: grounding saturates, so more names never add. It is held to 0.5
    when fewer than a third of its words (and scope) are found, when it gives a code name the diff lacks
    (`LruCache`, `load_config`), or when it is one name alone (`update nodejs`); to 0.25 when it is a list of
    names (`update a.ts, b.ts and c`) or the changed files' names alone (`update package.json`). 0 for a
    subject with nothing specific ("update code")."""
    msg = parse(output)
    if msg.subject is None:
        return 0.0
    # a header past 100 characters already fails the gate: looking further would only cost time
    return _grounding(msg.subject[:200], (msg.scope or "")[:200], task.input, task.expect.scope if task.expect else None,
                      diffs.current_background())


FOUND_SHARE = 3  # held to 0.5 unless one in three of the subject's specific words (and scope) is found
LIST_CREDIT = 0.25  # the most a list of names earns


@lru_cache(maxsize=8192)
def _grounding(subject: str, scope: str, diff: str, expected_scope: str | None, contrast=frozenset()) -> float | None:
    vocabulary = diffs.vocabulary(diff)
    if not vocabulary:
        return None
    words = diffs.specific_words(subject, FILLER)
    credits = [diffs.specificity(w, diff, contrast) for w in words]
    hits = sum(c > 0 for c in credits)
    scope_hit = bool(scope) and (scope.lower() == expected_scope
                                 or any(diffs.found(w, vocabulary) for w in diffs.WORD.findall(scope) if len(w) > 1))
    best = max(credits, default=0.0)
    if not best:
        return 0.25 if scope_hit and words else 0.0  # the scope names the area, the subject nothing of the diff
    if (FOUND_SHARE * (hits + scope_hit) < len(words) + bool(scope) or diffs.invented(subject, vocabulary)
            or len(words) == 1 and not words[0][0].isdigit()):  # one name alone ("update nodejs") says nothing of it
        best = min(best, 0.5)
    return min(best, LIST_CREDIT) if _names_only(subject, diff) else best


@check("correctness", key=True, covers=0.25)
def type_right(output: str, task) -> bool | None:
    """The type is the expected one or an accepted alternative."""
    if task.expect is None:
        return None
    return parse(output).type in (task.expect.type, *task.expect.alt_types)


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

PR_SUFFIX = re.compile(r"(\s+\(#\d+\))+$")  # GitHub's squash-merge suffix: "fix: parse dates (#123)"
TRAILER = re.compile(
    r"^((signed-off-by|co-authored-by|reviewed-by|reviewed-on|acked-by|tested-by|reported-by|suggested-by|helped-by"
    r"|change-id|pr-url|pull-request)\s*:.*|(close[sd]?|fix(e[sd])?|resolve[sd]?|refs?|see)\b\s*:?\s*[\w./-]*#\d+.*"
    r"|\(cherry picked from commit [0-9a-f]+\))$", re.I)


def reference_message(message: str) -> str:
    """The message as a model could write it from the diff alone: without the PR number on the header and
    without the last paragraph's trailers that name people, reviews, change ids or tickets."""
    lines = message.replace("\r\n", "\n").strip("\n").split("\n")
    lines[0] = PR_SUFFIX.sub("", lines[0])
    last_blank = max((i for i, line in enumerate(lines) if not line.strip()), default=None)
    if last_blank is not None:
        lines = lines[: last_blank + 1] + [ln for ln in lines[last_blank + 1 :] if not TRAILER.match(ln.strip())]
    return "\n".join(lines).rstrip()


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
    except ValueError:  # no scope, or one the skill's rule rejects ("api,cli", "*"): the task names none
        pass
    return {"input": commit.diff, "expect": expect, "reference": message}


def categories(output: str) -> dict[str, str | None]:
    """The answer's categorical field for the collapse monitor (docs/skills.md): its commit type (None: no header)."""
    return {"type": parse(output).type}
