"""The sampler's decoding loop: one token per row per step on the policy's own weights, in the formats the CPU
multiplies fastest, with the trainer's arithmetic everywhere else.

transformers' `generate` spent a 135M-parameter decoding step mostly outside the weights: PEFT's wrappers, a
static cache attended over its whole padded length, the key/value heads repeated for every query head, the
Python of its logits processors. Here a step is the model written out once (Llama's layers: RMSNorm, rotary
attention with grouped key/value heads, SwiGLU), reading the same tensors the trainer trains:

- a base matrix whose values are 4-bit levels (a Q4_1 GGUF's, as the tiny model's are: 16 evenly spaced values
  per run of 32 inputs, the smallest and the largest among them) is multiplied packed as int4, from exactly those
  levels: the weights it stands for are the trainer's, up to bf16's rounding of each run's step and offset
  (`Int4`); any other matrix is multiplied as the trainer holds it;
- the LoRA adapters are read live from the PEFT model and added unmerged, in float32 as PEFT adds them (merged
  into 4-bit levels, an update the size of the learning rate would be rounded away);
- the output head is float32, as the trainer's (logprobs from bf16 logits would carry ~0.05 nats of rounding);
- attention reads each prompt's keys and values once a step for all its rows (their queries side by side, a
  key/value head's group of query heads among them), the new tokens' per row, and joins the two softmaxes by
  their log-sum-exps: no prompt is copied per row, nothing is padded or masked;
- rows that have finished leave the batch, so a long answer does not make the short ones' rows decode on.

The logprob gap this leaves against the trainer's forward pass is measured by bench/cpu_decode.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

# inputs per run of 4-bit levels (a Q4_1 block)
GROUP = 32
# a matrix is packed as int4 only where every weight lies this close to its level (a share of the level's step)
LEVEL_TOLERANCE = 0.02


class Int4:
    """A [out, in] matrix of 4-bit levels per GROUP inputs, packed for torch's int4 CPU kernel; None where the
    matrix is not of that form (then it is multiplied as it is)."""

    def __init__(self, packed, scales_and_zeros):
        self.packed, self.scales_and_zeros = packed, scales_and_zeros

    @classmethod
    def of(cls, weight: torch.Tensor) -> Int4 | None:
        out, inp = weight.shape
        if inp % GROUP or not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
            return None
        w = weight.float().view(out, inp // GROUP, GROUP)
        low, high = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
        step = (high - low) / 15
        safe = torch.where(step > 0, step, torch.ones_like(step))
        levels = ((w - low) / safe).round().clamp(0, 15)
        # every weight must sit on its level (bf16's rounding aside): else this is not a 4-bit matrix
        if ((w - low - levels * step).abs() > LEVEL_TOLERANCE * safe + 1e-8).any():
            return None
        q = levels.to(torch.int32).view(out, inp)
        # the kernel reads a weight as (level - 8) * scale + zero
        scales = step[..., 0].t().contiguous()
        zeros = (low[..., 0] + 8 * step[..., 0]).t().contiguous()
        scales_and_zeros = torch.stack([scales, zeros], dim=-1).to(torch.bfloat16).contiguous()
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2)
        return cls(packed, scales_and_zeros)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # the kernel is fast with bf16 inputs only (a float32 model's activations are rounded to bf16 for it)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.to(torch.bfloat16), self.packed, GROUP, self.scales_and_zeros
        )
        return out.to(x.dtype)


def _matrix(weight: torch.Tensor, packed: bool):
    """A function x -> x @ weight.T: packed as int4 where it can be (see Int4), else as it is."""
    int4 = Int4.of(weight.detach()) if packed else None
    if int4 is not None:
        return int4
    w = weight.detach()
    return lambda x: F.linear(x, w)


def _joined(weights: list[torch.Tensor], packed: bool):
    """One multiplication for several matrices that read the same input (their outputs side by side)."""
    return _matrix(torch.cat([w.detach() for w in weights]), packed)


@dataclass
class _Adapter:
    """A LoRA adapter on one projection, read live: x -> (x @ A.T @ B.T) * scaling, in float32."""

    a: torch.Tensor
    b: torch.Tensor
    scaling: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x.float(), self.a), self.b) * self.scaling


def _adapter(module) -> _Adapter | None:
    """The LoRA adapter PEFT put on `module` (its active one), or None."""
    names = getattr(module, "active_adapters", None) or []
    for name in names:
        if name in getattr(module, "lora_A", {}):
            return _Adapter(module.lora_A[name].weight, module.lora_B[name].weight, float(module.scaling[name]))
    return None


def _base(module) -> torch.Tensor:
    return getattr(module, "base_layer", module).weight


class _Layer:
    def __init__(self, layer, packed: bool):
        attn, mlp = layer.self_attn, layer.mlp
        self.norm_in, self.norm_post = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
        self.eps = layer.input_layernorm.variance_epsilon
        self.q_size = _base(attn.q_proj).shape[0]
        self.kv_size = _base(attn.k_proj).shape[0]
        self.qkv = _joined([_base(attn.q_proj), _base(attn.k_proj), _base(attn.v_proj)], packed)
        self.o = _matrix(_base(attn.o_proj), packed)
        self.adapters = {name: _adapter(getattr(attn, name)) for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
        self.gate_up = _joined([_base(mlp.gate_proj), _base(mlp.up_proj)], packed)
        self.down = _matrix(_base(mlp.down_proj), packed)
        self.inner = _base(mlp.gate_proj).shape[0]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # as LlamaRMSNorm: in float32, back to the input's dtype, then the weight
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def covers(config) -> str | None:
    """Why the decoder cannot run this model (None: it can): it writes out Llama's layers only."""
    rope = getattr(config, "rope_parameters", None) or {}
    if getattr(config, "model_type", None) != "llama":
        return f"model type {getattr(config, 'model_type', None)!r}"
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        return "biases"
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "pretraining_tp", 1) != 1:
        return "activation"
    if rope.get("rope_type", "default") != "default":
        return f"rope type {rope.get('rope_type')!r}"
    return None


