"""A CPU stand-in for an ART training backend: `--backend skill_rl.training.dryrun:DryRunBackend`.

It implements the members of `art.Backend` that the training loop touches. Inference goes to any
OpenAI-compatible server (`SKILL_RL_POLICY_BASE_URL`, `SKILL_RL_POLICY_API_KEY`), and `train` and
`_train_sft` (behind `model.train_sft`) update no weights: they record what they were given in
`<model dir>/dryrun.jsonl` and advance the step. Use it to run the whole loop (warm start, rollouts,
judge, logging, validation, resume) on a laptop before paying for GPUs; the tests use it the same way.

It is as strict as ART 0.5.23's real backends wherever a test can see the difference:
- the served model name is `<model name>@<step>`, as LocalBackend serves LoRA adapters
  (art/local/backend.py:795-848); `SKILL_RL_POLICY_MODEL` sends one fixed name instead, for a
  server that knows no such names;
- register leaves a checkpoint folder `checkpoints/0000`, each step one more, and
  `_delete_checkpoint_files` removes every numbered folder not kept (art/local/checkpoints.py:7-20);
- `train` refuses trajectories whose completions carry no logprobs: ART's tokenizer drops such a
  completion (art/preprocessing/tokenize.py:694-702), so the step would train on nothing and ART
  would skip it with a printed note; `allow_training_without_logprobs=True` accepts them, as in ART;
- an episode with tools is taken as ART's tokenizer takes it: each Choice is one trained completion (its tokens and
  logprobs), the messages between them (tool results, the prompt) are context and train nothing; `train` refuses a
  trajectory whose tool messages do not answer the calls of the Choice before them, or that carries calls without
  its `tools` (a history no chat template renders as it was served, and RULER would judge without the tools); the
  step's record holds each trajectory's Choices (`turns`) and the tools offered;
- after `close()` any use of the backend raises: a closed ServerlessBackend's HTTP client fails, and a
  closed LocalBackend would start a new model service.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from contextlib import asynccontextmanager
from pathlib import Path

from art.types import TrainResult
from openai.types.chat.chat_completion import Choice


class DryRunBackend:
    def __init__(self) -> None:
        self.base_url = os.environ.get("SKILL_RL_POLICY_BASE_URL", "http://127.0.0.1:8000/v1")
        self.api_key = os.environ.get("SKILL_RL_POLICY_API_KEY", "none")
        self.served_model = os.environ.get("SKILL_RL_POLICY_MODEL")
        # log -> ((mtime, size), step)
        self._seen: dict[Path, tuple] = {}
        self._closed = False

    def __getattribute__(self, name: str):
        if not name.startswith("__") and name not in ("close", "_closed") and object.__getattribute__(self, "_closed"):
            raise RuntimeError(f"DryRunBackend.{name} used after close(): ART's backends cannot be used once closed")
        return object.__getattribute__(self, name)

    def _dir(self, model) -> Path:
        path = Path(model._get_output_dir())
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _log(self, model) -> Path:
        return self._dir(model) / "dryrun.jsonl"

    def _checkpoint(self, model, step: int) -> Path:
        return self._dir(model) / "checkpoints" / f"{step:04d}"

    async def register(self, model) -> None:
        self._checkpoint(model, 0).mkdir(parents=True, exist_ok=True)

    async def _prepare_backend_for_training(self, model, config=None) -> tuple[str, str]:
        return self.base_url, self.api_key

    def _model_inference_name(self, model, step: int | None = None) -> str:
        if self.served_model:
            return self.served_model
        return f"{model.name}@{self._step(model) if step is None else step}"

    def _step(self, model) -> int:
        """The last step in the log; read again only when the log changed (every rollout asks for its model name)."""
        log = self._log(model)
        try:
            stat = log.stat()
        except FileNotFoundError:
            return 0
        seen = (stat.st_mtime_ns, stat.st_size)
        if self._seen.get(log, (None,))[0] != seen:
            lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
            self._seen[log] = (seen, json.loads(lines[-1])["step"] if lines else 0)
        return self._seen[log][1]

    async def _get_step(self, model) -> int:
        return self._step(model)

    async def _delete_checkpoint_files(self, model, steps_to_keep: list[int]) -> None:
        for path in (self._dir(model) / "checkpoints").iterdir():
            if path.is_dir() and path.name.isdigit() and int(path.name) not in steps_to_keep:
                shutil.rmtree(path)

    @asynccontextmanager
    async def exact_adapter_lease(self, model, step: int):
        yield

    async def train(
        self,
        model,
        trajectory_groups,
        *,
        learning_rate: float = 1e-5,
        allow_training_without_logprobs: bool = False,
        **kwargs,
    ) -> TrainResult:
        groups = list(trajectory_groups)
        missing = without_logprobs(groups)
        if missing and not allow_training_without_logprobs:
            raise ValueError(
                f"DryRunBackend.train: {missing} of {sum(len(g.trajectories) for g in groups)} trajectories "
                "have a completion without logprobs, which ART's tokenizer drops: request logprobs=True"
            )
        problem = next((p for g in groups for t in g.trajectories if (p := tool_problem(t))), None)
        if problem:
            raise ValueError(f"DryRunBackend.train: {problem}")
        step = self._step(model) + 1
        rewards = [t.reward for g in groups for t in g.trajectories]
        record = {
            "step": step,
            "learning_rate": learning_rate,
            "groups": len(groups),
            "rollouts": [len(g.trajectories) for g in groups],
            "task_ids": [g.trajectories[0].metadata.get("task_id") for g in groups if g.trajectories],
            "rewards": rewards,
            "system": [g.trajectories[0].messages_and_choices[0]["content"] for g in groups[:1] if g.trajectories],
            # the KL anchor, as ART's train takes it
            "kl": {k: v for k, v in kwargs.items() if k.startswith("kl_")},
            # per trajectory: its completions, each trained as one
            "turns": [
                [sum(isinstance(m, Choice) for m in t.messages_and_choices) for t in g.trajectories] for g in groups
            ],
            "tools": sorted({tool_name(x) for g in groups for t in g.trajectories for x in t.tools or ()}),
        }
        # first: a crash before the log line retrains it
        self._checkpoint(model, step).mkdir(parents=True, exist_ok=True)
        # one line per step, appended whole: the step counter
        with self._log(model).open("a") as f:
            f.write(json.dumps(record) + "\n")
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        return TrainResult(step=step, metrics={"loss": 0.0, "dryrun/mean_reward": mean})

    async def _train_sft(self, model, trajectories, config, dev_config, verbose: bool = False):
        """What `TrainableModel.train_sft` calls: records the examples and the config in `dryrun.jsonl` (an
        `sft` record) and advances the step, as a checkpoint would. Per batch it yields the metrics it can
        state truthfully under ART's names; no loss, since nothing is trained."""
        examples = list(trajectories)
        # LocalBackend's default batch size
        size = 2 if config.batch_size == "auto" else config.batch_size
        batches = math.ceil(len(examples) / size)
        for i in range(batches):
            rates = config.learning_rate
            yield {
                "loss/learning_rate": rates[i] if isinstance(rates, list) else rates,
                "data/step_num_trajectories": float(len(examples)),
                "data/step_num_gradient_steps": float(batches),
            }
        if not examples:
            # like LocalBackend: no batch, no checkpoint
            return
        record = {
            "step": await self._get_step(model) + 1,
            "sft": {
                "learning_rate": config.learning_rate,
                "batch_size": size,
                "assistant_turns": config.assistant_turns,
                "examples": [{"metadata": t.metadata, "messages": t.messages()} for t in examples],
            },
        }
        self._checkpoint(model, record["step"]).mkdir(parents=True, exist_ok=True)
        with self._log(model).open("a") as f:
            f.write(json.dumps(record) + "\n")

    async def close(self) -> None:
        self._closed = True


