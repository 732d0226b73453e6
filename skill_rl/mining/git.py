"""Reading a repository's history with `git`, as untrusted input: read-only plumbing, a timeout on every
call, no system or global config, no pager, hooks, external diff or textconv, fixed diff options, a minimal
environment, every transport forbidden (a partial clone, which would fetch what it lacks, is refused; a
shallow clone's commits whose parents were cut off are skipped). Each commit object is read and parsed
here (so no message byte can confuse it); binary, generated and lock files are left out of its diff.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from skill_rl.scoring.diffs import Diff, parse_diff
from skill_rl.text import display
from skill_rl.tools.sandbox import GIT_SAFE, GIT_SAFE_ENV

# seconds for any one git call
GIT_TIMEOUT = 60.0


# a commit object (headers and message) larger than this is skipped
MAX_OBJECT_BYTES = 256_000


# a commit changing more files than this is skipped before its diff is read
MAX_FILES = 200


# Every git call: repository config may not change what we read or make git run anything.
# Nor contact anything: every transport is forbidden (GIT_ALLOW_PROTOCOL in git_env, and protocol.allow here), so
# a remote's uploadpack, core.sshCommand or an ext:: URL never runs, even if git wanted an object it lacks.
# what no repository's config may make git run (tools/sandbox.py), and how mining wants git's output read
CONFIG = tuple(
    word
    for option in (
        *GIT_SAFE,
        "core.quotepath=off",
        "color.ui=never",
        "log.showSignature=false",
        "advice.graftFileDeprecated=false",
    )
    for word in ("-c", option)
)


DIFF = (
    "-r",
    "--root",
    "--no-commit-id",
    "--no-renames",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--submodule=short",
    "-O/dev/null",
)


PATCH = (
    "-p",
    "-U3",
    "--inter-hunk-context=0",
    "--diff-algorithm=myers",
    "--indent-heuristic",
    "--src-prefix=a/",
    "--dst-prefix=b/",
)


LOCKFILES = frozenset(
    "package-lock.json npm-shrinkwrap.json yarn.lock pnpm-lock.yaml bun.lock bun.lockb cargo.lock "
    "poetry.lock pipfile.lock uv.lock pdm.lock gemfile.lock composer.lock go.sum mix.lock "
    "pubspec.lock podfile.lock package.resolved flake.lock packages.lock.json gradle.lockfile "
    "deno.lock".split()
)


GENERATED_PATH = re.compile(
    r"(^|/)(node_modules|vendor|third_party|dist|__pycache__|\.yarn)/|\.min\.(js|css)$|\.map$"
    r"|_pb2(_grpc)?\.pyi?$|\.pb\.(go|cc|h)$|\.g\.dart$|\.generated\.|\.pyc$",
    re.I,
)


# in a file's first 5 lines
GENERATED_MARK = re.compile(r"@generated\b|\bDO NOT EDIT\b|\bauto-?generated\b", re.I)


BOT = re.compile(
    r"\[bot\]|\b(dependabot|renovate|greenkeeper|snyk-bot|github-actions|pre-commit-ci|mergify|imgbot"
    r"|semantic-release-bot|release-please|allcontributors|depfu|pyup-bot|whitesource)\b",
    re.I,
)


# NUL, escapes, ...: not text a model should learn to write
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


REVERT = re.compile(r'^Revert "|^This reverts commit [0-9a-f]{7,}', re.M)


class MiningError(Exception):
    """Bad input or setup: one line, exit 2."""


class Skip(Exception):
    """A commit the core's filters rule out; its message is the reason counted in the report."""


class TooLarge(Skip):
    """git wrote more than the caller wanted to read."""


def git_env(repo: Path) -> dict[str, str]:
    """A minimal environment: the caller's PATH and nothing else of it (no GIT_DIR, LD_PRELOAD, HOME, proxies...)."""
    return dict(
        **GIT_SAFE_ENV,
        PATH=os.environ.get("PATH", os.defpath),
        LC_ALL="C",
        PAGER="cat",
        GIT_ATTR_NOSYSTEM="1",
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_GRAFT_FILE=os.devnull,
        GIT_OPTIONAL_LOCKS="0",
        GIT_LITERAL_PATHSPECS="1",
        # no lazy fetch where git knows the switch; no transport at all
        GIT_NO_LAZY_FETCH="1",
        GIT_ALLOW_PROTOCOL="",
        # REPO itself, not a repository somewhere above it
        GIT_CEILING_DIRECTORIES=str(repo.parent),
    )


