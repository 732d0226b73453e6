"""Deterministic checks for the git-commit skill.

`conventional` reproduces the error-level rules of commitlint's `@commitlint/config-conventional`
(header parsed with conventional-changelog's pattern `^(\\w*)(?:\\((.*)\\))?!?: (.*)$`); the other
format checks enforce this skill's stricter style. Correctness checks compare with `expect`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from skill_rl.diffs import parse_diff
from skill_rl.rubric import check

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
BREAKING_FOOTER = re.compile(r"^BREAKING[ -]CHANGE: \S", re.M)
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S", re.I)


class Message(NamedTuple):
    header: str
    rest: tuple[str, ...]  # every line after the header (body and footers)
    type: str | None
    scope: str | None
    subject: str | None
    bang: bool
    breaking_footer: bool
    body_words: int  # words after the header, outside BREAKING CHANGE footers


@lru_cache(maxsize=8192)
def parse(text: str) -> Message:
    """Split a message as commitlint does: leading/trailing newlines trimmed, the first line is the header."""
    header, _, body = text.strip("\r\n").replace("\r\n", "\n").partition("\n")
    rest = tuple(body.split("\n")) if _ else ()
    m = HEADER.match(header)
    footer = "BREAKING" in body and bool(BREAKING_FOOTER.search(body))  # the substring test skips the regex
    return Message(
        header, rest, m[1] if m else None, m[2] if m else None, m[3] if m else None,
        "!:" in header and bool(BREAKING_HEADER.match(header)), footer,
        sum(len(line.split()) for line in rest if not (footer and BREAKING_FOOTER.match(line))),
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


@check("format", gate=True, key=True)
def conventional(output: str, task) -> bool:
    """commitlint with config-conventional reports no error. Failing this zeroes format: not a commit message."""
    return not commitlint_errors(output)


@check("format")
def header_fits(output: str, task) -> bool:
    """The first line is at most 72 characters (the skill's limit; commitlint allows 100)."""
    return len(parse(output).header) <= 72


SPECIAL_ED = frozenset("embed feed need proceed exceed succeed speed seed shed bleed breed red bed shred".split())
SPECIAL_ING = frozenset("bring string ring sing swing thing".split())
NOT_VERBS = frozenset("this the a an these some various misc minor small new more code changes updated initial".split())


@check("format")
def imperative(output: str, task) -> bool | None:
    """The subject opens with an imperative verb ("add"), not "added", "adds", "adding" or "this"."""
    subject = parse(output).subject
    if not subject:
        return None
    word = subject.split()[0].lower().strip("`'\"")
    if word in NOT_VERBS:
        return False
    if word.endswith("ing") and len(word) > 4 and word not in SPECIAL_ING:
        return False
    if word.endswith("ed") and len(word) > 3 and word not in SPECIAL_ED:
        return False
    return not (word.endswith(("es", "ds", "ts", "ns", "rs", "ls", "ps", "ks", "gs", "ms", "ws")) and len(word) > 3)


VAGUE = frozenset("update updates updated fix fixes fixed change changes changed code stuff things misc minor wip "
                  "various improvements improve tweak tweaks cleanup some bug bugs issue issues it work small".split())


@check("format")
def specific_subject(output: str, task) -> bool | None:
    """The subject says what changed: at least two words, not only vague ones ("update code", "fix bug")."""
    subject = parse(output).subject
    if not subject:
        return None
    words = [w for w in (w.strip(".,:;!?()[]`'\"") for w in subject.lower().split()) if w]
    return len(words) >= 2 and not all(w in VAGUE for w in words)


@check("format")
def blank_line_after_header(output: str, task) -> bool | None:
    """A body or footer is separated from the header by one blank line."""
    rest = parse(output).rest
    return None if not rest else rest[0].strip() == "" and (len(rest) == 1 or rest[1].strip() != "")


@check("format")
def body_wrapped(output: str, task) -> bool | None:
    """Body and footer lines are at most 72 characters (lines holding a URL are exempt)."""
    rest = parse(output).rest
    if not any(line.strip() for line in rest):
        return None
    return all(len(line) <= 72 or URL.search(line) for line in rest)


@check("format")
def breaking_marked_both_ways(output: str, task) -> bool:
    """`!` in the header if and only if a `BREAKING CHANGE:` footer explains the break."""
    msg = parse(output)
    return msg.bang == msg.breaking_footer


FENCE_OR_PROSE = re.compile(r"^(```|~~~|#+ |\*\*|here(?:'s| is)\b|this commit\b|commit message:|sure\b|note:)", re.I | re.M)


@check("format")
def message_only(output: str, task) -> bool:
    """No code fences, headings, bold text or chatter ("Here is...") anywhere in the output."""
    return not FENCE_OR_PROSE.search(output)


# ------------------------------------------------------------------ procedure


@check("procedure")
def body_when_nontrivial(output: str, task) -> bool | None:
    """Step 6: a change of more than 10 changed lines gets a body that says why."""
    if parse_diff(task.input).changed_lines <= 10:
        return None
    msg = parse(output)
    return msg.body_words >= 5


# ------------------------------------------------------------------ correctness


@check("correctness", key=True)
def type_right(output: str, task) -> bool | None:
    """The type is the expected one or an accepted alternative."""
    if task.expect is None:
        return None
    return parse(output).type in (task.expect.type, *task.expect.alt_types)


@check("correctness")
def scope_right(output: str, task) -> bool | None:
    """The scope is the expected one, when the task names one."""
    if task.expect is None or task.expect.scope is None:
        return None
    return (parse(output).scope or "").lower() == task.expect.scope


@check("correctness", key=True)
def breaking_right(output: str, task) -> bool | None:
    """The message marks a breaking change exactly when the diff is one (an unparseable header marks nothing right)."""
    if task.expect is None:
        return None
    msg = parse(output)
    return msg.type is not None and (msg.bang or msg.breaking_footer) == task.expect.breaking


# ================================================================== tasks from git history
# `python train_skill.py --skill git-commit --tasks-from-git REPO` calls `task_from_commit` once per
# non-merge commit (skill_rl/mining.py walks the history, bounds and filters the diff, dedups,
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
    expect = {"type": msg.type, "breaking": msg.bang or msg.breaking_footer}
    scope = (msg.scope or "").strip().lower()
    try:
        Expect(**expect, scope=scope)
        expect["scope"] = scope
    except ValueError:  # no scope, or one the skill's rule rejects ("api,cli", "*"): the task names none
        pass
    return {"input": commit.diff, "expect": expect, "reference": message}
