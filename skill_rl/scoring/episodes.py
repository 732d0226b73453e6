"""Scripted episodes scored: the reference episodes a skill with tools scripts (skill_rl/tools/scripted.py), played
for real and scored by the skill's checks, and the scripts of its exploits.py's EPISODES against them (`--check`
prints what `measure` finds; tests hold the shipped skill to every exploit scoring below its reference)."""

from __future__ import annotations

from dataclasses import dataclass, field

from skill_rl.scoring.exploits import scripts_of
from skill_rl.scoring.rubric import score_offline
from skill_rl.tools.scripted import Played, play, reference


@dataclass
class Measured:
    """What `measure` found: per task, the reference episode's reward and the checks it fails (a result of False,
    or below 1; None, a check that does not apply, passes); per exploit script, on how many tasks it scored below."""

    tasks: int = 0
    rewards: list[float] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=dict)
    # exploit name -> (tasks where it scored below the reference, tasks tried)
    exploits: dict[str, list[int]] = field(default_factory=dict)


def _scored(skill, task, played: Played):
    """The episode's reward and its checks' results, the checks run once (a Score keeps the results it folded)."""
    score = score_offline(skill, task, [played.output], [played.episode])[0]
    return score.reward, score.checks


def measure(skill, tasks: list) -> Measured:
    """Play the reference episode of each task and every script of exploits.py's EPISODES, scored by the checks."""
    found = Measured()
    scripts = scripts_of(skill)
    for task in tasks:
        played = reference(skill, task)
        if played is None:
            continue
        try:
            best, results = _scored(skill, task, played)
        finally:
            played.close()
        found.tasks += 1
        found.rewards.append(best)
        for name, value in results.items():
            if value is False or (value is not None and value is not True and value < 1):
                found.failed[name] = found.failed.get(name, 0) + 1
        for name, script in scripts.items():
            calls, answer = script(task)
            bad = play(skill, task, calls, answer)
            try:
                reward, _ = _scored(skill, task, bad)
            finally:
                bad.close()
            tally = found.exploits.setdefault(name, [0, 0])
            tally[0] += reward < best
            tally[1] += 1
    return found
