"""A small unified-diff reader for skills whose input is a `git diff` (review, commit messages, ...), and the
vocabulary of a diff, for checks that ask whether a text is about this diff at all ("grounding")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
INDEX = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$")


@dataclass
class FileDiff:
    # the new path (the old one for a deleted file)
    path: str
    old_path: str | None = None
    # new-file line numbers of '+' lines
    added: set[int] = field(default_factory=set)
    # new-file line numbers shown: '+' and context
    visible: set[int] = field(default_factory=set)
    removed: int = 0


@dataclass(frozen=True)
class Diff:
    files: dict[str, FileDiff]

    @property
    def changed_lines(self) -> int:
        return sum(len(f.added) + f.removed for f in self.files.values())

    def has_lines(self, path: str, start: int, end: int) -> bool:
        """True when every line start..end of `path` is shown in the diff (added or context)."""
        f = self.files.get(path.removeprefix("b/").removeprefix("./"))
        return f is not None and start <= end and all(n in f.visible for n in range(start, end + 1))


def _strip(path: str) -> str:
    path = path.split("\t")[0].strip()
    return path[2:] if path[:2] in ("a/", "b/") else path


@lru_cache(maxsize=4096)
def parse_diff(text: str) -> Diff:
    """Parse `git diff` output; malformed lines are skipped rather than raised on."""
    files: dict[str, FileDiff] = {}
    cur: FileDiff | None = None
    old_path = None
    new_line = old_left = new_left = 0
    for line in text.split("\n"):
        # inside a hunk
        if old_left > 0 or new_left > 0:
            tag = line[:1]
            if tag == "+":
                cur.added.add(new_line), cur.visible.add(new_line)
                new_line, new_left = new_line + 1, new_left - 1
                continue
            if tag == "-":
                cur.removed += 1
                old_left -= 1
                continue
            if tag == " " or line == "":
                cur.visible.add(new_line)
                new_line, old_left, new_left = new_line + 1, old_left - 1, new_left - 1
                continue
            # "\ No newline at end of file"
            if tag == "\\":
                continue
            # a malformed hunk ends here
            old_left = new_left = 0
        if line.startswith("--- "):
            old_path = _strip(line[4:])
        elif line.startswith("+++ "):
            new = _strip(line[4:])
            path = old_path if new == "/dev/null" else new
            cur = files.setdefault(path, FileDiff(path, old_path if old_path != "/dev/null" else None))
        elif cur is not None and (m := HUNK.match(line)):
            old_left = int(m[2]) if m[2] is not None else 1
            new_line = int(m[3])
            new_left = int(m[4]) if m[4] is not None else 1
    return Diff(files)


def _swap_side(path: str, prefix: str) -> str:
    """`b/x` as the other side's `a/x` (quoted paths too); /dev/null stays."""
    quote = '"' if path.startswith('"') else ""
    bare = path[len(quote) :]
    return path if path == "/dev/null" else quote + prefix + (bare[2:] if bare[:2] in ("a/", "b/") else bare)


def _reverse_header(line: str, pending: dict) -> list[str]:
    """One file-header line of a patch, reversed; '---' and 'old mode' wait for the line they pair with."""
    if line.startswith("--- "):
        pending["---"] = line[4:]
        return []
    if line.startswith("+++ ") and "---" in pending:
        return [f"--- {_swap_side(line[4:], 'a/')}", f"+++ {_swap_side(pending.pop('---'), 'b/')}"]
    if m := INDEX.match(line):
        return [f"index {m[2]}..{m[1]}{m[3]}"]
    if line.startswith(("new file mode ", "deleted file mode ")):
        return ["deleted" + line[3:] if line.startswith("new") else "new" + line[7:]]
    if line.startswith("old mode "):
        pending["old mode"] = line[9:]
        return []
    if line.startswith("new mode ") and "old mode" in pending:
        return [f"old mode {line[9:]}", f"new mode {pending.pop('old mode')}"]
    return [line]


