"""Deterministic checks for the release-notes skill, beside the ones derived from its SKILL.md.

The derived checks hold the format (headings, template, limits) and that the notes cite only, and every
one of, the input's `#<number>`s. These check what the notes *claim*: the release type and version the
Procedure computes (steps 3 and 4), each pull request in the section it belongs to, breaking changes under
Breaking changes and never under Internal, entries that say what their own pull requests did (an entry
citing a real number for a change nobody made fails) in words of their own rather than the title's.
Without `expect` they hold what the input alone decides: a `!` or "BREAKING" title is breaking, a `feat:`
title a feature and a `fix:` title a fix (unless reverted in the same release), the release type follows
the notes' own sections and the version follows the release type.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from skill_rl.scoring import diffs
from skill_rl import check

SECTIONS = {"breaking changes": "breaking", "features": "features", "fixes": "fixes", "internal": "internal",
            "highlights": "highlights"}
PLACES = ("breaking", "features", "fixes", "internal")
VERSION = re.compile(r"^v?(\d{1,9})\.(\d{1,9})\.(\d{1,9})$")
NUMBER = re.compile(r"#(\d{1,9})\b")
TITLE = re.compile(r"(?m)^#(\d{1,9}) +(.+)$")
PREFIX = re.compile(r"^(?P<type>[A-Za-z]+)(?:\([^()\n]*\))?(?P<bang>!)?:\s*")
REVERT = re.compile(r'^Revert "(.+)"\s*$')
BREAKING_WORD = re.compile(r"\bBREAKING\b|\bbreaking change\b", re.I)
COPY = 0.95  # an entry this close to its title (letters and digits, any case) is the title copied


class Expect(BaseModel):
    """The release a careful maintainer cuts: its type, its version, and where each pull request goes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    release_type: Literal["major", "minor", "patch"]
    version: str = Field(pattern=r"^\d{1,9}\.\d{1,9}\.\d{1,9}$")
    breaking: tuple[int, ...] = ()
    features: tuple[int, ...] = ()
    fixes: tuple[int, ...] = ()
    internal: tuple[int, ...] = ()

    @model_validator(mode="after")
    def _once(self):
        numbers = [*self.breaking, *self.features, *self.fixes, *self.internal]
        if len(numbers) != len(set(numbers)):
            raise ValueError("each pull request number goes in one place only")
        if (self.release_type == "major") != bool(self.breaking):
            raise ValueError("release_type must be 'major' exactly when breaking lists a pull request")
        return self


# ------------------------------------------------------------------ reading the input and the notes


@dataclass(frozen=True)
class Release:
    """The task's input: previous version and the titles by number."""

    previous: tuple[int, int, int] | None
    titles: dict[int, str]

    def marked_breaking(self) -> set[int]:
        return {n for n, t in self.titles.items() if (m := PREFIX.match(t)) and m["bang"] or BREAKING_WORD.search(t)}

    def reverted(self) -> set[int]:
        """Pull requests added and reverted in this release, and their reverts."""
        by_title = {t.strip(): n for n, t in self.titles.items()}
        out = set()
        for n, t in self.titles.items():
            m = REVERT.match(t.strip())
            if m and m[1].strip() in by_title:
                out |= {n, by_title[m[1].strip()]}
        return out

    def by_prefix(self) -> dict[int, set[str]]:
        """Where the input alone puts a pull request: `!`/BREAKING under breaking, feat under features (or
        breaking), fix under fixes (or breaking); a reverted one under internal."""
        out, reverted, marked = {}, self.reverted(), self.marked_breaking()
        for n, t in self.titles.items():
            m = PREFIX.match(t)
            if n in reverted:
                out[n] = {"internal"}
            elif n in marked:
                out[n] = {"breaking"}
            elif m and m["type"].lower() == "feat":
                out[n] = {"features", "breaking"}
            elif m and m["type"].lower() == "fix":
                out[n] = {"fixes", "breaking"}
        return out


@lru_cache(maxsize=1024)
def release(text: str) -> Release:
    prev = re.search(r"(?im)^previous release:\s*(\S+)\s*$", text)
    v = VERSION.match(prev[1]) if prev else None
    return Release(tuple(int(x) for x in v.groups()) if v else None, {int(n): t.strip() for n, t in TITLE.findall(text)})


