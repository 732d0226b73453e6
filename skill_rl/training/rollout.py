"""One rollout: SKILL.md as the system message (or, in an --internalize run, what the schedule puts in its
place: prompts.py), the task as the user message, one completion. A skill with tools gets an episode instead
(`tool_rollout`): the policy is asked with the tools until it answers without a call or --max-turns (turns.py).

Scoring is not done here: the training loop scores each finished group in `after_each`, so the
judge overlaps the other groups' rollouts.
"""

from __future__ import annotations

import art

from skill_rl import prompts
from skill_rl.endpoints import whole
from skill_rl.keys import EchoedKey, redact
from skill_rl.scoring.reward import GroupResult, Scorer, candidate
from skill_rl.skills import Skill, Task
from skill_rl.tools.episodes import KEY as EPISODE
from skill_rl.tools.episodes import keys
from skill_rl.training import turns
from skill_rl.training.trajectories import output_of

# Set up front on every trajectory; dimensions and checks are added when scored (see Score.metrics).
STEP_KEYS = ("judged", "judge_failed", "judge_duplicate", "judge_skipped", "truncated")
# ... and on an episode with tools: policy calls, whether --max-turns ended it, tool calls, calls answered with an error
TOOL_KEYS = ("turns", "ran_out", "tool_calls", "tool_errors")


async def rollout(
    model: art.Model,
    skill: Skill,
    task: Task,
    *,
    temperature: float,
    max_tokens: int,
    timeout: float = 600.0,
    with_skill: bool = True,
    without: str | None = None,
) -> art.Trajectory:
    """`without`: None, a run without --internalize (its metrics as ever); else what replaces SKILL.md when
    `with_skill` is False, and the trajectory's metrics say which prompt it had and its tokens."""
    messages = prompts.messages(skill, task, with_skill, without or "stub")
    traj = art.Trajectory(
        messages_and_choices=list(messages),
        metadata={"task_id": task.id},
        metrics=dict.fromkeys(STEP_KEYS, 0.0),
        reward=0.0,
    )
    # logprobs: ART trains only those
    completion = await whole(
        model.openai_client().chat.completions.create(
            model=model.get_inference_name(),
            messages=messages,
            temperature=temperature,
            max_tokens=max_tokens,
            logprobs=True,
            timeout=timeout,
            # the whole answer: the client's own timeout is per read, and a server may trickle a byte at a time
        ),
        timeout,
    )
    choice = completion.choices[0]
    # never logged, judged or trained on
    if redact(choice.message.content or "") != (choice.message.content or ""):
        raise EchoedKey(
            "the policy server's answer quotes an API key; this rollout is dropped (an endpoint echoing requests?)"
        )
    traj.messages_and_choices.append(choice)
    traj.metrics["truncated"] = float(choice.finish_reason == "length")
    if without is not None:
        traj.metrics["with_skill"] = float(with_skill)
        traj.metrics["prompt_tokens"] = float(prompts.prompt_tokens(completion, messages)[0])
    return traj


async def tool_rollout(
    model: art.Model,
    skill: Skill,
    task: Task,
    tools: list[dict],
    run_call: turns.RunCall,
    *,
    temperature: float,
    max_tokens: int,
    max_turns: int,
    timeout: float = 600.0,
) -> tuple[art.Trajectory, list[turns.Call]]:
    """An episode with tools (OpenAI tool schemas; `run_call(name, arguments)` runs one call in the episode's
    workspace): the trajectory holds every message, the policy's Choices (the only tokens ART trains) and the tools;
    the calls come back beside it, in order, for scoring. `timeout` bounds each policy call."""
    messages = prompts.messages(skill, task, True, "stub")
    ask = turns.asker(
        model.openai_client(),
        model.get_inference_name(),
        temperature=temperature,
        max_tokens=max_tokens,
        timeout=timeout,
    )
    history = await turns.take_turns(ask, messages, tools, run_call, max_turns)
    traj = art.Trajectory(
        messages_and_choices=history.messages_and_choices,
        tools=tools,
        metadata={"task_id": task.id},
        metrics=dict.fromkeys(STEP_KEYS + TOOL_KEYS, 0.0),
        reward=0.0,
    )
    traj.metrics.update(
        truncated=float(history.last.finish_reason == "length"),
        turns=float(history.turns),
        ran_out=float(history.ran_out),
        tool_calls=float(len(history.calls)),
        tool_errors=float(sum(c.error is not None for c in history.calls)),
    )
    for call in history.calls:
        if call.error:
            traj.log(f"tool call {call.name[:80]!r} failed: {call.error[:300]}")
    return traj, history.calls