def reverse_diff(text: str) -> str:
    """The patch that undoes `text`, a git patch without renames: '+' and '-' lines (a run of changes still
    lists its removals first), hunk ranges, blob ids, modes and the /dev/null side all swap."""
    out: list[str] = []
    minus: list[str] = []
    plus: list[str] = []
    last, pending, in_hunk = None, {}, False
    for line in text.split("\n"):
        tag = line[:1]
        if in_hunk and tag in ("+", "-", "\\"):
            # "\ No newline at end of file" stays after the line it describes
            if tag == "\\":
                (last if last is not None else out).append(line)
            else:
                last = minus if tag == "+" else plus
                last.append(("-" if tag == "+" else "+") + line[1:])
            continue
        out += minus + plus
        minus, plus, last = [], [], None
        if m := HUNK.match(line):
            in_hunk = True
            old, new = m[1] + (f",{m[2]}" if m[2] is not None else ""), m[3] + (f",{m[4]}" if m[4] is not None else "")
            out.append(f"@@ -{new} +{old} @@{line[m.end() :]}")
        elif in_hunk and not line.startswith("diff --git "):
            out.append(line)
        else:
            in_hunk = False
            out += _reverse_header(line, pending)
    return "\n".join(out + minus + plus)


# ------------------------------------------------------------------ vocabulary (grounding)

# a version like 3.12, or a name (split at _ - . /)
WORD = re.compile(r"\d+(?:\.\d+)*|[A-Za-z][A-Za-z0-9]*")
# camelCase and PascalCase parts
PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
# words that name nothing in a diff: grammar, generic verbs and nouns of change
FILLER = frozenset(
    "a an the to of in on for with and or from by as at into onto over under when before after instead not no "
    "its their all each every only per than that this these those via so be is are we our out up off then it "
    "one two three four five six seven eight nine ten "
    "add adds added adding remove removes removed drop dropped use uses using used make makes made support "
    "supports handle handles allow allows set sets move moves rename replace bump upgrade refactor apply clean "
    "tidy simplify adjust ensure avoid prevent keep let file files project repo repository codebase thing things "
    "more less better proper properly logic handling feature features functionality behaviour behavior "
    "implementation module modules problem problems case cases way ways part parts".split()
)
# Words engineers use for a kind of change rather than for anything the diff spells out.
KIND_WORDS = {
    "docs": "doc docs documentation document comment comments docstring readme guide tsdoc jsdoc javadoc rustdoc "
    "link links typo typos wording words spelling grammar",
    "tests": "test tests testing coverage unit spec fixture fixtures assert assertion",
    "ci": "ci pipeline workflow workflows job jobs actions runner",
    "deps": "deps dependency dependencies version versions package packages library libraries toolchain lockfile pin",
    "docker": "docker image images container containers base",
    "format": "format formatting formatter whitespace indent indentation reindent spaces tabs lint wrap wrapping reformat",
}
DEPS_FILES = frozenset(
    "package.json package-lock.json yarn.lock pnpm-lock.yaml cargo.toml cargo.lock go.mod go.sum pyproject.toml "
    "pipfile pipfile.lock poetry.lock uv.lock pom.xml build.gradle build.gradle.kts gemfile gemfile.lock "
    "composer.json composer.lock .tool-versions".split()
)
CI_PATHS = (".github/workflows/", ".gitlab-ci", ".circleci/", "jenkinsfile", "azure-pipelines", ".travis")
COMMENT = re.compile(r"^[+-][ \t]*(?:#|//|/\*|\*|<!--|\"\"\"|--)")
NOT_FORMAT = str.maketrans("", "", " \t'\"`,;()[]{}")
MARKUP = (
    "diff --git ",
    "index ",
    "--- ",
    "+++ ",
    "new file mode",
    "deleted file mode",
    "old mode",
    "new mode",
    "similarity index",
    "rename from",
    "rename to",
    "copy from",
    "copy to",
    "Binary files",
)


@lru_cache(maxsize=65536)
def key(word: str) -> str:
    """Words compare by their first five letters once an ending goes: "caching" ~ "cache", "signatures" ~ "signature"."""
    w = word.lower()
    if w[0].isdigit():
        return w
    # not the "ed" of "speed", "need": their plurals keep it
    for ending in ("ing", "ed", "es", "s"):
        if (
            w.endswith(ending)
            and len(w) - len(ending) >= (2 if ending == "ed" else 3)
            and not w.endswith(("ss", "eed"))
        ):
            w = w[: -len(ending)]
            break
    return (w.rstrip("e") or w)[:5]


