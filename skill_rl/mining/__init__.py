"""`--tasks-from-git REPO`: a skill's tasks.jsonl mined from a repository's history.

    python train_skill.py --skill git-commit --tasks-from-git ../repo [--rev v1.0..main] [--limit 500]

The skill decides what a commit is worth: its checks.py defines

    def task_from_commit(commit: skill_rl.mining.Commit) -> dict | str

returning a task (`input`, and optionally `expect` and `reference`) or the reason to skip the commit.
A task marked `"clean": true` is a clean example (nothing to find, e.g. a review's approve task): at most
--clean-ratio of them per other task are kept, chosen by a hash of the sha. A hook that asks what later
commits did to a change reads `commit.later`, the next --clean-window commits of the walk.
This package owns the rest (git.py reads the history, miner.py makes the tasks). It walks the range with `git` (read-only plumbing, a timeout on every
call, no system or global config, no pager, hooks, external diff or textconv, fixed diff options, a
minimal environment, every transport forbidden: a partial clone, which would fetch what it lacks, is
refused, and a shallow clone's commits whose parents were cut off are skipped),
reads each commit object itself (so no message byte can confuse it), skips merges, leaves binary,
generated and lock files out of the diff, bounds its size, never mines a commit that touches a
secret-looking file or in whose task or message `keys.secret_in` finds a secret, drops a task whose
input or reference an older task already has, names tasks `git-<sha12>`, splits by a hash of the sha (adding commits
never moves old ones; raising --val-fraction only moves train tasks to val), validates every line
with the normal task loader, writes the file atomically and prints a count per reason.

With `--workspaces`, each task also gets a git workspace in `workspaces/<id>/` beside the file (workspaces.py: the
touched files at the parent, the earlier commits' messages, the change staged), for a skill with tools.
"""

from skill_rl.mining.git import Commit, FileChange, MiningError, Repo, Skip
from skill_rl.mining.miner import Mined, default_out, mine, report, run, secret_reason, split_of

__all__ = [
    "Commit",
    "FileChange",
    "Mined",
    "MiningError",
    "Repo",
    "Skip",
    "default_out",
    "mine",
    "report",
    "run",
    "secret_reason",
    "split_of",
]
