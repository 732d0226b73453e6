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
- the LoRA adapters are read from the PEFT model at each decoding call (q, k and v's joined into one pair of
  matrices) and added unmerged, in float32 as PEFT adds them (merged into 4-bit levels, an update the size of the
  learning rate would be rounded away);
- packed, the output head multiplies in float16 with float32 sums: its logits keep 11 bits (bf16's 8 would carry
  ~0.05 nats of rounding into the logprobs); unpacked it is the trainer's float32;
- attention reads each prompt's keys and values once a step for all its rows (their queries side by side, a
  key/value head's group of query heads among them), the new tokens' per row, and joins the two softmaxes by
  their log-sum-exps: no prompt is copied per row, nothing is padded or masked; where every prompt has one row
  (one answer decoded alone, or one each), its new tokens are written after its prompt's keys and values, and one
  attention call a layer reads both;
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
# Rows up to which the head multiplies in float16: a CPU without native float16 arithmetic emulates it, which pays
# while the step waits on reading the weights and not once it computes (a 2-core AVX2 EPYC, the head alone: 2.8 ms
# against float32's 7.8 for one row, 20 against 24 for 8, 39 against 22 for 16)
HALF_HEAD_ROWS = 8


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
    """LoRA adapters on projections that read the same input, joined: x -> x @ A.T @ B.T in float32, A the adapters'
    A matrices stacked and B their B matrices (times PEFT's scaling) block-diagonal, so the outputs come side by
    side in the projections' order, zero where a projection has no adapter."""

    a: torch.Tensor
    b: torch.Tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x.float(), self.a), self.b)