@lru_cache(maxsize=65536)
def keys(token: str) -> frozenset[str]:
    """A token's keys: itself, its camelCase parts of 3+ letters; a version's major.minor and major.minor.patch
    prefixes (3.12.1.4 -> 3.12, 3.12.1)."""
    if token[0].isdigit():
        parts = token.split(".")
        return frozenset(
            {token, token.lstrip("0") or "0", *(".".join(parts[:i]) for i in range(2, min(len(parts), 4)))}
        )
    return frozenset({key(token), *(key(p) for p in PART.findall(token) if len(p) >= 3)})


def _path_kinds(path: str) -> set[str]:
    """The kinds of change a file's path says (string tests only: paths come from untrusted input)."""
    *dirs, name = path.lower().split("/")
    stem, *exts = name.split(".")
    kinds = set()
    if (
        exts
        and exts[-1] in ("md", "rst", "adoc")
        or {"doc", "docs"} & set(dirs)
        or exts[-1:] == ["txt"]
        and not stem.startswith("requirements")
    ):
        kinds.add("docs")
    if (
        {"test", "tests", "spec", "__tests__", "testdata"} & set(dirs)
        or stem.startswith("test_")
        or stem.endswith(("_test", "-test", "test", "tests"))
        or {"test", "spec"} & set(exts[:-1])
    ):
        kinds.add("tests")
    if path.lower().startswith(CI_PATHS):
        kinds.add("ci")
    if name in DEPS_FILES or stem.startswith("requirements") and exts[-1:] == ["txt"]:
        kinds.add("deps")
    if "dockerfile" in name or name.startswith(("docker-compose", "containerfile")):
        kinds.add("docker")
    return kinds


def path_kinds(path: str) -> frozenset[str]:
    """The kinds of change a changed file's path says: docs, tests, ci, deps, docker."""
    return frozenset(_path_kinds(path))


def kinds(diff: str) -> set[str]:
    """The kinds of change a diff is: docs, tests, ci, deps, docker (by its paths and comment lines), format
    (the removed and added lines hold the same characters, rearranged)."""
    changed = [ln for ln in diff.split("\n") if ln[:1] in "+-" and not ln.startswith(("+++ ", "--- "))]
    out = set().union(*map(_path_kinds, parse_diff(diff).files))
    if any(COMMENT.match(line) for line in changed if line[:1] == "+"):
        out.add("docs")
    removed = sorted("".join(line[1:] for line in changed if line[:1] == "-").translate(NOT_FORMAT))
    added = sorted("".join(line[1:] for line in changed if line[:1] == "+").translate(NOT_FORMAT))
    if removed and removed == added:
        out.add("format")
    return out


@lru_cache(maxsize=1024)
def vocabulary(diff: str) -> frozenset[str]:
    """Keys of every name, word and version in the diff (paths, changed and context lines, hunk headers), but not
    of git's own markup ("diff --git", "index 3f2a...", "new file mode"), plus the words for the kinds of change
    it is."""
    out: set[str] = set()
    text = "\n".join([*parse_diff(diff).files, *(line for line in diff.split("\n") if not line.startswith(MARKUP))])
    for token in WORD.findall(text):
        if not (token.isdigit() and len(token) < 2):
            out |= keys(token)
            # whole, for compound names ("LruCache" must be there as one name)
            out.add(token.lower())
    for kind in kinds(diff):
        out |= {key(w) for w in KIND_WORDS[kind].split()}
    return frozenset(out)


@lru_cache(maxsize=8192)
def specific_words(text: str, filler: frozenset[str] = FILLER) -> tuple[str, ...]:
    """The distinct words of `text` that could name something: not filler, at least three letters (two digits)."""
    words = {
        w.lower(): w
        for w in WORD.findall(text)
        if w.lower() not in filler and (len(w) > 2 or w[0].isdigit() and len(w) > 1)
    }
    return tuple(words.values())


CAMEL = re.compile(r"[a-z][A-Z]")