async def episode_rollout(
    model: art.Model,
    skill: Skill,
    task: Task,
    episodes,
    *,
    temperature: float,
    max_tokens: int,
    max_turns: int,
    timeout: float = 600.0,
) -> art.Trajectory:
    """`tool_rollout` in a fresh copy of the task's workspace, kept open in `episodes` (skill_rl/tools Episodes) under
    the id the trajectory's metadata carries, for its group's scoring to read and then close. A rollout that fails
    or is cancelled closes its workspace at once."""
    key, toolbox = episodes.open(skill, task)
    try:
        traj, calls = await tool_rollout(
            model,
            skill,
            task,
            [t.schema() for t in skill.tools],
            toolbox.run,
            temperature=temperature,
            max_tokens=max_tokens,
            max_turns=max_turns,
            timeout=timeout,
        )
    except BaseException:
        episodes.close(key)
        raise
    episodes.keep(key, calls)
    traj.metadata[EPISODE] = key
    return traj


def quiet_failed_rollouts(loop) -> None:
    """When more rollouts fail than --max-exceptions allows, ART raises the first error and leaves the other
    failed rollouts' errors unread; asyncio would print each as "Task exception was never retrieved" with a
    traceback. They are counted and reported as one line already: drop those, keep every other report."""

    def handler(loop, context):
        coro = getattr(context.get("future"), "get_coro", lambda: None)()
        if context.get("message") == "Task exception was never retrieved" and getattr(coro, "__name__", "") in (
            "rollout",
            "tool_rollout",
            "episode_rollout",
        ):
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def apply_scores(group: art.TrajectoryGroup, result: GroupResult, judged_as: list | None = None) -> art.TrajectoryGroup:
    """Write one group's scores into its trajectories (reward, per-dimension and per-check metrics). `judged_as`:
    what the judge ranked of each (an episode: its calls too; else its output)."""
    seen: set = set()
    judged_as = judged_as or [output_of(t) for t in group.trajectories]
    for traj, score, judged in zip(group.trajectories, result.scores, judged_as):
        traj.reward = score.reward
        traj.metrics.update(score.metrics())
        traj.metrics["judge_failed"] = float(result.judge_failed)
        traj.metrics["judge_skipped"] = float(result.judge_skipped)
        # the second and later copies of an output shared the first one's judgement
        traj.metrics["judge_duplicate"] = float(result.judge_calls > 0 and judged in seen)
        seen.add(judged)
        if score.judge:
            traj.log(score.judge)
    if result.judge_error:
        group.trajectories[0].log(f"judge failed, scored by checks only: {result.judge_error}")
    return group


async def score_group(
    group: art.TrajectoryGroup, scorer: Scorer, tasks: dict[str, Task], episodes=None
) -> art.TrajectoryGroup:
    """Score one group; with `episodes` (a skill with tools), each trajectory with its episode, whose workspaces are
    closed once scored, scored or not."""
    task = tasks[group.trajectories[0].metadata["task_id"]]
    outputs = [output_of(t) for t in group.trajectories]
    if episodes is None:
        return apply_scores(group, await scorer.score(task, outputs))
    ids = keys(group.trajectories)
    try:
        done = episodes.of(ids)
        result = await scorer.score(task, outputs, done)
    finally:
        episodes.close(*ids)
    return apply_scores(group, result, [candidate(o, e) for o, e in zip(outputs, done)])
