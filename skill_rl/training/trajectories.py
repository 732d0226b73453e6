"""What a step reads of ART's trajectories without importing ART: an answer's text, and the share of it
repeated verbatim across the step's tasks (paid for nowhere: scoring/repeats.py)."""

from __future__ import annotations

from skill_rl.scoring import repeats


def output_of(traj) -> str:
    """The last message's text, read from the Choice (or dict) the trajectory holds. Not `traj.messages()`:
    ART 0.5.23 builds a pydantic TypeAdapter on each call, which cost more than the rest of a step."""
    last = traj.messages_and_choices[-1]
    message = getattr(last, "message", None)  # a Choice, as the policy answered
    return (last.get("content") if message is None else message.content) or ""


def penalise_repeats(groups) -> float:
    """Text repeated verbatim across a training step's tasks is paid for nowhere (scoring/repeats.py): each
    trajectory's reward is scaled by 1 - its repeated share (metric `repeated`). Returns the step's mean share."""
    trajs = [t for g in groups for t in g.trajectories]
    items = [(str(t.metadata.get("task_id")), output_of(t)) for t in trajs]
    values = repeats.shares(items)
    for traj, share in zip(trajs, values):
        traj.metrics["repeated"] = share
        traj.reward *= 1 - share
    return sum(values) / len(values) if values else 0.0
