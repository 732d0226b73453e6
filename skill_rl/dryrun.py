"""A CPU stand-in for an ART training backend: `--backend skill_rl.dryrun:DryRunBackend`.

It implements the members of `art.Backend` that the training loop touches. Inference goes to any
OpenAI-compatible server (`SKILL_RL_POLICY_BASE_URL`, `SKILL_RL_POLICY_API_KEY`,
`SKILL_RL_POLICY_MODEL`), and `train` and `_train_sft` (behind `model.train_sft`) update no
weights: they record what they were given in `<model dir>/dryrun.jsonl` and advance the step. Use
it to run the whole loop (warm start, rollouts, judge, logging, validation, resume) on a laptop
before paying for GPUs; the tests use it the same way.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import asynccontextmanager
from pathlib import Path

from art.types import TrainResult


class DryRunBackend:
    def __init__(self) -> None:
        self.base_url = os.environ.get("SKILL_RL_POLICY_BASE_URL", "http://127.0.0.1:8000/v1")
        self.api_key = os.environ.get("SKILL_RL_POLICY_API_KEY", "none")
        self.served_model = os.environ.get("SKILL_RL_POLICY_MODEL")

    def _dir(self, model) -> Path:
        path = Path(model._get_output_dir())
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _log(self, model) -> Path:
        return self._dir(model) / "dryrun.jsonl"

    async def register(self, model) -> None:
        self._dir(model)

    async def _prepare_backend_for_training(self, model, config=None) -> tuple[str, str]:
        return self.base_url, self.api_key

    def _model_inference_name(self, model, step: int | None = None) -> str:
        return self.served_model or model.name

    async def _get_step(self, model) -> int:
        log = self._log(model)
        if not log.exists():
            return 0
        lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
        return json.loads(lines[-1])["step"] if lines else 0

    async def _delete_checkpoint_files(self, model, steps_to_keep: list[int]) -> None:
        return None

    @asynccontextmanager
    async def exact_adapter_lease(self, model, step: int):
        yield

    async def train(self, model, trajectory_groups, *, learning_rate: float = 1e-5, **kwargs) -> TrainResult:
        groups = list(trajectory_groups)
        step = await self._get_step(model) + 1
        rewards = [t.reward for g in groups for t in g.trajectories]
        record = {
            "step": step, "learning_rate": learning_rate, "groups": len(groups),
            "rollouts": [len(g.trajectories) for g in groups],
            "task_ids": [g.trajectories[0].metadata.get("task_id") for g in groups if g.trajectories],
            "rewards": rewards,
            "system": [g.trajectories[0].messages()[0]["content"] for g in groups[:1] if g.trajectories],
        }
        with self._log(model).open("a") as f:  # one line per step, appended whole: the step counter
            f.write(json.dumps(record) + "\n")
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        return TrainResult(step=step, metrics={"loss": 0.0, "dryrun/mean_reward": mean})

    async def _train_sft(self, model, trajectories, config, dev_config, verbose: bool = False):
        """What `TrainableModel.train_sft` calls: records the examples and the config in `dryrun.jsonl` (an
        `sft` record) and advances the step, as a checkpoint would. Per batch it yields the metrics it can
        state truthfully under ART's names; no loss, since nothing is trained."""
        examples = list(trajectories)
        size = 2 if config.batch_size == "auto" else config.batch_size  # LocalBackend's default batch size
        batches = math.ceil(len(examples) / size)
        for i in range(batches):
            rates = config.learning_rate
            yield {"loss/learning_rate": rates[i] if isinstance(rates, list) else rates,
                   "data/step_num_trajectories": float(len(examples)), "data/step_num_gradient_steps": float(batches)}
        if not examples:
            return  # like LocalBackend: no batch, no checkpoint
        record = {"step": await self._get_step(model) + 1, "sft": {
            "learning_rate": config.learning_rate, "batch_size": size, "assistant_turns": config.assistant_turns,
            "examples": [{"metadata": t.metadata, "messages": t.messages()} for t in examples]}}
        with self._log(model).open("a") as f:
            f.write(json.dumps(record) + "\n")

    async def close(self) -> None:
        return None