def _adapter(modules) -> _Adapter | None:
    """The active LoRA adapters PEFT put on `modules` (projections of one input), joined as they are now; None
    where none has one."""
    pairs, sizes = [], []
    for module in modules:
        sizes.append(_base(module).shape[0])
        active = [n for n in getattr(module, "active_adapters", None) or [] if n in getattr(module, "lora_A", {})]
        if active:
            name = active[0]
            pairs.append((module.lora_A[name].weight, module.lora_B[name].weight * float(module.scaling[name])))
        else:
            pairs.append(None)
    if not any(pairs):
        return None
    a = torch.cat([p[0] for p in pairs if p is not None]).float()
    b = torch.zeros(sum(sizes), a.shape[0])
    row = col = 0
    for size, pair in zip(sizes, pairs):
        if pair is not None:
            rank = pair[0].shape[0]
            b[row : row + size, col : col + rank] = pair[1]
            col += rank
        row += size
    return _Adapter(a, b)


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
        # the PEFT modules, whose adapters Decoder.adapters reads
        self.projections = (attn.q_proj, attn.k_proj, attn.v_proj), (attn.o_proj,)
        self.gate_up = _joined([_base(mlp.gate_proj), _base(mlp.up_proj)], packed)
        self.down = _matrix(_base(mlp.down_proj), packed)
        self.inner = _base(mlp.gate_proj).shape[0]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # as LlamaRMSNorm: in float32, back to the input's dtype, then the weight (one fused call in float32)
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    return weight * F.rms_norm(x.float(), weight.shape, eps=eps).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Llama's rotary embedding, x * cos + rotate_half(x) * sin, with `sin`'s first half negated by the caller:
    rotate_half(x) is x's halves swapped (a roll by half the width) with the first negated."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), sin)


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
        # packed, the head multiplies a few rows in float16 with float32 sums (a third of float32's time for one row
        # here: its 28M weights are the largest read of a step), its logits rounded to float16's 11 bits (~0.005
        # nats at a logit of 20); more rows in float32 (see HALF_HEAD_ROWS)
        self.head_half = self.head.detach().half() if packed else None
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
        prompts[i] (a transformers cache or per-layer pairs). Where every prompt has one row, each prompt's keys
        and values are copied once into a buffer with room for its new tokens after them (Batch.lengths)."""
        # a one-token prompt's cache has no layers: nothing comes before its last token
        empty = torch.zeros(1, self.kv_heads, 0, self.head_dim, dtype=self.dtype)
        layers = [
            [(layer.keys, layer.values) for layer in cache.layers]
            if cache.layers
            else [(empty, empty)] * len(self.layers)
            for cache in prompts
        ]
        ends = [sum(counts[: i + 1]) for i in range(len(counts))]
        groups = [(end - n, end) for end, n in zip(ends, counts)]
        if all(n == 1 for n in counts):
            lengths = [prefix[0][0].shape[2] for prefix in layers]
            joined = [
                [
                    tuple(
                        torch.cat([t, torch.zeros(1, self.kv_heads, max_tokens, self.head_dim, dtype=self.dtype)], 2)
                        for t in pair
                    )
                    for pair in prefix
                ]
                for prefix in layers
            ]
            return Batch(joined, groups, [], lengths)
        shape = (ends[-1], self.kv_heads, max_tokens, self.head_dim)
        new = [(torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)) for _ in self.layers]
        return Batch(layers, groups, new)

    def adapters(self) -> list[tuple[_Adapter | None, _Adapter | None]]:
        """Each layer's LoRA adapters as they are now, (q, k and v's joined, o's): taken once per decoding call,
        since the trainer changes them only between calls."""
        return [(_adapter(qkv), _adapter(o)) for qkv, o in (layer.projections for layer in self.layers)]

    def step(self, tokens, positions, at: int, batch: Batch, adapters: list | None) -> torch.Tensor:
        """float32 logits [rows, vocab] after `tokens` [rows] at their own `positions`, their keys and values
        written to the batch's new-token cache at index `at` (every row's); `adapters` from Decoder.adapters, or
        None for the base model."""
        rows, heads = tokens.shape[0], self.heads + self.kv_heads
        x = F.embedding(tokens, self.model.embed_tokens.weight)
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.rope_scale).to(self.dtype)[:, None, :]
        # rotate_half's sign on the first half (see _rotate)
        sign = torch.ones(emb.shape[-1])
        sign[: emb.shape[-1] // 2] = -1
        sin = (emb.sin() * self.rope_scale * sign).to(self.dtype)[:, None, :]
        for i, layer in enumerate(self.layers):
            h = _rms_norm(x, layer.norm_in, layer.eps)
            qkv = layer.qkv(h)
            if adapters is not None and adapters[i][0] is not None:
                qkv = (qkv.float() + adapters[i][0](h)).to(self.dtype)
            # the queries' and keys' heads rotated together
            qk = _rotate(qkv[:, : layer.q_size + layer.kv_size].view(rows, heads, self.head_dim), cos, sin)
            key, value = qk[:, self.heads :], qkv[:, layer.q_size + layer.kv_size :].view(rows, self.kv_heads, -1)
            if batch.lengths is None:
                keys, values = batch.new[i]
                keys[:, :, at], values[:, :, at] = key, value
                out = self._attend(i, qk[:, : self.heads], at, batch)
            else:
                out = self._attend_joined(i, qk[:, : self.heads], key, value, at, batch)
            o = layer.o(out)
            if adapters is not None and adapters[i][1] is not None:
                o = (o.float() + adapters[i][1](out)).to(self.dtype)
            x = x + o
            h = _rms_norm(x, layer.norm_post, layer.eps)
            gate, up = layer.gate_up(h).split(layer.inner, dim=-1)
            x = x + layer.down(F.silu(gate) * up)
        x = _rms_norm(x, self.norm, self.norm_eps)
        if self.head_half is not None and rows <= HALF_HEAD_ROWS:
            return F.linear(x.half(), self.head_half).float()
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
        prompt_out, prompt_lse = (outs[0], lses[0]) if len(outs) == 1 else (torch.cat(outs), torch.cat(lses))
        # the prompt's share of the joined softmax: e^a / (e^a + e^b) for log-sum-exps a and b
        share = torch.sigmoid(prompt_lse - new_lse)[..., None]
        out = torch.lerp(new_out.float(), prompt_out.float(), share)
        return out.to(self.dtype).reshape(rows, self.heads * self.head_dim)

    def _attend_joined(self, i: int, q, key, value, at: int, batch: Batch) -> torch.Tensor:
        """_attend where each row is its prompt's only one: its new key and value written after its prompt's, and
        one attention call over both."""
        outs = []
        for row, (prefix, length) in enumerate(zip(batch.prompts, batch.lengths)):
            keys, values = prefix[i]
            end = length + at + 1
            keys[0, :, end - 1], values[0, :, end - 1] = key[row], value[row]
            together = q[row].view(1, self.kv_heads, self.heads // self.kv_heads, self.head_dim)
            outs.append(_flash(together, keys[:, :, :end], values[:, :, :end])[0])
        out = outs[0] if len(outs) == 1 else torch.cat(outs)
        return out.reshape(q.shape[0], self.heads * self.head_dim)


def _flash(q, k, v):
    """(attention output, log-sum-exp of the scores) of torch's CPU flash attention: queries [b, h, n, d]."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)


@dataclass
class Batch:
    """What a decoding batch attends to: each prompt's keys and values but its last token's (per layer, [1,
    kv heads, length, dim], computed once for all its rows), the rows of each prompt (a range of the batch's rows,
    in the prompts' order), and the new tokens' keys and values (per layer, [rows, kv heads, max tokens, dim]).
    With `lengths`, every prompt has one row, and its new tokens' keys and values are written into the prompt's
    own tensors after its first lengths[i] positions (`new` is empty)."""

    prompts: list[list[tuple[torch.Tensor, torch.Tensor]]]
    groups: list[tuple[int, int]]
    new: list[tuple[torch.Tensor, torch.Tensor]]
    lengths: list[int] | None = None

    def keep(self, rows: list[int]) -> Batch:
        """The batch of these rows only (in order): a prompt none of them comes from is left out."""
        if self.lengths is not None:
            return Batch(
                [self.prompts[r] for r in rows],
                [(j, j + 1) for j in range(len(rows))],
                [],
                [self.lengths[r] for r in rows],
            )
        prompts, groups, at = [], [], 0
        for prefix, (start, end) in zip(self.prompts, self.groups):
            n = sum(start <= r < end for r in rows)
            if n:
                prompts.append(prefix)
                groups.append((at, at + n))
                at += n
        index = torch.tensor(rows)
        return Batch(prompts, groups, [(k[index], v[index]) for k, v in self.new])
