"""The git-commit-agent skill's own tool: `commit`, the staged change committed with a message given as an argument.

The message is the call's JSON string, handed to `git commit -F -` on its standard input: no shell quoting for the
policy to get wrong (the `bash` tool's `git commit -m '...'` asks a small model to nest a message in shell quotes
inside a JSON string), and no flag the policy could add (`--amend`, `--allow-empty`, `-a`, a path). It runs like
every tool, in the sandbox (docs/tools.md), with git's hooks and configured programs off.
"""

import subprocess
from pathlib import Path

from skill_rl import tool
from skill_rl.tools.sandbox import environment, git_argv


@tool
def commit(workspace: Path, message: str) -> str:
    """Commit what is staged, once, with this message: its first line the header, then a blank line and the body.
    Returns what git says, or fails when nothing is staged or the message is empty."""
    run = subprocess.run(
        git_argv(["git", "commit", "--no-verify", "-F", "-"]),
        cwd=workspace,
        env=environment(workspace),
        input=message.encode("utf-8"),
        capture_output=True,
        timeout=10,
    )
    said = (run.stdout + run.stderr).decode("utf-8", "replace").strip()
    if run.returncode != 0:
        raise RuntimeError(said or f"git commit exited {run.returncode}")
    return said
