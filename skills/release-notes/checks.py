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

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from skill_rl import check
from skill_rl.scoring import diffs

SECTIONS = {
    "breaking changes": "breaking",
    "features": "features",
    "fixes": "fixes",
    "internal": "internal",
    "highlights": "highlights",
}
PLACES = ("breaking", "features", "fixes", "internal")
VERSION = re.compile(r"^v?(\d{1,9})\.(\d{1,9})\.(\d{1,9})$")
NUMBER = re.compile(r"#(\d{1,9})\b")
TITLE = re.compile(r"(?m)^#(\d{1,9}) +(.+)$")
PREFIX = re.compile(r"^(?P<type>[A-Za-z]+)(?:\([^()\n]*\))?(?P<bang>!)?:\s*")
REVERT = re.compile(r'^Revert "(.+)"\s*$')
# the marker, in capitals: "yargs-parser was breaking @types/yargs" is a fix
BREAKING_WORD = re.compile(r"\bBREAKING\b")


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
    return Release(
        tuple(int(x) for x in v.groups()) if v else None, {int(n): t.strip() for n, t in TITLE.findall(text)}
    )


@dataclass(frozen=True)
class Notes:
    # from the `# <project> <version>` line
    version: str | None
    release_type: str | None
    # place -> its lines
    sections: dict[str, tuple[str, ...]]

    def cited(self, place: str) -> set[int]:
        return {int(n) for line in self.sections.get(place, ()) for n in NUMBER.findall(line)}

    def entries(self, *places: str) -> list[tuple[str, list[int]]]:
        """(text without its `(#n)` references, numbers cited) of each list item under these sections."""
        out = []
        for place in places:
            for line in self.sections.get(place, ()):
                if line.startswith(("- ", "* ")):
                    out.append(
                        (
                            re.sub(r"\s*\((?:#\d+[, ]*)+\)\s*$", "", line[2:]).strip(),
                            [int(n) for n in NUMBER.findall(line)],
                        )
                    )
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


HEADER_TYPES = frozenset("feat fix chore docs refactor perf test tests build ci style revert deps".split())


@check("procedure", kind="estimate")
def entries_not_commit_headers(output: str, task) -> float | None:
    """Step 5: an entry says the change for its reader, not a commit header pasted: the share of entries that do not
    open with a Conventional Commits `type(scope)!:` prefix. Their words may be the title's: release tools print the
    commit's subject (its scope in bold), and so do the humans of our real releases (tests/data/release-notes-*)."""
    entries = notes(output).entries("breaking", "features", "fixes")
    if not entries:
        return None
    pasted = sum(bool(m) and m["type"].lower() in HEADER_TYPES for m in (PREFIX.match(text) for text, _ in entries))
    return 1 - pasted / len(entries)


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


# words of a title an entry citing it names (all of them, when the title has fewer): it says that change
NAMED = 2
# words any entry may use about any change: they name none ("Fix ...", "Improve ...", "Update ...")
VAGUE = diffs.FILLER | frozenset(
    "fix fixes fixed fixing improve improves improved improvement improvements update "
    "updates updated change changes changed new now".split()
)


def title_words(title: str) -> tuple[str, ...]:
    """The words of a title that name something: its scope and its text, not its `type:` or filler ("add", "fix")."""
    m = PREFIX.match(title)
    scope = re.search(r"\(([^()\n]*)\)", m[0])[1] if m and "(" in m[0] else ""
    return diffs.specific_words(f"{scope} {PREFIX.sub('', title)}", VAGUE)


def same_word(a: str, b: str) -> bool:
    """Two words name the same thing: the same stem (diffs.key), or the shorter, of four letters or more, begins the
    longer ("string" and "strings": the stem cuts "string" to "str" and "strings" to "strin")."""
    a, b = sorted((a.lower(), b.lower()), key=len)
    return diffs.key(a) == diffs.key(b) or len(a) >= 4 and b.startswith(a)


def says(entry: str, title: str, named: int = NAMED) -> float:
    """How much of one title an entry says: 1 when it names `named` of the title's words (all of them when the title
    has fewer), 0.5 when it names fewer but some, else 0. A word is named as grounding finds it (diffs.found: stems,
    compound names), or by `same_word` with one of the entry's words."""
    words = title_words(title)
    if not words:
        return 1.0
    vocab, own = diffs.vocabulary(entry), [w for w in diffs.WORD.findall(entry) if len(w) > 2]
    hits = sum(diffs.found(w, vocab) or any(same_word(w, e) for e in own) for w in words)
    return 1.0 if hits >= min(named, len(words)) else 0.5 if hits else 0.0