class Repo:
    """Read-only access to one repository through git plumbing."""

    def __init__(self, path: str | Path, max_chars: int = 12_000, timeout: float = GIT_TIMEOUT):
        self.path, self.max_chars, self.timeout = Path(path).resolve(), max_chars, timeout
        if not self.path.is_dir():
            raise MiningError(f"{path}: not a directory")
        self.env = git_env(self.path)
        try:
            self.git("rev-parse", "--git-dir")
        except Skip as e:
            raise MiningError(f"{path}: not a git repository ({e})")
        refuse_remote_objects(self)
        self.shallow = _shallow(self)

    def git(self, *args: str, cap: int = 1 << 28) -> bytes:
        """git's stdout; Skip when it fails, times out or writes more than `cap` bytes."""
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(
                    ["git", "--no-pager", "-C", str(self.path), *CONFIG, *args],
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=err,
                )
            except OSError as e:
                raise MiningError(f"cannot run git: {e.strerror}")
            killed = threading.Event()
            timer = threading.Timer(self.timeout, lambda: (killed.set(), proc.kill()))
            timer.start()
            try:
                out = proc.stdout.read(cap + 1)
                if len(out) > cap:
                    proc.kill()
            finally:
                timer.cancel()
                proc.stdout.close()
                proc.wait()
            if killed.is_set():
                raise Skip(f"git {args[0]} took over {self.timeout:g} s")
            if len(out) > cap:
                raise TooLarge(f"git {args[0]} wrote over {cap:,} bytes")
            if proc.returncode:
                err.seek(0)
                first = err.read(2000).decode(errors="replace").strip().splitlines()
                raise Skip(first[0] if first else f"git {args[0]} exited {proc.returncode}")
        return out

    def revisions(self, rev: str, limit: int | None) -> list[str]:
        """The commits of `rev`, oldest first; with `limit`, only the newest `limit` of them."""
        count = [f"--max-count={limit}"] if limit else []
        try:
            out = self.git("rev-list", "--reverse", *count, "--end-of-options", rev, "--")
        except Skip as e:
            raise MiningError(f"{display(self.path)}: cannot walk --rev {rev!r}: {e}")
        shas = out.decode("ascii", errors="replace").split()
        if not shas:
            raise MiningError(f"{display(self.path)}: --rev {rev!r} holds no commits")
        return shas

    def commits(self, shas: list[str]):
        """A Commit per sha, read with `git cat-file --batch` 500 at a time."""
        for i in range(0, len(shas), 500):
            chunk = shas[i : i + 500]
            proc = subprocess.Popen(
                ["git", "--no-pager", "-C", str(self.path), *CONFIG, "cat-file", "--batch"],
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            # at most 33 kB: fits the pipe
            proc.stdin.write("".join(s + "\n" for s in chunk).encode())
            proc.stdin.close()
            timer = threading.Timer(self.timeout * 10, proc.kill)
            timer.start()
            try:
                for sha in chunk:
                    yield Commit.parse(self, sha, _read_object(proc.stdout, sha))
            finally:
                timer.cancel()
                proc.kill()
                proc.wait()


def refuse_remote_objects(repo: Repo) -> None:
    """A partial clone (`git clone --filter`) lacks objects that git fetches from its promisor remote when asked
    for them, running whatever that remote's config says (uploadpack, core.sshCommand, an ext:: URL): refused."""
    try:
        found = repo.git("config", "-z", "--get-regexp", r"^(extensions\.partialclone|remote\..*\.promisor)$")
    # exit 1: no such key
    except Skip:
        found = b""
    keys = [entry.split(b"\n", 1) for entry in found.split(b"\0") if entry]
    promisor = [
        k.decode(errors="replace")
        for k, *v in keys
        if k.startswith(b"extensions.") or (v or [b"true"])[0].strip().lower() not in (b"false", b"no", b"off", b"0")
    ]
    # (`.promisor` packs alone, with no promisor remote, make git fetch nothing)
    if promisor:
        raise MiningError(
            f"{display(repo.path)}: a partial clone ({', '.join(promisor)}): git would fetch "
            "its missing objects from the remote, running that remote's configured commands; mine a full clone"
        )


def _shallow(repo: Repo) -> frozenset[str]:
    """The commits of a shallow clone whose parents it lacks (git would diff them against an empty tree)."""
    try:
        if repo.git("rev-parse", "--is-shallow-repository").strip() != b"true":
            return frozenset()
        path = Path(repo.git("rev-parse", "--git-path", "shallow").decode(errors="surrogateescape").strip())
        path = path if path.is_absolute() else repo.path / path
        return frozenset(path.read_text(errors="replace").split())
    except (Skip, OSError) as e:
        raise MiningError(
            f"{display(repo.path)}: cannot tell which commits a shallow clone cut off "
            f"({getattr(e, 'strerror', None) or e})"
        )


def _read_object(out, sha: str) -> bytes | None:
    """One object from `cat-file --batch`: its bytes, or None when it is too large to be a commit we mine."""
    header = out.readline(200).split()
    if len(header) != 3 or header[0].decode(errors="replace") != sha or header[1] != b"commit":
        raise MiningError(
            f"git cat-file gave no commit for {sha} (killed after a timeout, or the repository is damaged)"
        )
    # the object and a newline
    left = int(header[2]) + 1
    if left > MAX_OBJECT_BYTES:
        while left > 0 and (chunk := out.read(min(left, 1 << 20))):
            left -= len(chunk)
        return None
    data = out.read(left)
    if len(data) != left:
        raise MiningError(f"git cat-file stopped in the middle of {sha} (killed after a timeout?)")
    return data[:-1]


@dataclass
class FileChange:
    # the new path (the old one for a deletion); renames show as a deletion and an addition
    path: str
    # A added, D deleted, M modified, T type changed
    status: str
    # lines; None for a binary file
    added: int | None
    removed: int | None
    # why `Commit.diff` leaves it out: binary, lockfile, generated, submodule
    excluded: str | None = None


@dataclass
class Commit:
    """One commit, as `task_from_commit` receives it. `files`, `diff` and `parsed` (`diff` read by
    skill_rl.scoring.diffs.parse_diff) run git on first use, so a hook that rejects a commit by its message
    costs no diff. Reading `diff` raises Skip, which the core counts, when the diff is over the size
    bound, not UTF-8, empty, or only binary, generated or lock files."""

    repo: Repo = field(repr=False)
    sha: str
    parents: tuple[str, ...]
    # "Name <email>"
    author: str
    message: str
    # a reason the core skips it before the hook sees it
    skip: str | None = None
    # the next commits of the walk, newer, at most `window`
    later: tuple[Commit, ...] = field(default=(), repr=False)
    # --clean-window: fewer `later` commits than this means the walk ended
    window: int = 0
    # diff_of's answers
    _diffs: dict = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, repo: Repo, sha: str, raw: bytes | None) -> Commit:
        if raw is None:
            return cls(repo, sha, (), "", "", skip=f"commit object over {MAX_OBJECT_BYTES:,} bytes")
        head, _, body = raw.partition(b"\n\n")
        headers = [line.split(b" ", 1) for line in head.split(b"\n") if line and not line.startswith(b" ")]
        parents = tuple(v.decode("ascii", errors="replace") for k, v in headers if k == b"parent")
        author = next((v for k, v in headers if k == b"author"), b"").decode(errors="replace").rsplit(">", 1)[0] + ">"
        encoding = next((v for k, v in headers if k == b"encoding"), b"UTF-8").decode("ascii", errors="replace")
        try:
            message = body.decode(encoding)
        except (LookupError, UnicodeDecodeError):
            return cls(repo, sha, parents, author, "", skip=f"message is not valid {encoding}")
        if CONTROL.search(message):
            return cls(repo, sha, parents, author, "", skip="message holds control characters")
        if sha in repo.shallow:
            return cls(repo, sha, parents, author, message, skip="shallow clone: its parent is not in the clone")
        return cls(repo, sha, parents, author, message, skip="merge" if len(parents) > 1 else None)

    @property
    def bot(self) -> bool:
        """The author is a bot (dependabot, renovate, a `[bot]` account, ...)."""
        return bool(BOT.search(self.author))

    @property
    def reverts(self) -> bool:
        """The message is git's revert message."""
        return bool(REVERT.search(self.message))

    @cached_property
    def files(self) -> tuple[FileChange, ...]:
        """Every file the commit changes, each marked with why `diff` leaves it out, if it does."""
        return _files(self.repo.git("diff-tree", *DIFF, "--raw", "--numstat", "-z", self.sha, cap=1 << 24))

    @cached_property
    def diff(self) -> str:
        """`git diff` of the commit over the files not excluded, at most --max-diff-chars characters."""
        return _diff(self, [f for f in self.files if f.excluded is None])

    @cached_property
    def parsed(self) -> Diff:
        return parse_diff(self.diff)

    def diff_of(self, paths) -> str:
        """`diff`, for only these of `files` (the same bounds and Skip reasons; the last few asked are kept)."""
        wanted = tuple(sorted(set(paths)))
        if wanted not in self._diffs:
            try:
                self._diffs[wanted] = _diff(self, [f for f in self.files if f.excluded is None and f.path in wanted])
            except Skip as e:
                self._diffs[wanted] = e
            while len(self._diffs) > 4:
                self._diffs.pop(next(iter(self._diffs)))
        got = self._diffs[wanted]
        if isinstance(got, Skip):
            raise got
        return got