def without_logprobs(groups) -> int:
    """Trajectories that would give ART's tokenizer nothing to train on, or lose a completion:
    no completion at all, or one whose `logprobs` is None."""
    missing = 0
    for group in groups:
        for traj in group.trajectories:
            choices = [m for m in traj.messages_and_choices if isinstance(m, Choice)]
            missing += not choices or any(c.logprobs is None for c in choices)
    return missing


def tool_name(tool) -> str:
    return (tool.get("function") or {}).get("name", "") if isinstance(tool, dict) else ""


def _calls(item) -> list[str]:
    """The ids of the tool calls an assistant turn (a Choice, or a message dict) makes."""
    message = getattr(item, "message", None)
    calls = message.tool_calls if message is not None else item.get("tool_calls")
    return [c.id if not isinstance(c, dict) else c.get("id") for c in calls or ()]


def tool_problem(traj) -> str | None:
    """What no chat template would render as served in an episode with tools: a tool message that answers no call
    of the assistant turn before it, a call left unanswered, calls in a trajectory without its `tools`; or None."""
    open_calls: list[str] = []
    called = False
    for item in traj.messages_and_choices:
        role = item.get("role") if isinstance(item, dict) else "assistant"
        if role == "tool":
            if item.get("tool_call_id") not in open_calls:
                return f"a tool message answers {item.get('tool_call_id')!r}, no call of the assistant turn before it"
            open_calls.remove(item["tool_call_id"])
            continue
        if open_calls:
            return f"tool calls {open_calls} are not answered before the next {role} message"
        if role == "assistant":
            open_calls = _calls(item)
            called = called or bool(open_calls)
    if called and not traj.tools:
        return "a trajectory makes tool calls but carries no tools (set Trajectory.tools)"
    return None
