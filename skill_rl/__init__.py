"""skill-rl: train small models with RL to follow markdown skills (see train_skill.py and docs in the README).

The public API for a skill's checks.py:

    from skill_rl import check, Task

    @check("format", covers=0.2)
    def answered(output: str, task: Task) -> bool:
        "The output is not empty."
        return bool(output.strip())

Both are loaded on first use, so importing any skill_rl module stays as light as it was.
"""

__all__ = ["check", "Task"]


def __getattr__(name: str):
    if name == "check":
        from skill_rl.scoring.checks import check

        return check
    if name == "Task":
        from skill_rl.skills import Task

        return Task
    raise AttributeError(f"module 'skill_rl' has no attribute {name!r}")
