"""Tasks from commits: the skill's `task_from_commit` hook on each commit of the range, secrets and
duplicates refused, clean examples balanced, the split by a hash of the sha, the file written atomically.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import tempfile
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

from skill_rl.files import atomic_write, replace_problem
from skill_rl.keys import redact, secret_in
from skill_rl.mining.git import Commit, MiningError, Repo, Skip
from skill_rl.mining.workspaces import FOLDER as WORKSPACES
from skill_rl.mining.workspaces import place, write_workspace
from skill_rl.records import refuse_inputs, skill_files
from skill_rl.skills import Skill, parse_task_line
from skill_rl.text import display

HOOK = "task_from_commit"


TASK_KEYS = {"input", "expect", "reference", "clean"}


SECRET_FILE = re.compile(
    r"^(\.env.*|.*\.env|\.envrc|.*\.(pem|key|p12|pfx|jks|keystore|crt|cer|der|csr|p8|ppk|gpg|kdbx"
    r"|keytab|tfvars|tfstate(\..*)?)|id_(rsa|dsa|ecdsa|ed25519)(\..*)?|[._]netrc|\.npmrc|\.pypirc"
    r"|\.pgpass|\.htpasswd|\.git-credentials|\.dockercfg|.*secret.*|.*credential.*"
    r"|service[-_]?account.*\.json)$",
    re.I,
)


def split_of(sha: str, val_fraction: float) -> str:
    """'val' for a fixed, hash-chosen share of commits: the same sha always lands in the same split."""
    h = int.from_bytes(hashlib.sha256(f"skill-rl split {sha}".encode()).digest()[:8], "big") / 2**64
    return "val" if h < val_fraction else "train"


def secret_reason(commit: Commit, task: dict) -> str | None:
    """Why the task must not be written: the commit touches a secret-looking file, or a secret pattern
    matches its message or the task's text. The whole commit is skipped, not just the file."""
    if any(SECRET_FILE.match(f.path.rsplit("/", 1)[-1]) for f in commit.files):
        return "touches a secret-looking file (never mined)"
    texts = (task["input"], task.get("reference"), json.dumps(task.get("expect"), default=str), commit.message)
    if any(isinstance(t, str) and secret_in(t) for t in texts):
        return "matches a secret pattern (never mined)"
    return None


@dataclass
class Mined:
    lines: list[str] = field(default_factory=list)
    splits: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    # files left out of kept tasks' diffs, by reason
    left_out: Counter = field(default_factory=Counter)
    # the hook raised
    errors: list[str] = field(default_factory=list)
    commits: int = 0


GRADER_NOTE = "addresses the grader (never mined)"


def grader_reason(commit: Commit, task: dict | None = None) -> str | None:
    """Why a commit must not become an example: its message speaks to a grader, asks for or claims a score
    (`injection.addresses_grader`), or the reference the hook built from it does. A reference is what warm starts
    train on, so text the core did not check never reaches one."""
    from skill_rl.scoring.injection import addresses_grader

    reference = (task or {}).get("reference")
    if addresses_grader(commit.message) or isinstance(reference, str) and addresses_grader(reference):
        return GRADER_NOTE
    return None


def _candidate(commit: Commit, hook, mined: Mined) -> dict | str:
    """The hook's task for `commit`, or the reason it is skipped."""
    if commit.skip:
        return commit.skip
    if reason := grader_reason(commit):
        return reason
    try:
        got = hook(commit)
    except Skip as e:
        return str(e)
    # the skill's own code: count it, show the first few, carry on, exit 1
    except Exception as e:
        if len(mined.errors) < 3:
            mined.errors.append(
                f"{HOOK} raised on commit {commit.sha[:12]}: {type(e).__name__}: {redact(str(e))[:200]}"
            )
        return f"{HOOK} raised an error"
    if isinstance(got, str) and got.strip():
        return got.strip().splitlines()[0][:100]
    if not isinstance(got, dict) or not {"input"} <= set(got) <= TASK_KEYS:
        raise MiningError(
            f"{HOOK} must return a reason string or a dict with 'input' and optionally 'expect' and "
            f"'reference'; got {str(got)[:80]!r} for commit {commit.sha[:12]}"
        )
    try:
        return secret_reason(commit, got) or grader_reason(commit, got) or got
    except Skip as e:
        return str(e)


