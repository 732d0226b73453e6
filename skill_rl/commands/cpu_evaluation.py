"""`--eval --backend cpu`: a CPU run's checkpoint against its base model, decoded in this process, no server.

The run is named as training names it (`--run-name`, else `<skill>-<base model>`; `--project`), the checkpoint
by `--checkpoint` (default best, as `--export` picks it). The arms are `trained` (the checkpoint's adapter) and
`base` (the adapter off), each with SKILL.md and, with `--baseline`, without it. Each arm's prompts are decoded as
training decodes its rollouts (Policy.generate_many: several prompts in one batch, each prefix computed once), in
batches of GEN_BATCH rows, the tasks sorted by prompt length so that a batch pads little. The answers then go to
skill_rl.commands.evaluate as an endpoint's answers would: scored, judged, tabled and written the same way.

Generation settings are the run's own (its config.yaml: `max_tokens`, `temperature` when the run set one,
`context_tokens`) unless given on the command line: a 135M model asked for --eval's default 1,024 tokens loops
until it reaches them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import yaml

from skill_rl import prompts
from skill_rl.cpu.presets import GEN_BATCH
from skill_rl.cpu.weights import TINY_MODEL, checkpoint_problem
from skill_rl.endpoints import Endpoint, with_baselines
from skill_rl.errors import Exit

# what a record's spec says in place of an endpoint's URL
PLACE = "in-process"
FROM_RUN = {"max_tokens": int, "temperature": (int, float), "context_tokens": int, "base_model": str}


def run_folder(project: str, run_name: str) -> Path:
    where = Path(".art") / project / "models" / run_name
    if not (where / "checkpoints").is_dir():
        raise Exit(
            2,
            f"--eval --backend cpu: no run with checkpoints at {where} (from --project {project}, run "
            f"{run_name}); train it first, or pass the --run-name (and --project) the training used",
        )
    return where


def run_settings(where: Path) -> dict:
    """The generation settings the run wrote in its config.yaml (those it has; a run of before may lack the file)."""
    path = where / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text()) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise Exit(2, f"{path}: cannot read the run's settings: {type(e).__name__}") from None
    data = data if isinstance(data, dict) else {}
    out = {}
    for key, kind in FROM_RUN.items():
        value = data.get(key)
        if value is None:
            continue
        if (
            not isinstance(value, kind)
            or isinstance(value, bool)
            or (kind is int and value < 1)
            or (kind is not str and value < 0)
        ):
            raise Exit(
                2,
                f"{path}: field '{key}' must be a {'positive whole number' if kind is int else 'number' if kind is not str else 'text'}, got {value!r}",
            )
        out[key] = value
    return out


def pick(where: Path, which: str | int) -> tuple[Path, str]:
    """(checkpoint folder, which step and why), or exit 2."""
    from skill_rl.training import history
    from skill_rl.training.backends import best_step

    steps = {int(p.name): p for p in (where / "checkpoints").glob("[0-9]*") if p.name.isdigit() and p.is_dir()}
    if not steps:
        raise Exit(2, f"--eval --backend cpu: {where} has no checkpoint yet: nothing was trained")
    best = best_step(where / history.NAME) if which == "best" else None
    if isinstance(which, int):
        if which not in steps:
            raise Exit(
                2,
                f"--checkpoint {which}: {where} has no such checkpoint; it has steps {', '.join(map(str, sorted(steps)))}",
            )
        step, why = which, "chosen with --checkpoint"
    elif best and best[0] in steps:
        step, why = best[0], f"the best, val reward {best[1]:.3f}"
    else:
        step, why = max(steps), "the latest"
    if problem := checkpoint_problem(steps[step]):
        raise Exit(2, f"{steps[step]}: cannot load this checkpoint: {problem}")
    return steps[step], f"step {step}, {why}"


def arms(
    checkpoint: Path, base_model: str, baseline: bool, without: str | None
) -> tuple[list[Endpoint], dict[str, bool]]:
    """The endpoints --eval tables (trained, base, and their no-skill arms), and per label whether the adapter is on."""
    eps = [Endpoint("trained", str(checkpoint), PLACE), Endpoint("base", base_model, PLACE)]
    eps = with_baselines(eps, without or "description") if baseline else eps
    return eps, {ep.label: ep.model == str(checkpoint) for ep in eps}


def decode_all(
    policy,
    skill,
    tasks,
    endpoints: list[Endpoint],
    adapter: dict[str, bool],
    samples: int,
    temperature: float,
    max_tokens: int,
    tick=lambda n: None,
) -> dict[tuple[str, str], tuple[list, int]]:
    """(task id, label) -> ([(output, finish_reason)] * samples, prompt tokens), each arm decoded in batches."""
    out = {}
    per = max(1, GEN_BATCH // samples)
    for ep in endpoints:
        todo = sorted(
            ((policy.prompt_ids(prompts.messages(skill, t, ep.with_skill, ep.without)), t) for t in tasks),
            key=lambda pair: len(pair[0]),
        )
        for i in range(0, len(todo), per):
            chunk = todo[i : i + per]
            got = policy.generate_many([(ids, samples) for ids, _ in chunk], temperature, max_tokens, adapter[ep.label])
            for k, (ids, task) in enumerate(chunk):
                rows = got[k * samples : (k + 1) * samples]
                out[task.id, ep.label] = (
                    [
                        (
                            policy.tokenizer.decode(s.token_ids, skip_special_tokens=True),
                            "stop" if s.finished else "length",
                        )
                        for s in rows
                    ],
                    len(ids),
                )
            tick(len(chunk))
    return out


def load(checkpoint: Path, base_model: str):
    """The policy with the checkpoint's adapter loaded; said on stderr with the seconds it took."""
    from skill_rl.cpu.policy import Policy
    from skill_rl.cpu.weights import quiet_threads

    quiet_threads()
    started = time.perf_counter()
    policy = Policy(base_model or TINY_MODEL)
    policy.load(checkpoint)
    print(f"loaded {base_model} and {checkpoint} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return policy
