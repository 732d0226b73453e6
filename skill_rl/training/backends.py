"""Where a run trains: the backend it picks and why, the base model that backend can train, the
flags that fit a GPU, and what is kept and printed at the end.

Everything here was read from openpipe-art 0.5.23's installed source, not run on a GPU (the line
numbers are that version's):
- `openpipe-art[backend]` pins `torch==2.11.0+cu128` (its METADATA), a build only PyTorch's CUDA
  12.8 index serves, so the extra installs with that index added, as ART's install docs say;
- Tinker renders chats with `art/tinker/renderers.py:get_renderer_name`, which raises for a model
  it does not know (Qwen2.5 among them), at register and in its inference server alike;
- W&B Serverless trains the base models ART's own `train-rl` skill lists (art/skills/train-rl/SKILL.md);
- LocalBackend's first run builds its vLLM runtime with `uv` from PATH (art/vllm_runtime.py:629);
- `model.delete_checkpoints` keeps the latest step and the step with the best mean metric
  (art/model.py:1677-1698), and a backend cannot delete after `close()`.
ART is imported inside functions only: train_skill.py imports this module for every command.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from skill_rl import cpu
from skill_rl.errors import Exit
from skill_rl.settings.defaults import DEFAULT_BASE_MODEL, SERVERLESS_MODELS
from skill_rl.training import history

LOCAL_INSTALL = 'pip install --extra-index-url https://download.pytorch.org/whl/cu128 -e ".[backend]"'
TINKER_INSTALL = 'pip install -e ".[tinker]"'
SERVERLESS_INSTALL = 'pip install -e ".[serverless]"'
NO_BACKEND = f"""no way to train was found on this machine. Pick one:
  - a CUDA GPU:      {LOCAL_INSTALL}   then  --backend local
                     (PyPI alone cannot install this: ART's backend extra pins torch 2.11.0+cu128)
  - W&B Serverless:  {SERVERLESS_INSTALL} and set WANDB_API_KEY   then  --backend serverless   (billed by W&B)
  - Tinker:          {TINKER_INSTALL} and set TINKER_API_KEY   then  --backend tinker   (billed by Tinker)
  - a CPU rehearsal: {cpu.TINY_INSTALL}   then  --backend cpu
                     (real RL of a 135M model on this CPU: slow, and it learns formats, not content)
Without any of them you can still lint a skill (--check), score outputs (--score) and compare
models on held-out tasks (--eval): none of these needs a GPU."""
BILLED = {
    "serverless": "W&B bills this run's training and inference to the account of WANDB_API_KEY",
    "tinker": "Tinker bills this run's training and sampling to the account of TINKER_API_KEY",
}
# where ART's vLLM runtime build gets most of its packages
PACKAGE_INDEX = "https://pypi.org/simple/"
# what --export says of a run whose adapter is not on this machine
REMOTE_WEIGHTS = {
    "serverless": "--export needs the adapter on this machine, and a W&B Serverless run keeps its checkpoints in W&B "
    "(the run's model artifacts, called by name at the base URL the run printed)",
    "tinker": "--export needs the adapter on this machine, and a Tinker run keeps its weights on Tinker (the "
    "tinker:// path in the run's checkpoints/NNNN/info.yaml)",
}


# ------------------------------------------------------------------ choosing, before anything is spent


@dataclass(frozen=True)
class Plan:
    # local | serverless | tinker | cpu | MODULE:CLASS
    kind: str
    base_model: str
    why: str
    # cpu: what a rehearsal is, how long it takes, where the real run is
    note: str = ""

    def describe(self) -> str:
        lines = [self.note] if self.note else []
        lines.append(f"backend: {self.kind} ({self.why})")
        if self.kind in BILLED:
            lines.append(f"billing: {BILLED[self.kind]}")
        return "\n".join(lines)


def plan(args, skill=None, picked: tuple[str, str] | None = None) -> Plan:
    """Resolve --backend (unless `picked` is pick_backend's answer already) and --base-model, for settings whose
    presets are applied already (config.presets; config.resolve does both), or exit 2 with what to do; starts
    nothing and spends nothing. The skill's tasks size the CPU rehearsal's time estimate."""
    kind, why = picked or pick_backend(args.backend)
    base_model = args.base_model or DEFAULT_BASE_MODEL.get(kind, DEFAULT_BASE_MODEL["local"])
    if kind == "cpu":
        if args.gpu_memory is not None or args.lora_rank is not None:
            raise Exit(
                2,
                f"--gpu-memory and --lora-rank have no effect on --backend cpu (LoRA rank {cpu.LORA['r']}); leave them out",
            )
        return Plan(
            kind,
            base_model,
            why,
            cpu.rehearsal(
                args,
                base_model,
                *(len(skill.split(s)) if skill else 0 for s in ("val", "train")),
                tools=bool(skill and skill.tools),
            ),
        )
    if kind == "local":
        _check_local()
    elif kind == "serverless":
        _check_serverless(base_model, args)
    elif kind == "tinker":
        _check_tinker(base_model, args)
    elif ":" not in kind:
        raise Exit(2, f"--backend must be auto, local, serverless, tinker, cpu or MODULE:CLASS, got {kind!r}")
    return Plan(kind, base_model, why)


def pick_backend(spec: str, to_train: bool = True) -> tuple[str, str]:
    """(kind, why) for --backend; `auto` takes a local GPU with ART's backend extra (to train: when ART's vLLM
    runtime is there or can be built, else exit 2), else W&B Serverless, else (no GPU and no training key) a CPU
    rehearsal when the [cpu] extra and the tiny model are installed."""
    if spec != "auto":
        return spec, "chosen with --backend"
    gpu = has_gpu()
    if gpu and backend_extra():
        if to_train and (problem := offline_runtime_problem()):
            raise Exit(2, problem)
        return "local", "--backend auto found a CUDA GPU and ART's backend extra"
    if os.environ.get("WANDB_API_KEY"):
        return "serverless", (
            "--backend auto found "
            + ("a GPU but not ART's backend extra" if gpu else "no CUDA GPU")
            + ", and WANDB_API_KEY is set"
        )
    if not gpu and not os.environ.get("TINKER_API_KEY") and cpu.available():
        return "cpu", "--backend auto found no CUDA GPU and no training key, and the [cpu] extra with its 135M model"
    raise Exit(2, NO_BACKEND)


def has_gpu() -> bool:
    return Path("/proc/driver/nvidia").exists() or bool(shutil.which("nvidia-smi"))


def backend_extra() -> bool:
    """Whether ART's backend extra is installed (its torch and Unsloth), without importing either."""
    return bool(find_spec("torch") and find_spec("unsloth"))


def offline_runtime_problem() -> str | None:
    """Why `auto` must not pick the local GPU: ART's first local run builds its vLLM runtime with `uv sync`
    (from PyPI, download.pytorch.org and GitHub: art/vllm_runtime.py, _install_managed_runtime), which fails
    minutes in on a machine that reaches none of them. None when the runtime is prepared (what `art runtime
    status` reports), given (ART_VLLM_RUNTIME_BIN), or PyPI answers within 3 s."""
    from skill_rl.settings.env import reachable

    if os.environ.get("ART_VLLM_RUNTIME_BIN") or _vllm_runtime_ready() or reachable(PACKAGE_INDEX):
        return None
    return (
        "--backend auto found a CUDA GPU, but ART's vLLM runtime is not prepared and "
        f"{PACKAGE_INDEX} cannot be reached to build it: run `art runtime prepare` on this machine while it "
        "has the network (same ART_VLLM_RUNTIME_CUDA_PROFILE and cache folder as the run), or set "
        "ART_VLLM_RUNTIME_BIN to an installed art-vllm-runtime-server (--backend local skips this check); "
        "see docs/backends.md"
    )


def _check_local() -> None:
    if not backend_extra():
        raise Exit(
            2,
            f"--backend local needs a CUDA GPU and ART's backend extra: {LOCAL_INSTALL} "
            "(the extra pins torch 2.11.0+cu128, which PyPI alone does not serve)",
        )
    ensure_uv()


def ensure_uv() -> None:
    """ART's first local run builds its vLLM runtime with `uv` found on PATH (art/vllm_runtime.py:629-636).

    A runtime already prepared (`art runtime prepare`) or given (ART_VLLM_RUNTIME_BIN) needs no uv. The
    backend extra installs uv beside the interpreter, which is not on PATH when the venv was not
    activated (`.venv/bin/python train_skill.py`): that folder is put on PATH for this run."""
    if os.environ.get("ART_VLLM_RUNTIME_BIN") or shutil.which("uv") or _vllm_runtime_ready():
        return
    beside = Path(sys.executable).parent
    if (beside / "uv").is_file() and os.access(beside / "uv", os.X_OK):
        os.environ["PATH"] = f"{beside}{os.pathsep}{os.environ.get('PATH', '')}"
        return
    raise Exit(
        2,
        "--backend local: ART builds its vLLM runtime with uv on the first run, and uv is not on PATH. "
        "Install it (pip install uv), then start again, or prepare the runtime ahead with "
        "`art runtime prepare` (which needs uv too)",
    )


def _vllm_runtime_ready() -> bool:
    # what `art runtime status` reports
    from art.runtime_diagnostics import inspect_vllm_runtime

    return inspect_vllm_runtime(include_size=False).ready


def _check_serverless(base_model: str, args) -> None:
    if not os.environ.get("WANDB_API_KEY"):
        raise Exit(2, "--backend serverless needs WANDB_API_KEY in the environment or .env")
    if base_model not in SERVERLESS_MODELS:
        raise Exit(
            2,
            f"--base-model {base_model}: W&B Serverless trains only {', '.join(SERVERLESS_MODELS)} "
            "(the list in ART 0.5.23's train-rl skill); pass one of them, or leave --base-model out",
        )
    if args.gpu_memory is not None or args.lora_rank is not None:
        raise Exit(
            2, "--gpu-memory and --lora-rank have no effect on W&B Serverless, which sets its own; leave them out"
        )
    # ART's Serverless backend imports it in the warm start, after the teacher was paid
    if not find_spec("wandb"):
        raise Exit(
            2,
            f"--backend serverless needs the wandb package, which ART's W&B Serverless backend uses for its "
            f"warm start and checkpoints (only ART's GPU extra installs it): {SERVERLESS_INSTALL}",
        )


def _check_tinker(base_model: str, args) -> None:
    if not os.environ.get("TINKER_API_KEY"):
        raise Exit(2, "--backend tinker needs TINKER_API_KEY in the environment or .env")
    if tinker_renderer(base_model) is None:
        raise Exit(
            2,
            f"--base-model {base_model}: ART's Tinker backend has no chat renderer for it and would fail "
            f"at start-up; pass one it knows, for example {', '.join(tinker_models())}",
        )
    if args.gpu_memory is not None:
        raise Exit(2, "--gpu-memory has no effect on Tinker, which runs the model on its own GPUs; leave it out")
    if not (find_spec("tinker") and find_spec("tinker_cookbook")):
        raise Exit(2, f"--backend tinker needs ART's tinker extra: {TINKER_INSTALL}")


def tinker_renderer(base_model: str) -> str | None:
    """The renderer ART's Tinker backend uses for this model (art/tinker/renderers.py:5-36), or None."""
    from art.tinker.renderers import get_renderer_name

    # it prints advice for some families
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return get_renderer_name(base_model)
        except ValueError:
            return None


def tinker_models() -> list[str]:
    """Chat models ART prices for Tinker (art/costs.py) that its renderer lookup knows."""
    from art.costs import MODEL_PRICING

    return [m for m in MODEL_PRICING if ":" not in m and "-Base" not in m and "-VL-" not in m and tinker_renderer(m)]


# ------------------------------------------------------------------ building


def make_backend(kind: str, quiet: bool = False):
    import importlib

    if kind == "local":
        try:
            from art.local import LocalBackend
        except ImportError as e:
            raise Exit(2, f"--backend local needs a CUDA GPU and ART's backend extra: {LOCAL_INSTALL} ({e})")
        return LocalBackend()
    if kind == "serverless":
        import art

        return art.ServerlessBackend()
    if kind == "tinker":
        try:
            from art.tinker import TinkerBackend
        except ImportError as e:
            raise Exit(2, f"--backend tinker needs ART's tinker extra: {TINKER_INSTALL} ({e})")
        return TinkerBackend()
    if kind == "cpu":
        return cpu.CPUBackend(quiet=quiet)
    module, _, cls = kind.partition(":")
    try:
        return getattr(importlib.import_module(module), cls)()
    except (ImportError, AttributeError) as e:
        raise Exit(2, f"--backend {kind}: cannot load it: {e}")


async def register(model, backend, kind: str) -> None:
    """model.register; a W&B Serverless that cannot be reached or refuses the key is one line, exit 2."""
    from openai import APIError

    try:
        await model.register(backend)
    # ServerlessBackend's client is an OpenAI client (art/serverless/client.py)
    except APIError as e:
        await backend.close()
        raise Exit(
            2,
            f"--backend {kind}: could not register the model ({type(e).__name__}: {e}); "
            "check the API key and the network",
        )


def make_model(args, name: str):
    """The art.TrainableModel of this run, with the GPU-fitting flags in ART's own config types."""
    import art

    rank = args.lora_rank
    return art.TrainableModel(
        name=name,
        run_name=args.run_name,
        project=args.project,
        base_model=args.base_model,
        lora_config=art.dev.LoRAConfig(rank=rank) if rank and args.backend == "local" else None,
        _internal_config=internal_config(args),
    )


def turn_tokens(backend, base_model: str):
    """A function: an episode's messages -> the tokens of its longest assistant turn as the policy writes it (its text,
    then each tool call as a `<tool_call>` block: the form the CPU server's prompt asks for and Qwen's template writes),
    plus the turn's end token; by the CPU backend's tokenizer, else the base model's where this machine holds it
    (transformers, no download). None where neither is at hand: the warm start then does not measure its turns."""
    from skill_rl.cpu.toolcalls import hermes_messages

    tokenizer = getattr(getattr(backend, "policy", None), "tokenizer", None)
    if tokenizer is None:
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(base_model, local_files_only=True)
        except Exception:
            return None

    def longest(messages: list[dict]) -> int:
        turns = [m["content"] for m in hermes_messages(messages, None) if m["role"] == "assistant"]
        return max((len(tokenizer(t, add_special_tokens=False)["input_ids"]) + 1 for t in turns), default=0)

    return longest


def internal_config(args):
    """art.dev.InternalModelConfig for the flags: init_args/engine_args locally, tinker_args on Tinker."""
    from art import dev

    # art/tinker/service.py:260-264 reads the rank from here
    if args.backend == "tinker" and args.lora_rank:
        return dev.InternalModelConfig(
            tinker_args=dev.TinkerArgs(
                renderer_name=tinker_renderer(args.base_model), training_client_args={"rank": args.lora_rank}
            )
        )
    if args.backend != "local":
        return None
    engine = dev.EngineArgs(max_model_len=args.context_tokens)
    if args.gpu_memory is not None:
        engine["gpu_memory_utilization"] = args.gpu_memory
    # vLLM loads adapters up to rank 16 unless told more
    if args.lora_rank and args.lora_rank > 16:
        engine["max_lora_rank"] = args.lora_rank
    return dev.InternalModelConfig(init_args=dev.InitArgs(max_seq_length=args.context_tokens), engine_args=engine)


# ------------------------------------------------------------------ the end of a run


@dataclass(frozen=True)
class Kept:
    # absolute: the run's state, history and checkpoints
    where: Path
    latest: int
    # (step, mean val/reward) as delete_checkpoints keeps it
    best: tuple[int, float] | None
    # the inference name of the kept best (else latest) step
    served_as: str
    base_url: str | None

    @property
    def step(self) -> int:
        return self.best[0] if self.best else self.latest


def best_step(path: Path, metric: str = "val/reward") -> tuple[int, float] | None:
    """ART's rule (art/model.py:1681-1691): the step whose rows have the highest mean `metric`.

    On equal means ART's pick is arbitrary (a polars group_by, then an unstable sort); this takes the
    latest of them, and keep_best_and_latest hands the pick to the backend so that the printed step is kept.
    Step 0 (the base model's validation before a warm start) is no checkpoint, so never the pick."""
    means = validated(path, metric)
    return max(means.items(), key=lambda kv: (kv[1], kv[0])) if means else None


def validated(path: Path, metric: str = "val/reward") -> dict[int, float]:
    """Each validated checkpoint step's mean `metric` (step 0, the base model, left out), as best_step reads them."""
    sums: dict[int, list[float]] = {}
    for step, value in history.values(history.rows(path), metric):
        if step > 0:
            sums.setdefault(step, []).append(value)
    return {step: sum(v) / len(v) for step, v in sums.items()}


def checkpoint_steps(run_dir: Path) -> list[int]:
    """The numbered checkpoint folders of a run on this machine."""
    folder = run_dir / "checkpoints"
    return sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()) if folder.is_dir() else []