def _line(task: dict, sha: str, out: Path, expect_model, mined: Mined) -> str | None:
    """The task as a tasks.jsonl line, if the normal task loader accepts it."""
    try:
        line = json.dumps(task, ensure_ascii=False)
        raw = line.encode("utf-8")
    # not JSON, or lone surrogates from a path that is not UTF-8
    except (TypeError, ValueError) as e:
        raise MiningError(f"{HOOK} returned a task that is not JSON text for commit {sha[:12]}: {e}")
    problems: list[str] = []
    if parse_task_line(out, len(mined.lines) + 1, raw, expect_model, problems) is not None:
        return line
    mined.skipped["rejected by the task loader"] += 1
    if len(mined.errors) < 3:
        mined.errors.append(f"commit {sha[:12]}: {problems[0]}")
    return None


def _with_later(commits, window: int):
    """Each commit with `later` set to the (at most `window`) commits that follow it in the walk."""
    queue: deque[Commit] = deque()
    for commit in commits:
        commit.window = window
        queue.append(commit)
        if len(queue) > window:
            first = queue.popleft()
            first.later = tuple(queue)
            yield first
    while queue:
        first = queue.popleft()
        first.later = tuple(queue)
        yield first


def _clean_rank(line: str) -> int:
    return int.from_bytes(hashlib.sha256(f"skill-rl clean {json.loads(line)['id']}".encode()).digest()[:8], "big")


def _balance(mined: Mined, clean: list[bool], ratio: float) -> None:
    """Keep at most `ratio` clean tasks per other task: those whose id hashes lowest."""
    picked = [i for i, c in enumerate(clean) if c]
    keep = round(ratio * (len(clean) - len(picked)))
    drop = set(sorted(picked, key=lambda i: _clean_rank(mined.lines[i]))[keep:])
    for i in sorted(drop):
        mined.splits[json.loads(mined.lines[i])["split"]] -= 1
    if drop:
        mined.skipped["clean example over --clean-ratio"] += len(drop)
    mined.lines = [line for i, line in enumerate(mined.lines) if i not in drop]


def mine(
    repo: Repo,
    shas: list[str],
    skill: Skill,
    out: Path,
    val_fraction: float,
    clean_ratio: float = 1.0,
    window: int = 50,
    workspaces: Path | None = None,
) -> Mined:
    """Every commit through the hook and the core's filters; the accepted tasks as JSONL lines, oldest first.
    With `workspaces` (a folder, named `workspaces`, beside which the tasks are validated), each task gets a git
    workspace there (workspaces.py) and is skipped when it cannot have one."""
    hook, expect_model = getattr(skill.checks, HOOK), getattr(skill.checks, "Expect", None)
    mined, seen, ids, clean = Mined(), set(), set(), []
    checked_as = out if workspaces is None else workspaces.parent / out.name
    for commit in _with_later(repo.commits(shas), window):
        mined.commits += 1
        got = _candidate(commit, hook, mined)
        if isinstance(got, str):
            mined.skipped[got] += 1
            continue
        task_id = f"git-{commit.sha[:12]}" if f"git-{commit.sha[:12]}" not in ids else f"git-{commit.sha}"
        fields = {k: v for k, v in got.items() if v is not None and k != "clean"}
        task = {"id": task_id, **fields, "split": split_of(commit.sha, val_fraction)}
        # with workspaces the change is in the workspace: the same change twice is the duplicate
        keys = {("input", task["input"] if workspaces is None else commit.diff), ("reference", task.get("reference"))}
        keys -= {("reference", None)}
        # an older commit gave the same diff or the same message
        if keys & seen:
            mined.skipped["same input or reference as an older commit"] += 1
            continue
        if workspaces is not None:
            if why := write_workspace(commit, workspaces / task_id):
                mined.skipped[why] += 1
                continue
            task = {**task, "workspace": f"{WORKSPACES}/{task_id}"}
        line = _line(task, commit.sha, checked_as, expect_model, mined)
        if line is None:
            if workspaces is not None:
                shutil.rmtree(workspaces / task_id, ignore_errors=True)
            continue
        seen |= keys
        ids.add(task_id)
        mined.lines.append(line)
        clean.append(got.get("clean") is True)
        mined.splits[task["split"]] += 1
        mined.left_out.update(f.excluded for f in commit.files if f.excluded)
    _balance(mined, clean, clean_ratio)
    return mined


