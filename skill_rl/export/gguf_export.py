"""`--export DIR --gguf`: the merged model as one GGUF file, for llama.cpp, LM Studio and Ollama.

Written with the `gguf` package's own writer (GGUFWriter, its tensor name map and its quantizer), from the folder
export.merge saves (config.json, model.safetensors, the tokenizer with its chat template), for the architectures
the CPU backend reads: Llama (SmolLM2) and Qwen2. The layout is llama.cpp's, as its convert_hf_to_gguf.py writes it:

- the hyperparameters under `<arch>.` (context, embedding and feed-forward sizes, heads, RMS epsilon, RoPE base);
- every weight under llama.cpp's name (`blk.N.attn_q.weight`, ...); a Llama model's Q and K rows reordered for
  llama.cpp's RoPE (pairs of halves interleaved; transformers' GGUF reader undoes it); no `output.weight` where
  the embeddings are tied;
- norms and biases in F32, the other matrices in the chosen type: F16 or Q8_0 (blocks of 32 with one scale);
- the tokenizer as a GPT-2 BPE vocabulary (tokens, their types, merges, special ids) and its chat template.

A tokenizer that is not byte-level BPE (a SentencePiece Llama) is refused: llama.cpp reads it differently.
tests/test_export.py loads the file back with the CPU backend's own GGUF loader (skill_rl/cpu/weights.py) and
compares its greedy tokens with the merged model's.
"""

from __future__ import annotations

import json
from pathlib import Path

from skill_rl.errors import Exit

# --gguf-type
TYPES = ("f16", "q8_0")
ARCHITECTURES = {"LlamaForCausalLM": "LLAMA", "Qwen2ForCausalLM": "QWEN2"}
# llama.cpp's pre-tokenizer names for the models we train
PRE_TOKENIZERS = {"LLAMA": "smollm", "QWEN2": "qwen2"}


def file_name(kind: str) -> str:
    return f"model-{kind}.gguf"


def problem(merged: Path) -> str | None:
    """Why the merged model cannot be written as GGUF here (None: it can)."""
    config = json.loads((merged / "config.json").read_text())
    arch = (config.get("architectures") or ["?"])[0]
    if arch not in ARCHITECTURES:
        return f"GGUF export covers {', '.join(ARCHITECTURES)}; this model is {arch}"
    tokenizer = merged / "tokenizer.json"
    model = json.loads(tokenizer.read_text()).get("model", {}) if tokenizer.is_file() else {}
    if model.get("type") != "BPE":
        return "GGUF export writes a byte-level BPE tokenizer; this model's tokenizer.json is not one"
    return None


def write(merged: Path, dest: Path, kind: str = "f16", name: str = "skill-rl export") -> Path:
    """Write `merged` (a folder saved by export.merge) to `dest` as GGUF of type `kind`, `name` as its
    general.name (config.json's `_name_or_path` may be a path on the training machine); return `dest`."""
    import gguf

    if why := problem(merged):
        raise Exit(2, f"--export --gguf: {why}")
    config = json.loads((merged / "config.json").read_text())
    arch = getattr(gguf.MODEL_ARCH, ARCHITECTURES[config["architectures"][0]])
    writer = gguf.GGUFWriter(str(dest), gguf.MODEL_ARCH_NAMES[arch])
    ftype = gguf.LlamaFileType.MOSTLY_F16 if kind == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0
    writer.add_name(name)
    hyperparameters(writer, config, ftype)
    vocabulary(writer, merged, arch)
    tensors(writer, merged, config, arch, kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest


def hyperparameters(writer, config: dict, ftype) -> None:
    heads = config["num_attention_heads"]
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads") or heads)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    rope = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta") or 10000.0
    writer.add_rope_freq_base(float(rope))
    writer.add_rope_dimension_count(config.get("head_dim") or config["hidden_size"] // heads)
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(ftype)


def vocabulary(writer, merged: Path, arch) -> None:
    """The tokenizer as llama.cpp reads a GPT-2 BPE one: every id's token and type, the merges, the special ids
    and the chat template (gguf's SpecialVocab reads the last three from the saved tokenizer files)."""
    import gguf
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(merged)
    size = json.loads((merged / "config.json").read_text())["vocab_size"]
    by_id = {i: t for t, i in tok.get_vocab().items()}
    added = tok.added_tokens_decoder
    tokens, types = [], []
    for i in range(size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(by_id[i])
            types.append(
                gguf.TokenType.CONTROL
                if i in added and added[i].special
                else gguf.TokenType.USER_DEFINED
                if i in added
                else gguf.TokenType.NORMAL
            )
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(PRE_TOKENIZERS[arch.name])
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(merged, load_merges=True, n_vocab=size)
    special.add_to_gguf(writer)


def permuted(w, heads: int):
    """Q or K rows in llama.cpp's order for RoPE: each head's two halves interleaved (convert_hf_to_gguf's permute)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tensors(writer, merged: Path, config: dict, arch, kind: str) -> None:
    import gguf
    from safetensors import safe_open

    names = gguf.get_tensor_name_map(arch, config["num_hidden_layers"])
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    llama = arch == gguf.MODEL_ARCH.LLAMA
    tied = config.get("tie_word_embeddings", False)
    for path in sorted(merged.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for hf_name in f.keys():
                if tied and hf_name == "lm_head.weight":
                    # llama.cpp ties the output to token_embd when output.weight is absent
                    continue
                name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
                if name is None:
                    raise Exit(2, f"--export --gguf: no GGUF name for the tensor {hf_name}")
                w = f.get_tensor(hf_name).float().numpy()
                if llama and hf_name.endswith("q_proj.weight"):
                    w = permuted(w, heads)
                elif llama and hf_name.endswith("k_proj.weight"):
                    w = permuted(w, kv)
                writer.add_tensor(name, *encoded(w, kind))


def encoded(w, kind: str):
    """(data, raw shape, raw dtype) for GGUFWriter.add_tensor: vectors in F32, matrices in `kind`."""
    import gguf
    import numpy as np

    if w.ndim == 1 or kind == "f32":
        return w.astype(np.float32), None, None
    if kind == "f16":
        return w.astype(np.float16), None, None
    # Q8_0 blocks are 32 values of a row
    if w.shape[-1] % 32:
        return w.astype(np.float16), None, None
    q = gguf.quants.quantize(w.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    return q, None, gguf.GGMLQuantizationType.Q8_0
