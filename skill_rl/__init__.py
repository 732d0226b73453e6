"""skill-rl: train small models with RL to follow markdown skills (see train_skill.py and docs in the README).

The public API for a skill's checks.py:

    from skill_rl import check, Task

    @check("format", covers=0.2)
    def answered(output: str, task: Task) -> bool:
        "The output is not empty."
        return bool(output.strip())

    @check("correctness", kind="estimate", cut=0.3)  # a guess at content: never pays, cuts when it fails
    def on_topic(output: str, task: Task) -> bool:
        "The answer names something of the input."
        return any(w in task.input for w in output.split())

and for a skill's exploits.py (degenerate policies its reward must not pay for; skill_rl/scoring/exploits.py):

    from skill_rl import exploit, Task

    @exploit("one vague message for every task")
    def vague(ctx, task: Task) -> str | None:
        "What the policy writes for this task; None where it does not apply."
        return "chore: update code"

    @exploit("a template filled with each diff's names", step=True)  # a per-task family: the step contract
    def template(ctx, task: Task) -> str | None: ...

and for a skill's tools.py (what the policy may call in its workspace; docs/tools.md):

    from pathlib import Path
    from skill_rl import tool

    @tool
    def count_words(workspace: Path, path: str) -> str:
        "How many words a file of the workspace holds; `path` is relative to the workspace."
        from skill_rl.tools import inside

        return str(len(inside(workspace, path).read_text().split()))

All are loaded on first use, so importing any skill_rl module stays as light as it was.
"""

__all__ = ["check", "exploit", "tool", "Task"]


def __getattr__(name: str):
    if name == "check":
        from skill_rl.scoring.checks import check

        return check
    if name == "exploit":
        from skill_rl.scoring.exploits import exploit

        return exploit
    if name == "tool":
        from skill_rl.tools.declare import tool

        return tool
    if name == "Task":
        from skill_rl.skills import Task

        return Task
    raise AttributeError(f"module 'skill_rl' has no attribute {name!r}")