@dataclass(frozen=True)
class Notes:
    version: str | None  # from the `# <project> <version>` line
    release_type: str | None
    sections: dict[str, tuple[str, ...]]  # place -> its lines

    def cited(self, place: str) -> set[int]:
        return {int(n) for line in self.sections.get(place, ()) for n in NUMBER.findall(line)}

    def entries(self, *places: str) -> list[tuple[str, list[int]]]:
        """(text without its `(#n)` references, numbers cited) of each list item under these sections."""
        out = []
        for place in places:
            for line in self.sections.get(place, ()):
                if line.startswith(("- ", "* ")):
                    out.append((re.sub(r"\s*\((?:#\d+[, ]*)+\)\s*$", "", line[2:]).strip(),
                                [int(n) for n in NUMBER.findall(line)]))
        return out


@lru_cache(maxsize=4096)
def notes(output: str) -> Notes:
    lines = output.replace("\r\n", "\n").strip().split("\n")
    head = re.match(r"^# +.*?\s(v?\d+\.\d+\.\d+\S*)\s*$", lines[0]) if lines else None
    kind = next((m[1].lower() for line in lines if (m := re.match(r"^release type:\s*(\S+)\s*$", line, re.I))), None)
    sections, current = {}, None
    for line in lines:
        if line.startswith("## "):
            current = SECTIONS.get(line[3:].strip().lower())
            if current:
                sections.setdefault(current, [])
        elif current and line.strip():
            sections[current].append(line.strip())
    return Notes(head[1].lstrip("v") if head else None, kind, {k: tuple(v) for k, v in sections.items()})


def bump(previous: tuple[int, int, int], kind: str) -> str:
    """Step 4: the next version; below 1.0.0 a breaking change raises the second number, anything else the third."""
    major, minor, patch = previous
    if major == 0:
        kind = {"major": "minor", "minor": "patch", "patch": "patch"}[kind]
    if kind == "major":
        return f"{major + 1}.0.0"
    return f"{major}.{minor + 1}.0" if kind == "minor" else f"{major}.{minor}.{patch + 1}"


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", PREFIX.sub("", text).lower()))


# ------------------------------------------------------------------ procedure


@check("procedure", covers=0.1)
def release_type_follows_sections(output: str, task) -> bool | None:
    """Step 3: `major` when Breaking changes lists anything, else `minor` when Features does, else `patch`."""
    n = notes(output)
    if n.release_type is None:
        return False
    wanted = "major" if n.entries("breaking") else "minor" if n.entries("features") else "patch"
    return n.release_type == wanted


@check("procedure", covers=0.1)
def version_follows_type(output: str, task) -> bool | None:
    """Step 4: the title's version is the previous one raised as the stated release type says."""
    r, n = release(task.input), notes(output)
    if r.previous is None:
        return None
    return n.release_type in ("major", "minor", "patch") and n.version == bump(r.previous, n.release_type)


@check("procedure", kind="estimate")
def entries_rewritten(output: str, task) -> float | None:
    """Step 5: entries say what changed for the user in their own words: the share of entries that are not
    their title copied (the same letters and digits, give or take 5 %, once a `type(scope):` prefix goes)."""
    r, entries = release(task.input), notes(output).entries("breaking", "features", "fixes")
    if not entries:
        return None
    copied = 0
    for text, numbers in entries:
        mine = _words(text)
        copied += any(difflib.SequenceMatcher(None, mine, _words(r.titles[k])).ratio() >= COPY
                      for k in numbers if k in r.titles)
    return 1 - copied / len(entries)


# ------------------------------------------------------------------ correctness


@check("correctness", key=True, covers=0.15)
def release_type_right(output: str, task) -> bool | None:
    """The release type is the expected one; without `expect`, `major` whenever a title is marked breaking
    (`!` or BREAKING); otherwise not checked."""
    kind = notes(output).release_type
    if task.expect is not None:
        return kind == task.expect.release_type
    return kind == "major" if release(task.input).marked_breaking() else None


@check("correctness", covers=0.1)
def version_right(output: str, task) -> bool | None:
    """The version is the expected one."""
    return None if task.expect is None else notes(output).version == task.expect.version