@lru_cache(maxsize=65536)
def found(word: str, vocab: frozenset[str]) -> bool:
    """Whether the diff whose vocabulary is `vocab` names `word`: a compound name ("LruCache", "GitHub") as a
    whole, in any case; another word by its key, also among the parts of the diff's compound names."""
    if CAMEL.search(word):
        return word.lower() in vocab
    return not vocab.isdisjoint(keys(word))


RAW = re.compile(r"`[^`\n]{1,200}`|[^\s`]+")
NAMEISH = re.compile(r"[a-z][A-Z]|_|\w\.\w|[A-Za-z]\d|\d[A-Za-z]")


@lru_cache(maxsize=8192)
def names(text: str) -> tuple[str, ...]:
    """The code names in a text: `code spans`, and words that can only be identifiers, paths or versions
    (camelCase, snake_case, dotted, letters with digits)."""
    out = []
    for token in RAW.findall(text):
        bare = token.strip("`'\"()[]{},;:!?")
        if token.startswith("`") or NAMEISH.search(bare):
            out.append(bare)
    return tuple(out)


def invented(text: str, vocab: frozenset[str]) -> list[str]:
    """The code names of `text` the diff does not hold: fewer than half of their words are found in it."""
    out = []
    for name in names(text):
        words = [w for w in WORD.findall(name) if len(w) > 2 or w[0].isdigit()]
        if words and 2 * sum(found(w, vocab) for w in words) < len(words):
            out.append(name)
    return out


# ------------------------------------------------------------------ specificity (grounding that presence cannot buy)
# A word "found in the diff" is not yet a word about this diff: `return`, `error`, `name` or `test` are on the
# changed lines of most diffs, and a file's name is in its path whatever the change did. A word earns grounding
# by how specific it is to this diff's *changed lines*, contrasted with a background of words that fit nearly
# every diff (language keywords and the generic nouns of code, written here; not tuned on any task set).

COMMON = frozenset(
    key(w)
    for w in (
        # keywords and literals of the common languages
        "if else elif for while return import from export default const let var def class function func fn "
        "public private protected static final void new delete try catch except finally throw throws raise "
        "async await yield true false null none nil undefined self this super type interface struct enum impl "
        "package module require include extends implements switch break continue case pub mut use mod match "
        "int str string bool boolean float double char byte object array dict "
        # the nouns of any code (the skill's own common words come from its tasks: `background`)
        "error errors value values name names data".split()
    )
)


@lru_cache(maxsize=1024)
def content_vocabulary(diff: str) -> frozenset[str]:
    """Keys of the words the diff's lines hold (changed and context lines, hunk headers), not its paths, git's
    markup or the kinds of change: what the code and text of the diff say."""
    out: set[str] = set()
    for line in diff.split("\n"):
        if line.startswith(MARKUP):
            continue
        for token in WORD.findall(line):
            if not (token.isdigit() and len(token) < 2):
                out |= keys(token)
                out.add(token.lower())
    return frozenset(out)


@lru_cache(maxsize=1024)
def file_stems(diff: str) -> frozenset[str]:
    """Lower-cased words of the changed files' names, without their directories (`src/cli.js` -> cli, js)."""
    return frozenset(w.lower() for p in parse_diff(diff).files for w in WORD.findall(p.rsplit("/", 1)[-1]))


# a word on the changed lines of a fifth or more of the skill's diffs fits them all
COMMON_SHARE = 0.2
# fewer diffs than this: too few to tell a common word from a specific one
MIN_BACKGROUND = 10


def background(inputs: tuple[str, ...]) -> frozenset[str]:
    """The words (keys) in the lines or paths of COMMON_SHARE or more of these diffs: what this skill's tasks all
    say, contrasted with which a word says nothing about one of them. Empty for fewer than MIN_BACKGROUND diffs."""
    if len(inputs) < MIN_BACKGROUND:
        return frozenset()
    counts: dict[str, int] = {}
    for diff in set(inputs):
        for k in content_vocabulary(diff) | path_words(diff):
            counts[k] = counts.get(k, 0) + 1
    return frozenset(k for k, n in counts.items() if n >= COMMON_SHARE * len(set(inputs)))