def _exclusion(path: str, raw_mode: str, binary: bool) -> str | None:
    name = path.rsplit("/", 1)[-1].lower()
    if raw_mode == "160000":
        return "submodule"
    if name in LOCKFILES or name.endswith((".lock", ".lockb")):
        return "lockfile"
    if GENERATED_PATH.search(path):
        return "generated"
    return "binary" if binary else None


def _files(out: bytes) -> tuple[FileChange, ...]:
    """Parse `diff-tree --raw --numstat -z`: raw records (`:modes shas status` NUL path), then `added TAB removed TAB path`."""
    fields, raw, files = out.split(b"\0"), {}, []
    i = 0
    while i < len(fields):
        f = fields[i]
        if f.startswith(b":"):
            meta = f[1:].split()
            raw[fields[i + 1]] = (meta[1] if meta[1] != b"000000" else meta[0]).decode(), meta[4][:1].decode()
            i += 2
            continue
        if f:
            added, removed, path = f.split(b"\t", 2)
            mode, status = raw.get(path, ("100644", "M"))
            binary = added == b"-"
            name = path.decode(errors="surrogateescape")
            files.append(
                FileChange(
                    name,
                    status,
                    None if binary else int(added),
                    None if binary else int(removed),
                    _exclusion(name, mode, binary),
                )
            )
        i += 1
    return tuple(files)