def _placement(n: Notes, wanted: dict[int, set[str]]) -> float | None:
    if not wanted:
        return None
    cited = {p: n.cited(p) for p in PLACES}
    right = sum(bool(places := {p for p in PLACES if k in cited[p]}) and places <= ok for k, ok in wanted.items())
    return right / len(wanted)


@check("correctness", key=True, covers=0.2)
def entries_in_their_sections(output: str, task) -> float | None:
    """Share of pull requests cited in their place and nowhere else among Breaking changes, Features, Fixes and
    Internal: the expected one; without `expect`, the one the title's prefix names (`!` breaking, `feat`
    features, `fix` fixes, either may be breaking; reverted in this release: internal), others unchecked."""
    if task.expect is not None:
        e = task.expect
        wanted = {k: {p} for p in PLACES for k in getattr(e, p)}
    else:
        wanted = release(task.input).by_prefix()
    return _placement(notes(output), wanted)


@check("correctness", covers=0.1)
def breaking_listed(output: str, task) -> float | None:
    """Breaking changes are under Breaking changes and not hidden under Internal: the share of breaking pull
    requests (expected, or marked `!`/BREAKING without `expect`) that are."""
    breaking = set(task.expect.breaking) if task.expect is not None else release(task.input).marked_breaking()
    if not breaking:
        return None
    n = notes(output)
    listed, internal = n.cited("breaking"), n.cited("internal")
    return sum(k in listed and k not in internal for k in breaking) / len(breaking)


@check("correctness", covers=0.1)
def internal_right(output: str, task) -> float | None:
    """Internal lists the maintainer-only pull requests: F1 of its numbers against the expected ones."""
    if task.expect is None:
        return None
    got, want = notes(output).cited("internal"), set(task.expect.internal)
    if not got and not want:
        return 1.0
    hits = len(got & want)
    return 2 * hits / (len(got) + len(want))


NAMED = 2  # words of a title an entry citing it names (all of them, when the title has fewer): it says that change
# words any entry may use about any change: they name none ("Fix ...", "Improve ...", "Update ...")
VAGUE = diffs.FILLER | frozenset("fix fixes fixed fixing improve improves improved improvement improvements update "
                                 "updates updated change changes changed new now".split())


def title_words(title: str) -> tuple[str, ...]:
    """The words of a title that name something: its scope and its text, not its `type:` or filler ("add", "fix")."""
    m = PREFIX.match(title)
    scope = re.search(r"\(([^()\n]*)\)", m[0])[1] if m and "(" in m[0] else ""
    return diffs.specific_words(f"{scope} {PREFIX.sub('', title)}", VAGUE)


def says(entry: str, title: str, named: int = NAMED) -> float:
    """How much of one title an entry says: 1 when it names `named` of the title's words (all of them when the title
    has fewer; words match by their stem, as in grounding, either way round), 0.5 when it names fewer but some, else 0."""
    words, vocab, own = title_words(title), diffs.vocabulary(entry), diffs.specific_words(entry, VAGUE)
    if not words:
        return 1.0
    # either way round: a stem can be cut short ("speed" -> "sp"), and "speeds" still names "speed"
    hits = sum(diffs.found(w, vocab) or any(diffs.found(e, diffs.vocabulary(w)) for e in own) for w in words)
    return 1.0 if hits >= min(named, len(words)) else 0.5 if hits else 0.0


@check("correctness", key=True, kind="estimate")
def entries_match_their_titles(output: str, task) -> float | None:
    """Entries say the changes they cite: the mean, over each entry of Breaking changes, Features and Fixes and each
    pull request it cites, of how much of that title it says (`says`: two of its words, or all when it has fewer).
    A Highlights entry, said again "in a few words", needs one word of a cited title. An entry citing no number of
    the input earns 0. So "Improve <word>", an invented change that shares one word with its title, and one vague
    entry citing a whole section's numbers lose; a title copied, or rewritten naming what it changed, passes."""
    r, n = release(task.input), notes(output)
    scores = []
    for named, places in ((NAMED, ("breaking", "features", "fixes")), (1, ("highlights",))):
        for text, numbers in n.entries(*places):
            cited = [r.titles[k] for k in numbers if k in r.titles]
            scores += [says(text, title, named) for title in cited] or [0.0]
    return sum(scores) / len(scores) if scores else None