def default_out(skill: Skill, repo: str) -> Path:
    """Beside the skill's tasks; for a skill shipped inside an installed package, in the working
    directory instead (never into site-packages)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", Path(repo).resolve().name.lower()).strip("-.") or "repo"
    # inside skill_rl/
    installed = skill.path.resolve().is_relative_to(Path(__file__).resolve().parent.parent)
    return (Path.cwd() if installed else skill.path) / f"tasks-from-{slug}.jsonl"


def _setup(skill: Skill, args) -> tuple[Repo, list[str], Path]:
    if skill.checks is None or not callable(getattr(skill.checks, HOOK, None)):
        raise MiningError(
            f"skill {skill.name!r} cannot mine tasks: its checks.py defines no {HOOK}(commit) "
            "(see the README, 'Tasks from your history')"
        )
    if not 0 <= args.val_fraction < 1:
        raise MiningError(f"--val-fraction must be at least 0 and below 1, got {args.val_fraction}")
    if (args.limit is not None and args.limit < 1) or args.max_diff_chars < 1:
        raise MiningError("--limit and --max-diff-chars must be at least 1")
    if not args.tasks_from_git.strip() or not args.rev.strip() or "\0" in args.rev:
        raise MiningError("--tasks-from-git and --rev must not be empty")
    out = args.out or default_out(skill, args.tasks_from_git)
    # SKILL.md, checks.py, tasks.jsonl: never an output, --force or not
    refuse_inputs(out, skill_files(skill))
    if out.is_dir() or not out.parent.is_dir():
        raise MiningError(f"--out {out}: must be a file in an existing folder")
    if problem := replace_problem(out):
        raise MiningError(f"--out {out}: {problem}")
    if out.exists() and not args.force:
        raise MiningError(f"{display(out)} exists; pass --force to replace it, or --out another file")
    target = out.parent / WORKSPACES
    if args.workspaces and (target.is_symlink() or target.exists() and not target.is_dir()):
        raise MiningError(f"--workspaces: {display(target)} must be a folder (or not exist yet), not a file or link")
    repo = Repo(args.tasks_from_git, max_chars=args.max_diff_chars)
    return repo, repo.revisions(args.rev, args.limit), out


def run(setup, skill: Skill) -> int:
    """--tasks-from-git with the resolved run (config.Run): mine, write, report. Exit 0 with tasks written, 1 when
    none came out or the hook failed, 2 for bad input."""
    args = setup.settings
    staging = None
    try:
        repo, shas, out = _setup(skill, args)
        if args.workspaces:
            staging = Path(tempfile.mkdtemp(prefix=".skill-rl-workspaces-", dir=out.parent))
            (staging / WORKSPACES).mkdir()
        spaces = staging / WORKSPACES if staging else None
        mined = mine(repo, shas, skill, out, args.val_fraction, args.clean_ratio, args.clean_window, spaces)
        if mined.lines:
            atomic_write(out, "\n".join(mined.lines) + "\n")
            if spaces:
                place(spaces, out.parent / WORKSPACES)
    except MiningError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing written", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: cannot write the tasks or their workspaces: {e.strerror or e}", file=sys.stderr)
        return 2
    finally:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
    print(report(mined, args, out))
    for line in mined.errors:
        print(line, file=sys.stderr)
    return 0 if mined.lines and not mined.errors else 1


def report(mined: Mined, args, out: Path) -> str:
    where = f"{args.tasks_from_git} --rev {args.rev}" + (f" --limit {args.limit}" if args.limit else "")
    n = len(mined.lines)
    head = (
        f"{n} tasks ({mined.splits['train']} train, {mined.splits['val']} val) -> {display(out)}"
        if n
        else "no tasks: nothing written"
    )
    lines = [f"mined {mined.commits} commits of {where}: {head}"]
    if mined.skipped:
        lines.append(f"skipped {sum(mined.skipped.values())} commits:")
        lines += [f"  {count:>6}  {reason}" for reason, count in mined.skipped.most_common()]
    if mined.left_out:
        lines.append(
            "files left out of the kept tasks' diffs: "
            + ", ".join(f"{count} {reason}" for reason, count in mined.left_out.most_common())
        )
    return "\n".join(lines)