def _diff(commit: Commit, kept: list[FileChange]) -> str:
    limit = commit.repo.max_chars
    if not commit.files:
        raise Skip("no changes")
    if not kept:
        raise Skip("only binary, generated or lock files")
    if len(kept) > MAX_FILES or sum(f.added + f.removed for f in kept) * 2 > limit:
        raise Skip(f"diff over {limit:,} characters")
    try:
        data = commit.repo.git("diff-tree", *DIFF, *PATCH, commit.sha, "--", *(f.path for f in kept), cap=4 * limit)
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Skip("diff is not valid UTF-8")
    except TooLarge:
        raise Skip(f"diff over {limit:,} characters")
    if len(text) > limit:
        raise Skip(f"diff over {limit:,} characters")
    sections = re.split(r"(?m)^(?=diff --git )", text)[1:]
    if len(sections) != len(kept):
        raise Skip("git printed a diff this reader does not follow")
    for f, section in zip(kept, sections):
        if _generated_header(section):
            f.excluded = "generated"
    text = "".join(s for f, s in zip(kept, sections) if f.excluded is None)
    if not text:
        raise Skip("only binary, generated or lock files")
    return text


def _generated_header(section: str) -> bool:
    """The file's first five lines, as far as the diff shows them, carry a 'generated, do not edit' mark."""
    m = re.search(r"(?m)^@@ -\S+ \+(\d+)(?:,\d+)? @@.*\n", section)
    if not m or int(m[1]) > 5:
        return False
    lines = [ln for ln in section[m.end() :].split("\n") if ln[:1] in (" ", "+")][: 6 - int(m[1])]
    return any(GENERATED_MARK.search(ln) for ln in lines)