def current_background() -> frozenset[str]:
    """`background` of the skill's tasks being scored (empty outside scoring, or for a small skill)."""
    # the skill's tasks while scoring (rubric.scoring)
    from skill_rl.scoring.checks import task_inputs

    inputs = task_inputs()
    if not inputs:
        return frozenset()
    # by identity: hashing every task's input per check call would be slow
    entry = _BACKGROUNDS.get(id(inputs))
    if entry is None or entry[0] is not inputs:
        if len(_BACKGROUNDS) >= 8:
            _BACKGROUNDS.pop(next(iter(_BACKGROUNDS)))
        entry = _BACKGROUNDS[id(inputs)] = (inputs, background(inputs))
    return entry[1]


_BACKGROUNDS: dict[int, tuple] = {}


def common(word: str, contrast: frozenset[str] = frozenset()) -> bool:
    """A word that fits nearly every diff: in COMMON, or on the changed lines of a fifth or more of the skill's
    diffs (`contrast`, from `background`), by its key; a compound name (`LruCache`) only by itself."""
    if CAMEL.search(word):
        return word.lower() in contrast
    # a small number is on most diffs' lines
    if word.isdigit() and len(word) <= 2:
        return True
    return (
        key(word) in COMMON
        or word.lower() in COMMON
        or (bool(contrast) and (key(word) in contrast or word.lower() in contrast))
    )


def specificity(word: str, diff: str, contrast: frozenset[str] | None = None) -> float:
    """How much `word` says about this diff: 1 for a word of its lines or paths that the skill's other diffs do not
    all have, or a word for a narrow kind of change the whole diff is (formatting only, Docker only: `reindent`,
    `image`); 0.5 for a common word (`error`, `value`, or in a repository of release tools `release`), or a word
    for a broad kind of change (`tests`, `docs`, `workflow`, `dependencies`: they fit a third of some
    repositories' commits); 0 when not found. `contrast`: the background (`background`; default: the current
    one). A subject made of file names alone, or a list of names, is held down by its checks (is_list)."""
    return _specificity(word, diff, current_background() if contrast is None else contrast)


NARROW_KINDS = ("format", "docker")


@lru_cache(maxsize=65536)
def _specificity(word: str, diff: str, contrast: frozenset[str]) -> float:
    if found(word, content_vocabulary(diff)) or found(word, path_words(diff)):
        return 0.5 if common(word, contrast) else 1.0
    if not found(word, vocabulary(diff)):
        return 0.0
    for kind, words in _kind_words(diff).items():
        if found(word, words) and kind in NARROW_KINDS and _whole(diff, kind):
            return 1.0
    return 0.5


@lru_cache(maxsize=1024)
def path_words(diff: str) -> frozenset[str]:
    """Lower-cased words of the changed files' paths, and their keys."""
    out: set[str] = set()
    for p in parse_diff(diff).files:
        for w in WORD.findall(p):
            out.add(w.lower())
            out |= keys(w)
    return frozenset(out)


def _whole(diff: str, kind: str) -> bool:
    """The whole diff is of this kind: every changed file (or, for formatting, every changed line)."""
    return kind == "format" or all(kind in _path_kinds(p) for p in parse_diff(diff).files)


@lru_cache(maxsize=1024)
def _kind_words(diff: str) -> dict[str, frozenset[str]]:
    return {kind: frozenset(key(w) for w in KIND_WORDS[kind].split()) for kind in kinds(diff)}


LIST_SPLIT = re.compile(r",\s*|\s+and\s+|\s*[;+&|]\s*")


def is_list(text: str) -> bool:
    """Whether `text` lists names rather than saying something: split at commas, 'and', ';', '+', '&', '|'
    (a leading verb dropped): two or more items of one word each, or three or more of at most two words
    (`update foo.ts, bar.ts and baz`, `fooBar and bazQux`; not `add retries to the client`)."""
    items = [i.strip() for i in LIST_SPLIT.split(text.strip()) if i.strip()]
    if len(items) < 2:
        return False
    first = items[0].split()
    # "update a, b": the verb is not an item
    items[0] = " ".join(first[1:]) if len(first) > 1 else items[0]
    # "x and more": a sentence, not names
    if any(w in FILLER for i in items for w in i.lower().split()):
        return False
    return all(len(i.split()) == 1 for i in items) or len(items) >= 3 and all(len(i.split()) <= 2 for i in items)
