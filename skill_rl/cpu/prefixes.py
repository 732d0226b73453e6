"""The keys and values of recent prompts, kept for the next decoding call whose prompt begins like one of them.

A tool episode asks the policy once a turn, each time with the whole chat so far: SKILL.md, the tools, the task,
the calls made and their results. Its third turn's prompt (1.7k tokens on git-commit-agent) is its second's plus
the commit call and its result (~200 tokens): 16 episodes' third turn computes 3,243 tokens instead of 13,258 when
it reads the second's keys and values from here, a prefill of 16.2 s instead of 38.5 on a 2-core EPYC
(bench/cpu_turns.py). ART's GPU backend has the same from vLLM's prefix caching.

What is kept is only valid for the weights it was computed with: every entry carries the key of the weights
(`Policy.weights_key`: the adapter's state, from torch's version counter of each trained tensor, which every
in-place change bumps: an optimizer step, a checkpoint loaded, a reference's weights swapped in), and a lookup
under another key empties the store. Memory is bounded (`budget` bytes, least recently used first out), and an
entry whose tokens begin another's is dropped, since the longer one serves it too (its keys and values cropped).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class Prefixes:
    def __init__(self, budget: int):
        self.budget = budget
        self.key = None
        # id -> (tokens [length], per-layer (keys, values), bytes), least recently used first
        self.entries: OrderedDict[int, tuple[torch.Tensor, list, int]] = OrderedDict()
        self.bytes = 0
        self._next = 0
        # tokens read from here and computed anew, since the store was made (what bench/cpu_turns.py prints)
        self.reused = self.computed = 0

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0

    def _under(self, key) -> None:
        if key != self.key:
            self.clear()
            self.key = key

    def longest(self, tokens: torch.Tensor, key) -> tuple[int, list | None]:
        """(n, the first n tokens' per-layer (keys, values) as views) for the kept prompt sharing the longest start
        with `tokens` ([length]) under the weights `key`; (0, None) when none shares one."""
        self._under(key)
        best, found = 0, None
        for entry_id, (kept, _, _) in self.entries.items():
            m = min(len(kept), len(tokens))
            differ = (kept[:m] != tokens[:m]).nonzero()
            n = int(differ[0]) if len(differ) else m
            if n > best:
                best, found = n, entry_id
        if found is None:
            return 0, None
        self.entries.move_to_end(found)
        layers = self.entries[found][1]
        return best, [(k[:, :, :best], v[:, :, :best]) for k, v in layers]

    def add(self, tokens: torch.Tensor, layers: list, key) -> None:
        """Keep the per-layer (keys [1, heads, length, dim], values) of `tokens` ([length]), computed under `key`."""
        self._under(key)
        # what it holds in memory: a view (a kept prompt read to its end, nothing after it) holds all it is a view of
        size = sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in layers)
        if size > self.budget or not len(tokens):
            return
        for entry_id, (kept, _, kept_size) in list(self.entries.items()):
            # one that begins this one (or is it) is served by this one; one this one begins serves it
            if len(kept) <= len(tokens) and bool((kept == tokens[: len(kept)]).all()):
                del self.entries[entry_id]
                self.bytes -= kept_size
            elif len(kept) > len(tokens) and bool((kept[: len(tokens)] == tokens).all()):
                self.entries.move_to_end(entry_id)
                return
        self.entries[self._next] = (tokens, layers, size)
        self._next += 1
        self.bytes += size
        while self.bytes > self.budget:
            _, (_, _, dropped) = self.entries.popitem(last=False)
            self.bytes -= dropped
