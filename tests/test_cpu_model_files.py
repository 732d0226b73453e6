"""Hostile model files for --backend cpu: a truncated or corrupt .gguf, a config.json
that is not an object, a truncated adapter, a tampered optimizer.pt: each is one line and exit 2, found
before loading where it can be (the validation path: no model is loaded here), and no pickle runs code."""

import json
import os
import shutil
import struct
import sys
from importlib.util import find_spec
from pathlib import Path
from types import SimpleNamespace

import pytest

from skill_rl import cpu
from skill_rl.errors import Exit

# the headers are read by the libraries of the [cpu] extra: gguf's GGUFReader, safetensors' safe_open
needs_gguf = pytest.mark.skipif(find_spec("gguf") is None, reason="a GGUF header is read with gguf, of the [cpu] extra")
needs_safetensors = pytest.mark.skipif(
    find_spec("safetensors") is None, reason="an adapter is read with safetensors, of the [cpu] extra"
)


def gguf_bytes(tensors: int = 1, cut: int = 0) -> bytes:
    """A small well-formed GGUF (one metadata string, `tensors` F32 tensors of 4x8), less its last `cut` bytes."""

    def text(s: str) -> bytes:
        return struct.pack("<Q", len(s)) + s.encode()

    head = b"GGUF" + struct.pack("<IQQ", 3, tensors, 2)
    head += text("general.architecture") + struct.pack("<I", 8) + text("llama")
    head += text("general.alignment") + struct.pack("<II", 4, 32)
    for i in range(tensors):
        head += text(f"t{i}") + struct.pack("<I", 2) + struct.pack("<QQ", 8, 4) + struct.pack("<IQ", 0, i * 128)
    head += b"\0" * (-len(head) % 32)
    data = head + b"\0" * (128 * tensors)
    return data[: len(data) - cut]


def refused(base_model: str) -> str:
    with pytest.raises(Exit) as stop:
        cpu.locate(base_model)
    assert stop.value.code == 2
    text = str(stop.value)
    assert "\n" not in text and len(text) < 400, text
    return text


@needs_gguf
def test_a_well_formed_gguf_passes_the_check(tmp_path):
    (tmp_path / "m.gguf").write_bytes(gguf_bytes(3))
    assert cpu.locate(str(tmp_path / "m.gguf")) == (str(tmp_path), "m.gguf")


@pytest.mark.parametrize(
    "case, data, words",
    [
        pytest.param("tensor data cut short", gguf_bytes(3, cut=100), "cut short", marks=needs_gguf),
        pytest.param("header cut short", gguf_bytes(3)[:60], "cut short", marks=needs_gguf),
        ("not a GGUF file", b"hello, world", "not a GGUF file"),
        ("an unknown version", b"GGUF" + struct.pack("<IQQ", 99, 0, 0), "version 99"),
        pytest.param(
            "a string longer than the file",
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**62),
            "cut short",
            marks=needs_gguf,
        ),
        pytest.param(
            "an array count past the file's end",
            b"GGUF"
            + struct.pack("<IQQ", 3, 0, 1)
            + struct.pack("<Q", 1)
            + b"k"
            + struct.pack("<IIQ", 9, 0, 2**40)
            + b"\0" * 2**16,
            "cut short",
            marks=needs_gguf,
        ),
    ],
)
def test_a_corrupt_gguf_is_refused_in_one_line_before_loading(tmp_path, case, data, words):
    (tmp_path / "m.gguf").write_bytes(data)
    text = refused(str(tmp_path / "m.gguf"))
    assert text.startswith(f"--base-model {tmp_path / 'm.gguf'}: ") and words in text


@pytest.mark.parametrize("library", ["gguf", "safetensors"])
def test_without_the_cpu_extra_a_model_file_check_is_one_line_naming_it(tmp_path, monkeypatch, library):
    # as if not installed: importing it raises ImportError
    monkeypatch.setitem(sys.modules, library, None)
    (tmp_path / "m.gguf").write_bytes(gguf_bytes(1))
    with pytest.raises(Exit) as stop:
        cpu.locate(str(tmp_path / "m.gguf")) if library == "gguf" else cpu.checkpoint_problem(
            checkpoint(tmp_path / "0001")
        )
    assert stop.value.code == 2 and str(stop.value) == (
        f'reading this model\'s files needs the {library} package of the [cpu] extra: pip install -e ".[cpu]"'
    )


@pytest.mark.parametrize(
    "config, words",
    [
        ("[1, 2]", "must be a JSON object, got list"),
        ('{"model_type": ', "not valid JSON"),
        ('{"model_type": 3}', "'model_type' must be a string"),
        (b"\xff\xfe{}", "not valid JSON"),
    ],
)
def test_a_config_json_that_is_not_an_object_is_refused_in_one_line(tmp_path, config, words):
    (tmp_path / "config.json").write_bytes(config if isinstance(config, bytes) else config.encode())
    text = refused(str(tmp_path))
    assert "config.json" in text and words in text, text


def checkpoint(where: Path, adapter: bytes | None = None) -> Path:
    """A checkpoint folder whose adapter is a one-tensor safetensors file (whole unless `adapter` is given)."""
    where.mkdir()
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
    whole = struct.pack("<Q", len(header)) + header + b"\0" * 16
    (where / "adapter_model.safetensors").write_bytes(whole if adapter is None else adapter(whole))
    return where


