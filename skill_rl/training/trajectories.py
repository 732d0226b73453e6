"""What a step reads of ART's trajectories without importing ART: an answer's text, and what of it repeats across
the step's tasks once each task's own words are masked (paid for nowhere: scoring/repeats.py)."""

from __future__ import annotations

from skill_rl.scoring import repeats


def output_of(traj) -> str:
    """The last answer's text, read from the Choice (or assistant dict) the trajectory holds: the last message, but
    for an episode that --max-turns ended after tool calls, whose tool messages (untrusted tool output) come after
    it. Not `traj.messages()`: ART 0.5.23 builds a pydantic TypeAdapter on each call, which cost more than the rest
    of a step."""
    items = traj.messages_and_choices
    last = next((m for m in reversed(items) if not isinstance(m, dict) or m.get("role") != "tool"), items[-1])
    # a Choice, as the policy answered
    message = getattr(last, "message", None)
    return (last.get("content") if message is None else message.content) or ""


def penalise_repeats(groups, skill=None) -> float:
    """What repeats across a training step's tasks is paid for nowhere (scoring/repeats.py): each trajectory's
    reward is scaled by 1 - its penalty (metric `repeated`). `skill`: whose task inputs are masked, and whose
    SKILL.md lines and references say what is right to share. Returns the step's mean penalty."""
    trajs = [t for g in groups for t in g.trajectories]
    tasks = {t.id: t for t in skill.tasks} if skill is not None else {}
    ids = [str(t.metadata.get("task_id")) for t in trajs]
    items = [(tasks[i].input if i in tasks else i, output_of(t)) for i, t in zip(ids, trajs)]
    values = repeats.shares(items, skill)
    for traj, share in zip(trajs, values):
        traj.metrics["repeated"] = share
        traj.reward *= 1 - share
    return sum(values) / len(values) if values else 0.0