# specific words a breaking entry that names nothing of its title needs: it says what to do instead
UPGRADE_NOTE = 4


def says_briefly(entry: str, title: str) -> float:
    """A breaking entry says what breaks and what to do, often in words the title lacks (the humans' BREAKING CHANGE
    note: "environment variables now override config files" for "upgrade yargs-parser"), and a highlight says an
    entry again in a few words: one word of the title, or a note of UPGRADE_NOTE specific words of its own."""
    return 1.0 if says(entry, title, 1) == 1.0 or len(diffs.specific_words(entry, VAGUE)) >= UPGRADE_NOTE else 0.0


@check("correctness", key=True, kind="estimate")
def entries_match_their_titles(output: str, task) -> float | None:
    """Entries say the changes they cite: the mean, over each entry and each pull request it cites, of how much of
    that title it says. A Features or Fixes entry names two of its title's words (all when it has fewer: `says`); a
    Breaking changes or Highlights entry one, or it is a note of its own (`says_briefly`). An entry citing no number of the input earns 0. So "Improve <word>", an invented change
    that shares one word with its title, and one vague entry citing a whole section's numbers lose; a title copied
    (as release tools print it), or rewritten naming what it changed, passes."""
    r, n = release(task.input), notes(output)
    scores = []
    for judge, places in ((says, ("features", "fixes")), (says_briefly, ("breaking", "highlights"))):
        for text, numbers in n.entries(*places):
            cited = [r.titles[k] for k in numbers if k in r.titles]
            scores += [judge(text, title) for title in cited] or [0.0]
    return sum(scores) / len(scores) if scores else None


# ------------------------------------------------------------------ mining: real releases from a CHANGELOG
# `python train_skill.py --skill release-notes --tasks-from-git REPO` calls `task_from_commit` once per commit
# (skill_rl/mining/ walks the history, bounds the diff, refuses secrets and duplicates, splits and validates).
# A release commit adds one release's section to the top of a CHANGELOG.md written by release-please or
# conventional-changelog (`## [1.4.0](https://github.com/o/r/compare/v1.3.2...v1.4.0) (date)`, then `### Features`,
# `### Bug Fixes`, ... and one `* **scope:** text ([#12](url)) ([sha](url))` line per commit). The task is that
# release as the skill sees it: the input lists one title per pull request, `type(scope)!: text` as the section and
# the entry give them (the commit header the changelog tool read, without its PR number); the reference is the
# humans' notes in the skill's Output Format. Nothing above depends on this section.

from dataclasses import replace as _replace  # noqa: E402 (this section stands apart from the checks above)

CHANGELOG_FILE = re.compile(r"(^|/)changelog\.md$", re.I)
RELEASE_HEADING = re.compile(r"^#{1,3} \[(?P<version>[^\]\s]+)\]\((?P<url>[^)\s]+)\)")
COMPARE = re.compile(r"github\.com/[^/\s]+/(?P<repo>[^/\s]+)/compare/(?P<old>\S+?)\.\.\.(?P<new>\S+)$")
TAG = re.compile(r"^(?:(?P<component>.+?)[-@/])?v?(?P<version>\d{1,9}\.\d{1,9}\.\d{1,9})$")
SECTION_HEADING = re.compile(r"^#{2,4} +(?:⚠️? *)?(?P<name>[^#\n]+?)\s*$")
ENTRY = re.compile(
    r"^\* (?:\*\*(?P<scope>[^*\n]+?):\*\* )?(?P<text>.+?)(?: \(\[#(?P<pr>\d{1,9})\]\([^)\s]*\)\))?"
    r"(?: \(\[(?P<sha>[0-9a-f]{7,40})\]\([^)\s]*\)\))?(?:,? closes .*)?$"
)
# a breaking note quoting its header: "drop Node 10 (#1919)"
INLINE_PR = re.compile(r"\s*\(#(\d{1,9})\)$")
# A changelog section: where the skill puts its entries, and the Conventional Commits type it lists.
CHANGELOG_SECTIONS = {
    "features": ("features", "feat"),
    "performance improvements": ("features", "perf"),
    "bug fixes": ("fixes", "fix"),
    "documentation": ("internal", "docs"),
    "miscellaneous chores": ("internal", "chore"),
    "chores": ("internal", "chore"),
    "code refactoring": ("internal", "refactor"),
    "tests": ("internal", "test"),
    "build system": ("internal", "build"),
    "continuous integration": ("internal", "ci"),
    "styles": ("internal", "style"),
}
BREAKING_SECTIONS = {"breaking changes"}


