"""The policy: a base model with LoRA adapters, sampled with logprobs and trained, under one lock.
"""

from __future__ import annotations

import copy
import shutil
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from skill_rl.errors import Exit
from skill_rl.skills import brief
from skill_rl.cpu.presets import LORA
from skill_rl.cpu.weights import checkpoint_problem, load_base, locate, release_memory, threads


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
        self.tokenizer, base = load_base(*locate(base_model))
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