async def keep_best_and_latest(model, latest: int, also: set[int] = frozenset(), metric: str = "val/reward") -> Kept:
    """Delete every checkpoint but the latest step, the best and `also` (the KL anchor's reference, which a resumed
    run needs), before the backend is closed (ART's own order)."""
    where = Path(model._get_output_dir()).resolve()
    best = best_step(where / history.NAME, metric)
    keep = sorted(({latest, best[0]} if best else {latest}) | set(also))
    # what model.delete_checkpoints does after choosing the steps (art/model.py:1698)
    try:
        await model.backend()._delete_checkpoint_files(model, keep)
    # a backend that cannot delete (a network error, ...): the run itself is done
    except Exception as e:
        print(f"warning: old checkpoints were not deleted ({type(e).__name__}: {e}); all are kept", file=sys.stderr)
    step = best[0] if best else latest
    return Kept(where, latest, best, model.get_inference_name(step=step), model.inference_base_url)


def ending_lines(kind: str, args, model_name: str, kept: Kept) -> list[str]:
    """Where the run is, which checkpoint is best, and how to use it, for this backend."""
    lines = [f"run state, history and checkpoints: {kept.where}"]
    if kept.best:
        also = "it is the latest step" if kept.best[0] == kept.latest else f"with the latest, step {kept.latest}"
        lines.append(f"best validation reward {kept.best[1]:.3f} at step {kept.best[0]} (kept, {also})")
    ckpt = kept.where / "checkpoints" / f"{kept.step:04d}"
    if kind == "local":
        rank = f" --max-lora-rank {args.lora_rank}" if args.lora_rank and args.lora_rank > 16 else ""
        lines += [
            "serve it with vLLM (pip install vllm: ART's backend extra runs its own vLLM runtime, not a `vllm` command):",
            f"  vllm serve {args.base_model} --enable-lora{rank} --lora-modules {model_name}={ckpt}",
        ]
    elif kind == "serverless":
        lines += [
            "call it on W&B's OpenAI-compatible API (billed), with WANDB_API_KEY as the key:",
            f"  base URL {kept.base_url}  model {json.dumps(kept.served_as)}",
        ]
    elif kind == "tinker":
        lines += [
            f"its weights stay on Tinker: sampler_weights_path in {ckpt / 'info.yaml'} is its tinker:// path;",
            "  art.tinker.OpenAICompatibleTinkerServer serves that path as a model name, with TINKER_API_KEY (billed)",
        ]
    # its step 0 is the base model, with no checkpoint folder to serve
    elif kind == "cpu":
        arms = f" --baseline --without-skill {args.without_skill}" if args.internalize else ""
        lines.append(
            cpu.serve_hint(ckpt, args, arms)
            if kept.step
            else "no checkpoint yet: nothing was trained; the same command goes on from here"
        )
    else:
        lines.append(f"served during this run as {kept.served_as} at {kept.base_url}")
    return lines