@dataclass(frozen=True)
class ChangelogEntry:
    # breaking, features, fixes or internal
    place: str
    # the commit type its section lists (None under Breaking changes)
    type: str | None
    scope: str | None
    text: str
    pr: int | None
    # the commit the changelog links
    sha: str | None = None

    def line(self) -> str:
        """The entry as the notes show it: its scope in bold, as the changelog tool wrote it, and its number."""
        return f"- {f'**{self.scope}:** ' if self.scope else ''}{self.text} (#{self.pr})"


def _added_release(diff: str) -> list[str] | str:
    """The lines of the one release section the diff adds (heading first), or why there is none."""
    sections, current = [], None
    for line in diff.split("\n"):
        if not line.startswith("+") or line.startswith("+++"):
            # the added run ends: the older releases follow
            current = None
        elif RELEASE_HEADING.match(line[1:]):
            current = [line[1:]]
            sections.append(current)
        elif current is not None:
            current.append(line[1:])
    if not sections:
        return "adds no release section to the CHANGELOG"
    return sections[0] if len(sections) == 1 else "adds several release sections"


def _entries(lines: list[str]) -> list[ChangelogEntry] | str:
    """Every entry of the release section, in its place; or why the section cannot be mapped faithfully."""
    out, place, kind = [], None, None
    for line in lines:
        if not line.strip():
            continue
        if m := SECTION_HEADING.match(line):
            name = m["name"].lower().strip("⚠️ ").strip()
            if name in BREAKING_SECTIONS:
                place, kind = "breaking", None
            elif name in CHANGELOG_SECTIONS:
                place, kind = CHANGELOG_SECTIONS[name]
            elif name == "reverts":
                return "a Reverts section: the notes do not say whether the reverted change reached users"
            else:
                return f"a {m['name'][:30]!r} section of no one commit type"
            continue
        m = ENTRY.match(line)
        if place is None or not m:
            return "a line that is not a one-line entry under a section (wrapped or nested text)"
        text, pr = m["text"].strip(), m["pr"]
        # the tool linked an issue or a person named in the header: not the header's own words
        if "](" in text:
            return "an entry whose text holds links (issues or people)"
        if pr is None and (inline := INLINE_PR.search(text)):
            text, pr = text[: inline.start()], inline[1]
        out.append(ChangelogEntry(place, kind, m["scope"], text, int(pr) if pr else None, m["sha"]))
    return out