class Decoder:
    """The policy's decoding steps (see the module's text); built once per Policy, reading its LoRA weights live."""

    @classmethod
    def of(cls, peft_model, packed: bool = True) -> Decoder | None:
        """The decoder of a PEFT-wrapped model (`packed`: 4-bit matrices packed as int4), or None for a model it does
        not cover (see covers)."""
        return None if covers(peft_model.get_base_model().config) else cls(peft_model, packed)

    def __init__(self, peft_model, packed: bool = True):
        inner = peft_model.get_base_model()
        config = inner.config
        self.model = inner.model
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.dtype = self.model.embed_tokens.weight.dtype
        self.layers = [_Layer(layer, packed) for layer in self.model.layers]
        self.norm, self.norm_eps = self.model.norm.weight, self.model.norm.variance_epsilon
        self.head = inner.get_output_embeddings().weight
        rotary = self.model.rotary_emb
        self.inv_freq, self.rope_scale = rotary.inv_freq.float(), float(rotary.attention_scaling)

    @property
    def packed(self) -> int:
        """How many of the layers' matrices are multiplied as int4."""
        return sum(
            isinstance(m, Int4) for layer in self.layers for m in (layer.qkv, layer.o, layer.gate_up, layer.down)
        )

    def batch(self, prompts: list, counts: list[int], max_tokens: int) -> Batch:
        """A decoding batch of counts[i] rows for prompt i, whose keys and values (but its last token's) are in
        prompts[i] (a transformers cache or per-layer pairs)."""
        # a one-token prompt's cache has no layers: nothing comes before its last token
        empty = torch.zeros(1, self.kv_heads, 0, self.head_dim, dtype=self.dtype)
        layers = [
            [(layer.keys, layer.values) for layer in cache.layers]
            if cache.layers
            else [(empty, empty)] * len(self.layers)
            for cache in prompts
        ]
        ends = [sum(counts[: i + 1]) for i in range(len(counts))]
        shape = (ends[-1], self.kv_heads, max_tokens, self.head_dim)
        new = [(torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)) for _ in self.layers]
        return Batch(layers, [(end - n, end) for end, n in zip(ends, counts)], new)

    def step(self, tokens, positions, at: int, batch: Batch, adapter: bool) -> torch.Tensor:
        """float32 logits [rows, vocab] after `tokens` [rows] at their own `positions`, their keys and values
        written to the batch's new-token cache at index `at` (every row's)."""
        rows = tokens.shape[0]
        x = self.model.embed_tokens(tokens)
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.rope_scale).to(self.dtype)[:, None, :]
        sin = (emb.sin() * self.rope_scale).to(self.dtype)[:, None, :]
        for i, layer in enumerate(self.layers):
            h = _rms_norm(x, layer.norm_in, layer.eps)
            q, k, v = layer.qkv(h).split((layer.q_size, layer.kv_size, layer.kv_size), dim=-1)
            if adapter:
                q, k, v = (
                    (t.float() + a(h)).to(self.dtype) if (a := layer.adapters[name]) is not None else t
                    for t, name in ((q, "q_proj"), (k, "k_proj"), (v, "v_proj"))
                )
            q = _rotate(q.reshape(rows, self.heads, self.head_dim), cos, sin)
            keys, values = batch.new[i]
            keys[:, :, at] = _rotate(k.reshape(rows, self.kv_heads, self.head_dim), cos, sin)
            values[:, :, at] = v.reshape(rows, self.kv_heads, self.head_dim)
            out = self._attend(i, q, at, batch)
            o = layer.o(out)
            if adapter and (a := layer.adapters["o_proj"]) is not None:
                o = (o.float() + a(out)).to(self.dtype)
            x = x + o
            h = _rms_norm(x, layer.norm_post, layer.eps)
            gate, up = layer.gate_up(h).split(layer.inner, dim=-1)
            x = x + layer.down(F.silu(gate) * up)
        x = _rms_norm(x, self.norm, self.norm_eps)
        return F.linear(x.float(), self.head)

    def _attend(self, i: int, q: torch.Tensor, at: int, batch: Batch) -> torch.Tensor:
        """Layer i's attention of the rows' queries [rows, heads, dim] over their prompt and their new tokens: each
        prompt's keys and values read once for all its rows (their queries side by side, a key/value head's group
        of query heads among them), the new tokens' per row, the two softmaxes joined by their log-sum-exps."""
        rows, group = q.shape[0], self.heads // self.kv_heads
        q = q.view(rows, self.kv_heads, group, self.head_dim)
        keys, values = batch.new[i]
        new_out, new_lse = _flash(q, keys[:, :, : at + 1], values[:, :, : at + 1])
        outs, lses = [], []
        for (start, end), prefix in zip(batch.groups, batch.prompts):
            n = end - start
            k, v = prefix[i]
            if k.shape[2] == 0:
                # a one-token prompt: nothing before its last token
                outs.append(torch.zeros(n, self.kv_heads, group, self.head_dim, dtype=new_out.dtype))
                lses.append(torch.full((n, self.kv_heads, group), float("-inf")))
                continue
            together = q[start:end].transpose(0, 1).reshape(1, self.kv_heads, n * group, self.head_dim)
            out, lse = _flash(together, k, v)
            outs.append(out.view(self.kv_heads, n, group, self.head_dim).transpose(0, 1))
            lses.append(lse.view(self.kv_heads, n, group).transpose(0, 1))
        prompt_out, prompt_lse = torch.cat(outs), torch.cat(lses)
        lse = torch.logaddexp(prompt_lse, new_lse)
        out = (
            prompt_out.float() * (prompt_lse - lse).exp()[..., None]
            + new_out.float() * (new_lse - lse).exp()[..., None]
        )
        return out.to(self.dtype).reshape(rows, self.heads * self.head_dim)


def _flash(q, k, v):
    """(attention output, log-sum-exp of the scores) of torch's CPU flash attention: queries [b, h, n, d]."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)


@dataclass
class Batch:
    """What a decoding batch attends to: each prompt's keys and values but its last token's (per layer, [1,
    kv heads, length, dim], computed once for all its rows), the rows of each prompt (a range of the batch's rows,
    in the prompts' order), and the new tokens' keys and values (per layer, [rows, kv heads, max tokens, dim])."""

    prompts: list[list[tuple[torch.Tensor, torch.Tensor]]]
    groups: list[tuple[int, int]]
    new: list[tuple[torch.Tensor, torch.Tensor]]

    def keep(self, rows: list[int]) -> Batch:
        """The batch of these rows only (in order): a prompt none of them comes from is left out."""
        prompts, groups, at = [], [], 0
        for prefix, (start, end) in zip(self.prompts, self.groups):
            n = sum(start <= r < end for r in rows)
            if n:
                prompts.append(prefix)
                groups.append((at, at + n))
                at += n
        index = torch.tensor(rows)
        return Batch(prompts, groups, [(k[index], v[index]) for k, v in self.new])
