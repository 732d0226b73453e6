"""The open episodes of a batch: each rollout of a skill with tools acts in its own fresh workspace, and its checks
read that workspace as the episode left it, after the rollout, when its group is scored. ART's gather expects each
rollout to return a trajectory, so the episode is kept here, beside it, under an id the trajectory's metadata
carries (`KEY`, read with `keys`); scoring takes the group's episodes (`of`) and closes their workspaces (`close`). Whatever is left
open when the batch ends (a group dropped for errors or for having fewer than two rollouts, a cancelled run) is
closed by `close_all`: no workspace outlives its batch.
"""

from __future__ import annotations

import uuid
from typing import Iterable

from skill_rl.tools.toolbox import CallRecord, Episode, Toolbox
from skill_rl.tools.workspace import Workspace

# the trajectory's metadata key that names its episode
KEY = "episode"


def keys(trajectories) -> list:
    """The episode ids the trajectories carry, in order (None for one without)."""
    return [t.metadata.get(KEY) for t in trajectories]


def records(calls: Iterable) -> list[CallRecord]:
    """Calls as an episode's records (from turns.Call, or any record with name, arguments, result, error)."""
    return [
        CallRecord(
            name=str(c.name),
            arguments=str(c.arguments),
            result=str(c.result or ""),
            error=None if c.error is None else str(c.error),
            seconds=float(getattr(c, "seconds", 0.0) or 0.0),
        )
        for c in calls
    ]


class Episodes:
    """Workspaces of the episodes in flight and done, by id, until their group is scored."""

    def __init__(self):
        self._open: dict[str, tuple[Workspace, Episode | None]] = {}

    def open(self, skill, task) -> tuple[str, Toolbox]:
        """A fresh copy of the task's workspace and a toolbox bound to it, under a new id."""
        workspace = Workspace.fresh(skill.workspace_of(task))
        key = uuid.uuid4().hex
        self._open[key] = (workspace, None)
        return key, Toolbox(list(skill.tools), workspace)

    def keep(self, key: str, calls: Iterable) -> None:
        """The episode's calls, once it ended (they are read with its workspace when the group is scored)."""
        workspace, _ = self._open[key]
        self._open[key] = (workspace, Episode(calls=records(calls), workspace=workspace.path))

    def of(self, keys: Iterable) -> list[Episode | None]:
        """The episodes of these ids, in order (None for an id that names none)."""
        return [self._open[k][1] if k in self._open else None for k in keys]

    def close(self, *keys) -> None:
        """Delete these episodes' workspaces (an unknown id is nothing to close)."""
        for key in keys:
            entry = self._open.pop(key, None)
            if entry is not None:
                entry[0].close()

    def close_all(self) -> None:
        self.close(*self._open)

    def __len__(self) -> int:
        return len(self._open)