def _words_of(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _same_change(a: ChangelogEntry, b: ChangelogEntry) -> bool:
    return _words_of(f"{a.scope or ''} {a.text}") == _words_of(f"{b.scope or ''} {b.text}")


def _footer_of(note: ChangelogEntry, entry: ChangelogEntry, message_of) -> bool:
    """The note is the text of a `BREAKING CHANGE:` footer of the commit the entry links."""
    message = message_of(entry.sha) if entry.sha else ""
    footer = re.split(r"(?m)^BREAKING[ -]CHANGES?:", message, maxsplit=1)
    return len(footer) == 2 and f" {_words_of(note.text)} " in f" {_words_of(footer[1])} "


def _places(
    entries: list[ChangelogEntry], message_of
) -> tuple[dict[int, str], dict[int, ChangelogEntry], list[ChangelogEntry]] | str:
    """Each pull request's place, the entry its title comes from, and the breaking notes with their numbers; or
    why the entries cannot be mapped. A breaking note names its pull request, or is tied to the one listed entry
    with its scope and words (a `feat!:` header's note is its subject), else to the listed commits whose
    `BREAKING CHANGE:` footer holds its text (`message_of(sha)`); that pull request is breaking."""
    listed = [e for e in entries if e.place != "breaking"]
    if any(e.pr is None for e in listed):
        return "an entry that cites no pull request"
    place: dict[int, str] = {}
    title: dict[int, ChangelogEntry] = {}
    for e in listed:
        if place.setdefault(e.pr, e.place) != e.place:
            return "a pull request listed in two sections"
        title.setdefault(e.pr, e)
    notes = []
    for b in (e for e in entries if e.place == "breaking"):
        prs = {b.pr} & set(place) if b.pr is not None else {e.pr for e in listed if _same_change(e, b)}
        from_footer = b.pr is None and not prs
        if from_footer:
            prs = {e.pr for e in listed if _footer_of(b, e, message_of)}
        if len(prs) != 1:
            return "a breaking change the notes tie to no one listed pull request"
        notes.append(_replace(b, pr=prs.pop(), sha="footer" if from_footer else None))
    footers = [b.pr for b in notes if b.sha == "footer"]
    # the tool split a footer at its bullets: a squash merge's list of commits
    if len(footers) != len(set(footers)):
        return "a breaking note spread over several bullets of one commit's footer"
    for b in notes:
        place[b.pr] = "breaking"
    return place, title, notes


def _project(url: str) -> tuple[str, str, str] | str:
    """(project, previous version, version) from the heading's compare link."""
    m = COMPARE.search(url)
    old, new = (TAG.match(m["old"]), TAG.match(m["new"])) if m else (None, None)
    if not old or not new:
        return "the release heading links no compare view of two X.Y.Z tags"
    return new["component"] or m["repo"], old["version"], new["version"]


def task_from_commit(commit) -> dict | str:
    """A task from a commit that adds one release to a CHANGELOG.md: the input is the project, the previous
    version and a title per pull request; the reference the real notes in the Output Format; `expect` the
    release type, the version and each pull request's place. Releases the mapping cannot carry faithfully
    are skipped with the reason (see docs/tasks-from-git.md)."""
    if commit.reverts:
        return "revert"
    changelogs = [f.path for f in commit.files if CHANGELOG_FILE.search(f.path) and f.excluded is None]
    if len(changelogs) != 1:
        return "touches no CHANGELOG.md" if not changelogs else "touches several CHANGELOG.md files"
    lines = _added_release(commit.diff_of(changelogs))
    if isinstance(lines, str):
        return lines
    heading = RELEASE_HEADING.match(lines[0])
    about = _project(heading["url"])
    if isinstance(about, str):
        return about
    project, previous, version = about
    if heading["version"].lstrip("v") != version:
        return "the heading's version is not the compare link's"
    entries = _entries(lines[1:])
    if isinstance(entries, str):
        return entries
    if not entries:
        return "a release with no entries"
    mapped = _places(entries, lambda sha: _message(commit, sha))
    if isinstance(mapped, str):
        return mapped
    place, title, breaking = mapped
    kind = "major" if "breaking" in place.values() else "minor" if "features" in place.values() else "patch"
    if bump(tuple(int(x) for x in previous.split(".")), kind) != version:
        return "the real version is not the skill's bump of the previous one for its sections"
    return {
        "input": _release_input(project, previous, place, title),
        "expect": {
            "release_type": kind,
            "version": version,
            **{p: sorted(k for k, v in place.items() if v == p) for p in PLACES},
        },
        "reference": _release_notes(project, version, kind, entries, place, breaking),
    }


def _message(commit, sha: str) -> str:
    """The message of another commit of the repository (a changelog's link), or "" when git cannot read it."""
    from skill_rl.mining import MiningError, Skip

    try:
        raw = commit.repo.git("cat-file", "commit", sha, cap=1 << 18)
    # not in the clone, ambiguous, too large; git cannot run
    except (Skip, MiningError):
        return ""
    return raw.partition(b"\n\n")[2].decode("utf-8", errors="replace")


def _release_input(project: str, previous: str, place: dict[int, str], title: dict[int, ChangelogEntry]) -> str:
    lines = []
    for pr in sorted(place):
        e = title[pr]
        header = f"{e.type}{f'({e.scope})' if e.scope else ''}{'!' if place[pr] == 'breaking' else ''}"
        lines.append(f"#{pr} {header}: {e.text}")
    return f"Project: {project}\nPrevious release: {previous}\nMerged pull requests:\n" + "\n".join(lines)


def _release_notes(
    project: str,
    version: str,
    kind: str,
    entries: list[ChangelogEntry],
    place: dict[int, str],
    breaking: list[ChangelogEntry],
) -> str:
    """The notes in the Output Format: Breaking changes holds the breaking notes (a breaking pull request's
    listing under the section of its type is dropped), Features and Fixes the other entries of their sections,
    Internal the numbers of the maintainer-only pull requests, and Highlights repeats the first entry of
    Breaking changes, Features and Fixes (the changelog has no highlights of its own)."""
    shown = {"breaking": [b.line() for b in breaking]}
    for p in ("features", "fixes"):
        shown[p] = [e.line() for e in entries if e.place == p and place[e.pr] == p]
    internal = [f"#{k}" for k in sorted(place) if place[k] == "internal"]
    highlights = [shown[p][0] for p in ("breaking", "features", "fixes") if shown[p]]
    parts = [
        f"# {project} {version}",
        f"Release type: {kind}",
        "## Highlights\n" + ("\n".join(highlights) or "None."),
        *(
            f"## {name}\n" + ("\n".join(shown[p]) or "None.")
            for name, p in (("Breaking changes", "breaking"), ("Features", "features"), ("Fixes", "fixes"))
        ),
        "## Internal\n" + (", ".join(internal) or "None."),
    ]
    return "\n\n".join(parts)
