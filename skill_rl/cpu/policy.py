"""The policy: a base model with LoRA adapters, sampled with logprobs and trained, under one lock."""

from __future__ import annotations

import copy
import shutil
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from skill_rl.cpu import toolcalls
from skill_rl.cpu.prefixes import Prefixes
from skill_rl.cpu.presets import LORA, PREFIX_BYTES
from skill_rl.cpu.weights import (
    checkpoint_problem,
    load_base,
    locate,
    packed_decoding,
    precision,
    release_memory,
    threads,
)
from skill_rl.errors import Exit
from skill_rl.text import brief


@dataclass
class Sample:
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    # ended with an end-of-turn token, not at max_tokens
    finished: bool


def _rows_stopped(abandoned):
    """transformers' stopping criteria for the rows `abandoned()` marks (none without it): a row marked stops
    decoding, and the batch ends once every row has stopped or finished."""
    if abandoned is None:
        return None
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Abandoned(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.tensor(abandoned(), dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([Abandoned()])


def _cache_of(layers):
    """A transformers cache holding per-layer (keys, values)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (keys, values) in enumerate(layers):
        cache.update(keys, values, i)
    return cache


# tokens that prompts decoded together must share before their common start is computed once
SHARED_MIN = 32


class Policy:
    """A base model with LoRA adapters; one lock orders sampling, training and checkpoint loads."""

    def __init__(self, base_model: str, seed: int = 0):
        import torch
        from peft import LoraConfig, get_peft_model

        from skill_rl.cpu.decoder import Decoder

        torch.set_num_threads(threads())
        # transformers 5.x
        for old_name in ("`past_key_values` is deprecated", "`is_gradient_checkpointing` is deprecated"):
            warnings.filterwarnings("ignore", message=old_name, category=FutureWarning)
        # PEFT, on a GGUF folder
        warnings.filterwarnings("ignore", message="Could not find a config file in", category=UserWarning)
        started = time.perf_counter()
        self.tokenizer, base = load_base(*locate(base_model))
        self.load_seconds = time.perf_counter() - started
        torch.manual_seed(seed)
        self.dtype = precision()
        model = copy.deepcopy(base).to(getattr(torch, self.dtype))
        # logprobs from float32 logits: bf16's 8-bit mantissa would put ~0.05 nats of
        if self.dtype != "float32":
            # rounding into every token's sampling/training ratio
            head = model.get_output_embeddings()
            # (unties it)
            head.weight = torch.nn.Parameter(head.weight.detach().float(), requires_grad=False)
            head.register_forward_pre_hook(lambda module, inputs: (inputs[0].float(),))
        self.model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **LORA))
        for p in self.model.parameters():
            # the adapter trains in float32 whatever the base's dtype (see precision)
            if p.requires_grad:
                p.data = p.data.float()
        self.trained = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trained, lr=1e-5)
        # recent prompts' keys and values, for a next turn that begins with one (generate_many)
        self.prefixes = Prefixes(PREFIX_BYTES)
        self.lock = threading.Lock()
        # what the optimizer's moments were last updated for: "sft" or "rl" (see step)
        self.phase = "rl"
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in self.tokenizer.get_vocab() else None
        self.stop_ids = {i for i in (self.tokenizer.eos_token_id, end) if i is not None}
        self.max_positions = getattr(base.config, "max_position_embeddings", None) or 2048
        self.decoder = Decoder.of(self.model, packed=packed_decoding())
        # the last generate_many's seconds of prefill and decoding, and its decoding steps (the decoder's path)
        self.timing: dict = {}

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The prompt's tokens through the model's chat template; tools and tool messages as toolcalls.py renders them."""
        return toolcalls.prompt_ids(self.tokenizer, messages, tools)

    def generate_many(
        self, prompts: list[tuple[list[int], int]], temperature: float, max_tokens: int, adapter: bool, abandoned=None
    ) -> list[Sample]:
        """Completions of several prompts ((prompt, how many) each), decoded together as one batch.

        Each prompt's prefix is computed once (the prompts' common start once for all) and read once per decoding
        step for all its rows (decoder.py); every step runs all rows at once: a step of 4 groups decodes max_tokens
        times, not 4 x max_tokens times, and a row that has ended leaves the batch. Samples come back in the order
        asked; logprobs are of the unscaled (temperature 1) policy. `abandoned`, a function giving one bool per row,
        stops decoding the rows it marks (a served request whose client hung up); what those rows hold is not to be
        used. A model decoder.py does not cover decodes through transformers' generate. `self.timing` holds the
        last call's seconds of prefill and of decoding, and its decoding steps."""
        if self.decoder is None:
            return self._generate_hf(prompts, temperature, max_tokens, adapter, abandoned)
        import torch

        rows = [p for p, n in prompts for _ in range(n)]
        tokens_out: list[list[int]] = [[] for _ in rows]
        logprobs_out: list[list[float]] = [[] for _ in rows]
        with self.lock, torch.no_grad(), self._adapter(adapter):
            self.model.eval()
            started = time.perf_counter()
            adapters = self.decoder.adapters() if adapter else None
            caches = self._prompt_caches([torch.tensor([p[:-1]]) for p, _ in prompts], adapter)
            batch = self.decoder.batch(caches, [n for _, n in prompts], max_tokens)
            del caches
            prefilled = time.perf_counter()
            # batch row -> the row asked for
            live = list(range(len(rows)))
            lengths = torch.tensor([len(p) for p in rows])
            tokens = torch.tensor([p[-1] for p in rows])
            steps = 0
            for t in range(max_tokens):
                logits = self.decoder.step(tokens, lengths[live] - 1 + t, t, batch, adapters)
                steps += 1
                if temperature > 0:
                    chosen = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1)[:, 0]
                else:
                    chosen = logits.argmax(-1)
                picked = logits.log_softmax(-1).gather(1, chosen[:, None])[:, 0]
                gone = abandoned() if abandoned is not None else None
                keep = []
                for j, (row, token, logprob) in enumerate(zip(live, chosen.tolist(), picked.tolist())):
                    tokens_out[row].append(token)
                    logprobs_out[row].append(logprob)
                    if token not in self.stop_ids and not (gone and gone[row]):
                        keep.append(j)
                if not keep:
                    break
                # a row that ended (or was abandoned) leaves the batch
                if len(keep) < len(live):
                    batch = batch.keep(keep)
                    live = [live[j] for j in keep]
                    chosen = chosen[torch.tensor(keep)]
                tokens = chosen
            del batch
        self.timing = {"prefill_s": prefilled - started, "decode_s": time.perf_counter() - prefilled, "steps": steps}
        samples = []
        for prompt, new, logprobs in zip(rows, tokens_out, logprobs_out):
            finished = bool(new) and new[-1] in self.stop_ids
            samples.append(Sample(prompt, new, logprobs, finished))
        release_memory()
        return samples

    def _generate_hf(self, prompts, temperature, max_tokens, adapter, abandoned=None) -> list[Sample]:
        """generate_many through transformers' generate, for a model decoder.py does not cover."""
        import torch

        sampling = (
            {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
            if temperature > 0
            else {"do_sample": False}
        )
        width = max(len(p) for p, _ in prompts)
        rows = [p for p, n in prompts for _ in range(n)]
        ids = torch.tensor([[self.tokenizer.pad_token_id] * (width - len(p)) + p for p in rows])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])
        with self.lock, torch.no_grad(), self._adapter(adapter):
            self.model.eval()
            caches = self._prompt_caches([torch.tensor([p[:-1]]) for p, _ in prompts], adapter)
            cache = self._batch_cache(
                [(c, n, width - len(p)) for c, (p, n) in zip(caches, prompts)], width + max_tokens
            )
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                past_key_values=cache,
                max_new_tokens=max_tokens,
                eos_token_id=sorted(self.stop_ids),
                pad_token_id=self.tokenizer.pad_token_id,
                output_logits=True,
                return_dict_in_generate=True,
                stopping_criteria=_rows_stopped(abandoned),
                **sampling,
            )
        # [rows, new tokens, vocab]
        logprobs = torch.stack(out.logits, dim=1).float().log_softmax(-1)
        samples = []
        for i, prompt in enumerate(rows):
            new = out.sequences[i, width:].tolist()
            end = next((j + 1 for j, t in enumerate(new) if t in self.stop_ids), None)
            new = new[:end]
            samples.append(Sample(prompt, new, [float(logprobs[i, j, t]) for j, t in enumerate(new)], end is not None))
        release_memory()
        return samples

    def _batch_cache(self, caches, size: int):
        """One KV cache for rows of several prefixes, each (its cache, rows, left padding), repeated for its rows
        and left-padded with zeros (masked out by the attention mask), in a cache allocated once for `size`
        positions (the prompts and the new tokens): a growing cache copies all of itself at every decoding step,
        which with a 1,500-token prompt was a third of the generation's time."""
        import torch
        from transformers import StaticCache

        static = StaticCache(config=self.model.config, max_cache_len=size)
        # no layers: every prompt is one token, nothing to prefill
        for i in range(len(caches[0][0].layers)):
            padded = [
                [
                    torch.nn.functional.pad(t, (0, 0, pad, 0)).expand(n, -1, -1, -1)
                    for t in (cache.layers[i].keys, cache.layers[i].values)
                ]
                for cache, n, pad in caches
            ]
            static.update(torch.cat([k for k, _ in padded]), torch.cat([v for _, v in padded]), i)
        return static

    def weights_key(self, adapter: bool) -> tuple:
        """What identifies the weights a prompt is computed with: the adapter on or off, and each trained tensor's
        version counter, which torch bumps at every in-place change (an optimizer step, a checkpoint loaded, a
        reference's weights swapped in and back)."""
        return (adapter, tuple((id(p), p._version) for p in self.trained))

    def _prompt_caches(self, prefixes, adapter: bool) -> list:
        """The KV cache of each prefix ([1, length] each) for decoding: read from the prompts kept from earlier calls
        (Prefixes) as far as one begins the same, the rest computed after it; a prefix that no kept prompt begins
        further than the batch's shared start begins comes after that start, computed once (see shared_prefix).
        Each prefix's cache is kept in turn, for the next turn of its episode."""
        key = self.weights_key(adapter)
        found = [self.prefixes.longest(p[0], key) for p in prefixes]
        start = self.shared_length(prefixes)
        # the shared start is computed only for a prefix that reads no further from a kept prompt
        needs_start = any(n <= start for n, _ in found)
        shared = (start, self.prefix_cache(prefixes[0][:, :start], 1)) if start and needs_start else None
        self.prefixes.computed += start if shared is not None else 0
        caches = []
        for prefix, (n, layers) in zip(prefixes, found):
            reused = n > start
            self.prefixes.reused += n if reused else 0
            self.prefixes.computed += prefix.shape[1] - (n if reused else start)
            caches.append(self.prefix_after((n, _cache_of(layers)) if reused else shared, prefix))
            self.prefixes.add(prefix[0], [(layer.keys, layer.values) for layer in caches[-1].layers], key)
        return caches

    def shared_length(self, prefixes) -> int:
        """How many tokens every prefix ([1, length] each) begins with, when there are several and they share at
        least SHARED_MIN (SKILL.md, the system prompt of every task); else 0."""
        if len(prefixes) < 2:
            return 0
        first, length = prefixes[0][0], min(p.shape[1] for p in prefixes)
        for p in prefixes[1:]:
            differ = (p[0, :length] != first[:length]).nonzero()
            length = int(differ[0]) if len(differ) else length
        return length if length >= SHARED_MIN else 0

    def shared_prefix(self, prefixes) -> tuple[int, object] | None:
        """(length, KV cache) of the tokens every prefix ([1, length] each) begins with (shared_length), computed
        once (with gradients when enabled); None when they share none."""
        length = self.shared_length(prefixes)
        return (length, self.prefix_cache(prefixes[0][:, :length], 1)) if length else None

    def prefix_after(self, shared, prefix, n: int = 1):
        """The KV cache of `prefix` ([1, length]) for `n` rows: the shared start's (shared_prefix's (length, cache), or
        None), forked, with the rest run after it."""
        if shared is None:
            return self.prefix_cache(prefix, n)
        length, cache = shared
        own = self.fork(cache)
        if prefix.shape[1] > length:
            self.model(input_ids=prefix[:, length:], past_key_values=own, use_cache=True, logits_to_keep=1)
        if n > 1:
            for layer in own.layers:
                layer.batch_repeat_interleave(n)
        return own

    def prefix_cache(self, prefix, n: int):
        """The KV cache of `prefix` ([1, length]) computed once, repeated for `n` rows (with gradients when enabled)."""
        from transformers import DynamicCache

        cache = DynamicCache()
        if prefix.shape[1]:
            self.model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
            for layer in cache.layers:
                layer.batch_repeat_interleave(n)
        return cache

    @staticmethod
    def fork(cache):
        """A cache that starts as `cache` and grows on its own: a forward pass appends to the copy only (the
        shared tensors stay in the autograd graph of every fork)."""
        from transformers import DynamicCache

        copy_ = DynamicCache()
        for i, layer in enumerate(cache.layers):
            copy_.update(layer.keys, layer.values, i)
        return copy_

    @staticmethod
    def leaves(cache) -> tuple[object, list]:
        """(a copy of `cache`, its keys and values in order: layer 0's keys, its values, layer 1's keys, ...), these
        being leaves of no graph that gather the gradients (`.grad`) of what reads the copy, so that the cache's own
        graph is left for one later backward pass. (A cache stores what it is given through torch.cat: the copy's
        own tensors are not the leaves.)"""
        from transformers import DynamicCache

        copy_, leaves = DynamicCache(), []
        for i, layer in enumerate(cache.layers):
            pair = (layer.keys.detach().requires_grad_(), layer.values.detach().requires_grad_())
            copy_.update(*pair, i)
            leaves += pair
        return copy_, leaves

    @contextmanager
    def _adapter(self, on: bool):
        if on:
            yield
        else:
            with self.model.disable_adapter():
                yield

    @contextmanager
    def weights_of(self, adapter: dict | None):
        """The model with another adapter's weights for a while (the KL anchor's reference: a state dict as a
        checkpoint's adapter_model.safetensors holds it), or with no adapter at all (None: the base model). The
        trained weights are copied back in place afterwards, so the optimizer's parameters stay the same tensors.
        The caller holds the lock (it is not reentrant) and computes under torch.no_grad()."""
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        if adapter is None:
            with self.model.disable_adapter():
                yield
            return
        own = {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model).items()}
        set_peft_model_state_dict(self.model, adapter)
        try:
            yield
        finally:
            set_peft_model_state_dict(self.model, own)

    def sampling_gaps(self, samples: list[Sample]) -> list[float]:
        """|the sampler's logprob - the trainer's| for every token of `samples` (the trainer's: a plain forward over
        prompt and completion, as the training pass computes them): what ART's ratio clipping has to absorb."""
        import torch

        gaps = []
        with self.lock, torch.no_grad():
            for s in samples:
                if not s.token_ids:
                    continue
                seq = torch.tensor([s.prompt_ids + s.token_ids])
                logits = self.model(input_ids=seq).logits[0, len(s.prompt_ids) - 1 : -1].float()
                trained = logits.log_softmax(-1).gather(1, torch.tensor(s.token_ids)[:, None])[:, 0]
                gaps += [abs(a - float(b)) for a, b in zip(s.logprobs, trained)]
        return gaps

    def token_logprobs(self, tokens, attention_mask, position_ids, needed, cache=None):
        """log p(tokens[:, t+1] | prefix, tokens[:, :t+1]) at column t, computed only where `needed` (else 0).

        `cache` holds a shared prefix (see prefix_cache); `attention_mask` then covers prefix and tokens."""
        import torch
        import torch.nn.functional as F

        cols = needed.any(0).nonzero().flatten()
        out = self.model(
            input_ids=tokens,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=cache is not None,
            logits_to_keep=cols,
        )
        targets = tokens[:, 1:].gather(1, cols.clamp(max=tokens.shape[1] - 2).expand(tokens.shape[0], -1))
        picked = -F.cross_entropy(out.logits.float().transpose(1, 2), targets, reduction="none")
        return torch.zeros(tokens.shape, dtype=picked.dtype).index_copy(1, cols, picked)

    def step(self, learning_rate: float, losses, phase: str = "rl") -> dict[str, float]:
        """One optimizer step over the gradients of `losses` (an iterable of scalar tensors, backpropagated in turn).

        The first RL step after a warm start forgets AdamW's moments: the warm start's cross-entropy gradients are
        2-3 times the policy gradient's (grad norm 0.6-1.1 against 0.3 on git-commit), and a second moment that
        remembers them (beta2 0.999: ~1,000 steps) would shrink RL's first steps by as much, while the first
        moment pushed on toward the references."""
        import torch

        with self.lock:
            # the kept prompts are of the weights this step changes: their memory is the training's
            self.prefixes.clear()
            if phase == "rl" and self.phase == "sft":
                self.optimizer.state.clear()
            self.phase = phase
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
            torch.save({**self.optimizer.state_dict(), "phase": self.phase}, tmp / "optimizer.pt")
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)

    def load(self, folder: Path) -> None:
        import torch
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        problem = checkpoint_problem(folder)
        if problem:
            raise Exit(2, f"{folder}: cannot load this checkpoint: {problem}")
        # weights_only: a pickle that names anything but tensors and plain values is refused, never run
        try:
            weights = load_file(str(folder / "adapter_model.safetensors"))
            optimizer = (
                torch.load(folder / "optimizer.pt", weights_only=True) if (folder / "optimizer.pt").exists() else None
            )
            with self.lock:
                result = set_peft_model_state_dict(self.model, weights)
                if optimizer is not None:
                    # checkpoints before it was saved: RL's
                    self.phase = optimizer.pop("phase", "rl")
                    self.optimizer.load_state_dict(optimizer)
        # a tampered file: whatever torch, safetensors or PEFT raise is one line
        except Exception as e:
            raise Exit(2, f"{folder}: cannot load this checkpoint: {brief(e)}")
        missing = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
        if missing:
            raise Exit(2, f"{folder}: this checkpoint's adapter does not fit the base model ({missing[0]}, ...)")