@pytest.mark.parametrize(
    "case, cut, words",
    [
        ("tensor data cut short", lambda b: b[:-5], "cut short"),
        ("header cut short", lambda b: b[:20], "cut short"),
        ("header length beyond the file", lambda b: struct.pack("<Q", 2**40) + b[8:], "cut short"),
        ("header not JSON", lambda b: struct.pack("<Q", 4) + b"nope", "not valid JSON"),
    ],
)
@needs_safetensors
def test_a_truncated_adapter_is_refused_in_one_line(tmp_path, case, cut, words):
    folder = checkpoint(tmp_path / "0001", cut)
    assert cpu.checkpoint_problem(checkpoint(tmp_path / "whole")) is None
    problem = cpu.checkpoint_problem(folder)
    assert problem and words in problem and "adapter_model.safetensors" in problem, problem


@needs_safetensors
def test_a_corrupt_optimizer_zip_is_found_before_torch_reads_it(tmp_path):
    import zipfile

    folder = checkpoint(tmp_path / "0001")
    with zipfile.ZipFile(folder / "optimizer.pt", "w") as z:
        z.writestr("archive/data.pkl", b"x" * 1000)
    data = bytearray((folder / "optimizer.pt").read_bytes())
    # one flipped byte inside the stored data
    data[100] ^= 0xFF
    (folder / "optimizer.pt").write_bytes(bytes(data))
    assert "optimizer.pt" in cpu.checkpoint_problem(folder)


class Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


# loads torch
@pytest.mark.slow
def test_a_tampered_optimizer_pt_is_refused_in_one_line_and_its_pickle_never_runs(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    folder = checkpoint(tmp_path / "0001")
    marker = tmp_path / "ran"
    torch.save({"state": {}, "param_groups": [], "x": Payload(marker)}, folder / "optimizer.pt")
    policy = SimpleNamespace(lock=None, model=None, optimizer=None)
    with pytest.raises(Exit) as stop:
        cpu.Policy.load(policy, folder)
    text = str(stop.value)
    assert stop.value.code == 2 and "\n" not in text and len(text) < 400 and "cannot load this checkpoint" in text
    assert not marker.exists()


# loads transformers (torch)
@pytest.mark.slow
def test_a_config_that_fails_transformers_own_checks_is_one_line(tmp_path):
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "llama", "hidden_size": 7, "num_attention_heads": 2})
    )
    # well-formed JSON: transformers has the last word
    assert cpu.locate(str(tmp_path)) == (str(tmp_path), None)
    with pytest.raises(Exit) as stop:
        cpu.load_base(str(tmp_path), None)
    text = str(stop.value)
    assert stop.value.code == 2 and "\n" not in text and len(text) < 400 and "hidden size (7)" in text, text


@pytest.mark.slow  # torch
def test_a_gguf_base_model_is_converted_once_and_later_loads_read_the_conversion(tmp_path, monkeypatch):
    """The first load of a GGUF file keeps its conversion in the cache; a later load reads it (no conversion), gives
    the same logits and says it came from the GGUF's folder (PEFT records that as the adapter's base); a damaged
    conversion is not loaded (load_base converts again)."""
    import torch

    from skill_rl.cpu import weights

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    folder, gguf = cpu.locate(cpu.TINY_MODEL)
    weights.load_base.cache_clear()
    tokenizer, first = weights.load_base(folder, gguf)
    (kept,) = (tmp_path / "hf" / "skill-rl-gguf").iterdir()
    assert (kept / "model.safetensors").is_file() and (kept / "tokenizer.json").is_file()

    def converting(*args):
        raise AssertionError("converted again")

    weights.load_base.cache_clear()
    monkeypatch.setattr(weights, "_keep_converted", converting)
    tokenizer2, second = weights.load_base(folder, gguf)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Say hi."}], return_tensors="pt", return_dict=True)
    ids2 = tokenizer2.apply_chat_template(
        [{"role": "user", "content": "Say hi."}], return_tensors="pt", return_dict=True
    )
    assert torch.equal(ids["input_ids"], ids2["input_ids"]) and tokenizer.chat_template == tokenizer2.chat_template
    with torch.no_grad():
        assert torch.equal(first(**ids).logits, second(**ids2).logits)
    assert second.name_or_path == second.config._name_or_path == tokenizer2.name_or_path == folder

    # the same bytes under another path (another venv's copy of the package): the same conversion, none made
    elsewhere = tmp_path / "another-venv"
    elsewhere.mkdir()
    try:
        os.link(Path(folder) / gguf, elsewhere / gguf)
    # another file system: a copy
    except OSError:
        shutil.copyfile(Path(folder) / gguf, elsewhere / gguf)
    weights.load_base.cache_clear()
    _, third = weights.load_base(str(elsewhere), gguf)
    assert third.name_or_path == str(elsewhere) and [kept] == list((tmp_path / "hf" / "skill-rl-gguf").iterdir())

    # a damaged conversion does not load, so load_base converts again (as the first load above did); converting
    # once more here would read the GGUF three times for nothing the first load did not show
    (kept / "config.json").write_text("not json")
    assert weights._converted(Path(folder) / gguf) == kept and weights._load_converted(kept, folder) is None
    weights.load_base.cache_clear()


def test_the_conversion_cache_keeps_the_most_recently_used_and_the_one_just_written(tmp_path):
    from skill_rl.cpu import weights

    cache = tmp_path / "skill-rl-gguf"
    folders = [cache / f"c{i}" for i in range(5)]
    for age, folder in enumerate(folders):
        folder.mkdir(parents=True)
        # c0 the newest, c4 the oldest
        os.utime(folder, (1_000_000 - age * 100, 1_000_000 - age * 100))
    # a conversion being written beside them is not the cache's to remove
    (cache / ".c9-partial").mkdir()
    weights._evict(cache, folders[4])
    kept = sorted(p.name for p in cache.iterdir())
    assert kept == sorted([".c9-partial", "c4", *[f"c{i}" for i in range(weights.KEEP_CONVERSIONS - 1)]])
