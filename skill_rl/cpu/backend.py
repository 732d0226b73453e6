"""CPUBackend: ART's backend interface on CPU (register, train, _train_sft, checkpoints), and serving a
checkpoint for --eval.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from skill_rl.cpu import toolcalls
from skill_rl.cpu.policy import SHARED_MIN, Policy
from skill_rl.cpu.presets import TRAIN_GROUP_BYTES, TRAIN_TOKEN_BYTES
from skill_rl.cpu.server import Server
from skill_rl.cpu.weights import TINY_MODEL
from skill_rl.errors import Exit
from skill_rl.progress import phase


@dataclass(frozen=True)
class Anchor:
    """The KL anchor of a training step: its coefficient (0: measured only) and the reference's adapter weights
    (None: the base model without LoRA)."""

    coef: float
    adapter: dict | None


def _next(mask):
    """Column t says whether token t+1 is trained: where its logprob (predicted at t) is needed."""
    shifted = mask.roll(-1, 1)
    shifted[:, -1] = False
    return shifted


def _alike(packed) -> int:
    """How many first columns the packed rows hold alike (token and position, none of it padding), leaving every
    row at least two tokens after them. Which of those tokens a row trains may differ (ART splits an episode
    whose turns do not render as one chat into rows that train some of its answers each)."""
    import torch

    same = torch.ones(packed["tokens"].shape[1], dtype=torch.bool)
    for key in ("tokens", "input_pos"):
        same &= (packed[key] == packed[key][:1]).all(0)
    same &= (packed["group_ids"] >= 0).all(0)
    differ = (~same).nonzero()
    alike = int(differ[0]) if len(differ) else len(same)
    shortest = int((packed["group_ids"] >= 0).sum(1).min())
    return max(0, min(alike, shortest - 2))


def _rows(packed, rows) -> dict:
    """The packed tensors of some rows (a slice), the rest of the packing as it is."""
    count = packed["tokens"].shape[0]
    return {k: v[rows] if hasattr(v, "shape") and v.shape[:1] == (count,) else v for k, v in packed.items()}


def _common(rows_of: list, rows: list[int], begin: int) -> int:
    """How many columns from `begin` the rows (lists of (token, position)) hold alike."""
    first, n = rows_of[rows[0]], min(len(rows_of[r]) for r in rows) - begin
    return next((i for i in range(n) if any(rows_of[r][begin + i] != first[begin + i] for r in rows)), n)


def _saved(rows_of: list, rows: list[int], begin: int) -> int:
    """The tokens from column `begin` that running the rows as a tree of the stretches they hold alike saves
    against running each row's: in sorted order, what each row holds alike with the one before it."""
    ordered = sorted(rows_of[r][begin:] for r in rows)
    return sum(_common([a, b], [0, 1], 0) for a, b in zip(ordered, ordered[1:]))


def _rows_of(packed) -> list[list[tuple[int, int]]]:
    """Each packed row's (token, position) pairs, padding left out: what _tree compares to find the stretches rows
    hold alike."""
    valid = (packed["group_ids"] >= 0).sum(1).tolist()
    tokens, positions = packed["tokens"], packed["input_pos"]
    return [list(zip(tokens[r, :n].tolist(), positions[r, :n].tolist())) for r, n in enumerate(valid)]


def _tree_tokens(packed) -> int:
    """The tokens after the prompt that CPUBackend._tree runs for the rows: all of theirs, less what the tree of their
    alike stretches saves (_saved; stretches too short to share, run side by side, are counted once too, so a little
    under what runs)."""
    rows_of = _rows_of(packed)
    return sum(map(len, rows_of)) - _saved(rows_of, list(range(len(rows_of))), 0)


def _joined(pieces: list[list], packed):
    """Each row's logprobs from its pieces, padded with zeros to the packed width: [rows, width]."""
    import torch
    import torch.nn.functional as F

    width = packed["tokens"].shape[1]
    return torch.stack([F.pad(torch.cat(p), (0, width - sum(len(x) for x in p))) for p in pieces])


def _available_bytes() -> int | None:
    """The memory the kernel says is available now (/proc/meminfo's MemAvailable), None where it does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def sft_ready(trajectory, template: str | None):
    """A warm start's example for ART's SFT tokenizer: as it is, unless it carries tools or tool messages and the
    model's chat template does not take tools (SmolLM2's); then its messages in the Hermes format the server
    speaks (toolcalls.py), tools and all written into the text, so the assistant's calls are trained as the model
    writes them and the tool results, now user turns, are not."""
    messages = trajectory.messages_and_choices
    if not all(isinstance(m, dict) for m in messages):
        return trajectory
    rendered, extra = toolcalls.rendered(list(messages), trajectory.tools, template)
    if extra or rendered == list(messages):
        return trajectory
    return trajectory.model_copy(update={"messages_and_choices": rendered, "tools": None})


class CPUBackend:
    """ART's backend interface, as the training loop and `TrainableModel` call it, for one model."""

    def __init__(self, seed: int = 0, quiet: bool = False) -> None:
        # quiet: no progress (progress.phase) for the warm start's and RL's passes
        self.seed, self.quiet = seed, quiet
        # Loading, training and saving run on one thread: each thread that allocates gets its own malloc
        # arena, and arenas holding a long prompt's activations each keep their memory.
        self.worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="skill-rl-cpu")
        self.policy: Policy | None = None
        self.server: Server | None = None
        self.model_name: str | None = None
        # the KL reference's folder, its adapter
        self._anchor_weights: tuple[Path | None, dict | None] = (None, None)

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
        """The server's address and its key (random, made when it started): ART's client sends it with every request."""
        return self.server.url, self.server.api_key

    def _model_inference_name(self, model, step: int | None = None) -> str:
        # the latest step is the one served; `base` serves the model without the adapter
        return model.name

    async def _get_step(self, model) -> int:
        from art.utils.get_model_step import get_step_from_dir

        return get_step_from_dir(str(self._dir(model)))

    async def _delete_checkpoint_files(self, model, steps_to_keep: list[int]) -> None:
        from art.local.checkpoints import delete_checkpoints

        delete_checkpoints(str(self._dir(model)), steps_to_keep)

    @asynccontextmanager
    async def exact_adapter_lease(self, model, step: int):
        yield

    async def train(
        self,
        model,
        trajectory_groups,
        *,
        learning_rate: float = 1e-5,
        kl_penalty_coef: float = 0.0,
        kl_penalty_reference_step: int | None = None,
        kl_ref_adapter_path: str | None = None,
        **kwargs,
    ):
        """One RL step. The KL anchor takes LocalBackend's arguments: `kl_penalty_coef` > 0 adjusts each token's
        advantage by its KL to the reference, the checkpoint of `kl_penalty_reference_step` or the adapter at
        `kl_ref_adapter_path` (neither, or step 0: the base model without LoRA). A reference given with the
        coefficient at 0 is measured (`loss/kl_policy_ref`) and changes nothing."""
        from art.types import TrainResult

        groups = list(trajectory_groups)
        step = await self._get_step(model) + 1
        anchor = None
        if kl_penalty_coef > 0 or kl_penalty_reference_step is not None or kl_ref_adapter_path is not None:
            anchor = Anchor(
                kl_penalty_coef, await self._run(self._reference, model, kl_penalty_reference_step, kl_ref_adapter_path)
            )
        metrics = await self._run(self._train_step, groups, learning_rate, anchor)
        await self._run(self.policy.save, self._checkpoint(model, step))
        return TrainResult(step=step, metrics=metrics)

    def _reference(self, model, step: int | None, path: str | None) -> dict | None:
        """The KL reference's adapter weights (None: the base model), read once per folder and kept."""
        from safetensors.torch import load_file

        from skill_rl.cpu.weights import checkpoint_problem

        folder = Path(path) if path is not None else self._checkpoint(model, step) if step else None
        if folder is None:
            return None
        if self._anchor_weights[0] != folder:
            if problem := checkpoint_problem(folder):
                raise Exit(2, f"the KL anchor's reference {folder}: {problem}")
            self._anchor_weights = (folder, load_file(str(folder / "adapter_model.safetensors")))
        return self._anchor_weights[1]

    def _train_step(self, groups, learning_rate: float, anchor: Anchor | None = None) -> dict[str, float]:
        """ART's tokenization, advantages, packing and loss; this module's forward/backward on CPU."""
        started = time.perf_counter()
        parts, trained = self._parts(groups)
        tokens = sum(int(p["assistant_mask"].sum()) for _, p in parts)
        # every group scored alike: no advantage, no gradient; the step still counts
        if not tokens:
            return {"loss/train": 0.0, "cpu/trained_trajectories": 0.0, "cpu/train_s": time.perf_counter() - started}
        # the sampled tokens' summed log ratio to the anchor's reference, filled in by _loss
        kl = [0.0]
        with phase("training", len(parts), "groups", self.quiet) as advance:
            metrics = self.policy.step(learning_rate, self._losses(parts, tokens, anchor, kl, ended=advance))
        # ART's name (unsloth/train.py), a mean over the step's trained tokens
        if anchor is not None:
            metrics["loss/kl_policy_ref"] = kl[0] / tokens
        return {
            **metrics,
            "cpu/trained_trajectories": float(trained),
            "cpu/trained_tokens": float(tokens),
            "cpu/train_s": time.perf_counter() - started,
        }

    def _parts(self, groups) -> tuple[list, int]:
        """([(a group's prompt, its rows packed by ART after it)], how many trajectories are trained): ART's
        tokenization and advantages (zero-advantage trajectories dropped), a group's shared prompt one prefix."""
        from art.preprocessing.pack import packed_tensors_from_tokenized_results
        from art.preprocessing.tokenize import tokenize_trajectory_groups

        results = list(
            tokenize_trajectory_groups(
                self.policy.tokenizer, groups, allow_training_without_logprobs=False, scale_rewards=True
            )
        )
        by_prompt: dict[int, list] = {}
        for r in results:
            by_prompt.setdefault(r.prompt_id, []).append(r)
        parts = []
        for same in by_prompt.values():
            suffixes = [r.without_prompt() for r in same]
            packed = packed_tensors_from_tokenized_results(
                suffixes,
                seq_len=max(len(r.token_ids) for r in suffixes),
                verbosity=0,
                pack_results=False,
                pad_token_id=self.policy.tokenizer.pad_token_id,
            )
            parts.append((same[0].token_ids[: same[0].prompt_length], packed))
        return parts, len(results)

    @staticmethod
    def _budget() -> int:
        """Bytes a group's backward pass may hold at once: TRAIN_GROUP_BYTES, or half the memory available now where
        that is less."""
        available = _available_bytes()
        return TRAIN_GROUP_BYTES if available is None else min(TRAIN_GROUP_BYTES, available // 2)

    @staticmethod
    def _chunks(packed, prompt_rest: int, budget: int, share: bool = True) -> list:
        """The group's rows as slices to backpropagate one after another, [all of them] when the group fits `budget`
        (bytes, at TRAIN_TOKEN_BYTES a token run with gradients: the prompt's tokens after the step's shared start,
        then the tokens _tree runs for the rows, each stretch some of them hold alike counted once), else as many rows
        a slice as fit (_in_chunks: each row's own tokens, the stretch all of them hold alike counted once), one at
        least."""
        rows, length = packed["tokens"].shape
        at_once = _tree_tokens(packed) if rows > 1 and share else rows * length
        if (prompt_rest + at_once) * TRAIN_TOKEN_BYTES <= budget:
            return [slice(0, rows)]
        alike = _alike(packed) if rows > 1 and share else 0
        alike = alike if alike >= SHARED_MIN else 0

        def cost(n: int) -> int:
            return (prompt_rest + alike + n * (length - alike)) * TRAIN_TOKEN_BYTES

        size = max(1, next((n for n in range(rows - 1, 0, -1) if cost(n) <= budget), 1))
        return [slice(i, min(i + size, rows)) for i in range(0, rows, size)]

    def _losses(self, parts, tokens: int, anchor: Anchor | None, kl: list, share: bool = True, ended=None):
        """Each group's loss (_loss), for Policy.step to backpropagate in turn. The start every group's prompt shares
        (SKILL.md: the first 847 tokens of git-commit's prompts of 1,065-1,813, bench/cpu_decode.py) is computed once,
        with gradients, as the decoding does: the groups read its keys and values as leaves of their own graphs, which
        sum their gradients, and once the last group's backward pass has run, the start's own backward pass takes
        those sums. The same loss and gradient as a full prompt per group (`share=False`), with the start's forward
        and backward paid once a step rather than once a group. With an anchor, the reference's logprobs come first,
        all groups' under one swap of its weights (its start once too): swapped in later, they would change tensors
        the start's graph holds. A group too big for memory yields a loss per chunk of its rows (_group_losses);
        `ended` is called as each group's last backward pass ends (the progress line)."""
        import torch

        prompts = [torch.tensor([prefix]) for prefix, _ in parts]
        refs = [None] * len(parts)
        if anchor is not None:
            with torch.no_grad(), self.policy.weights_of(anchor.adapter):
                start = self.policy.shared_prefix(prompts) if share else None
                refs = [self._logprobs(start, prompt, packed, share) for prompt, (_, packed) in zip(prompts, parts)]
        start = self.policy.shared_prefix(prompts) if share else None
        copy_, leaves = self.policy.leaves(start[1]) if start is not None else (None, [])
        budget = self._budget()
        for prompt, (_, packed), ref in zip(prompts, parts, refs):
            yield from self._group_losses(
                start and (start[0], copy_), prompt, packed, ref, budget, tokens, anchor, kl, share
            )
            if ended:
                ended()
        if start is not None:
            outputs = [t for layer in start[1].layers for t in (layer.keys, layer.values)]
            pairs = [(t, leaf.grad) for t, leaf in zip(outputs, leaves) if leaf.grad is not None]
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])

    def _group_losses(self, at, prompt, packed, ref, budget: int, tokens: int, anchor, kl: list, share: bool):
        """One group's losses for Policy.step to backpropagate in turn (its prompt's start read from `at`, as
        _logprobs takes it): one loss when the group fits `budget` (_chunks), else one a chunk of its rows."""
        import torch

        chunks = self._chunks(packed, prompt.shape[1] - (at[0] if at else 0), budget, share)
        if len(chunks) == 1:
            yield self._loss(packed, self._logprobs(at, prompt, packed, share), ref, tokens, anchor, kl)
            return
        # too big to backpropagate at once. Without the KL penalty a row's loss is its own (ART sums the tokens'
        # terms, each of its own logprob, over the step's count): each chunk's loss is backpropagated in turn
        if anchor is None or anchor.coef <= 0:
            yield from self._in_chunks(at, prompt, packed, ref, chunks, tokens, anchor, kl, share)
            return
        # with it, every token's advantage moves with the group's mean KL: the logprobs first (chunk by chunk too:
        # a group's logits at once are gigabytes), the loss's gradient with respect to them, then the rows in
        # chunks, each backpropagating its share (a sum whose gradient is the chunk's, whose value is the group's
        # loss for the first chunk and nothing for the others)
        with torch.no_grad():
            whole = torch.cat([self._logprobs(at, prompt, _rows(packed, rows), share) for rows in chunks])
        whole.requires_grad_(True)
        loss = self._loss(packed, whole, ref, tokens, anchor, kl)
        (grad,) = torch.autograd.grad(loss, whole)
        for i, rows in enumerate(chunks):
            share_of = (self._logprobs(at, prompt, _rows(packed, rows), share) * grad[rows]).sum()
            value = loss.detach() if i == 0 else 0.0
            yield share_of - share_of.detach() + value

    def _in_chunks(self, start, prompt, packed, ref, chunks, tokens: int, anchor, kl: list, share: bool):
        """A group's losses chunk by chunk, where a row's loss is its own. The stretch the rows hold alike (_alike)
        runs once for them all, with gradients: the chunks read its results as leaves that gather their gradients,
        and a last sum, whose value is 0, backpropagates those through the stretch (as _losses does the step's
        shared start)."""
        import torch

        count = packed["tokens"].shape[0]
        alike = _alike(packed) if count > 1 and share else 0
        if alike < SHARED_MIN:
            for rows in chunks:
                sub = _rows(packed, rows)
                new = self._logprobs(start, prompt, sub, share)
                yield self._loss(sub, new, None if ref is None else ref[rows], tokens, anchor, kl)
            return
        head, last, cache = self._stretch(start, prompt, packed, alike, _next(packed["assistant_mask"].bool()))
        copy_, leaves = self.policy.leaves(cache)
        head_leaf, last_leaf = head.detach().requires_grad_(), last.detach().requires_grad_()
        for rows in chunks:
            sub = _rows(packed, rows)
            # the stretch's logprobs, the same for every row, then each row's rest after it
            pieces = [[head_leaf] for _ in range(sub["tokens"].shape[0])]
            self._flat(
                self.policy.fork(copy_), sub, list(range(len(pieces))), alike, prompt.shape[1], last_leaf, pieces
            )
            yield self._loss(sub, _joined(pieces, sub), None if ref is None else ref[rows], tokens, anchor, kl)
        outputs = [head, last, *(t for layer in cache.layers for t in (layer.keys, layer.values))]
        grads = [head_leaf.grad, last_leaf.grad, *(leaf.grad for leaf in leaves)]
        through = sum((o * g).sum() for o, g in zip(outputs, grads) if g is not None)
        if torch.is_tensor(through):
            yield through - through.detach()

    def _logprobs(self, start, prompt, packed, share: bool = True):
        """The logprobs of a group's trained tokens (the rows packed after its prompt [1, length]), the prompt's first
        tokens read from `start` ((length, cache) or None: computed here). Where rows go on alike after the prompt,
        all of them or some (a tool episode's first calls and their results, the same for episodes that called
        alike), each such stretch is computed once for the rows that hold it (_tree; `share=False`: each row
        whole)."""
        cache = self.policy.prefix_after(start, prompt, 1)
        if packed["tokens"].shape[0] > 1 and share:
            return self._tree(cache, packed, prompt.shape[1])
        return self._whole(cache, packed, prompt.shape[1])

    def _whole(self, cache, packed, prompt_length: int):
        """Every row run whole after the prompt's KV `cache` (one row)."""
        pieces: list[list] = [[] for _ in range(packed["tokens"].shape[0])]
        self._flat(cache, packed, list(range(len(pieces))), 0, prompt_length, None, pieces)
        return _joined(pieces, packed)

    def _tree(self, cache, packed, prompt_length: int):
        """The rows' logprobs after the prompt's KV `cache` (one row), the rows read as a tree of the stretches they
        hold alike: from where a set of rows last parted (at first: all of them, after the prompt), the stretch they
        go on alike runs once (_run_alike) after the one before it (its keys and values forked for each set that parts
        from it), the log-softmax after it giving each row its next token's logprob; rows that part from the others
        and would save fewer than SHARED_MIN tokens as a tree (answers that part at once) run side by side (_flat).
        The same logprobs and gradient as every row run whole. For a group run at once (_logprobs: under the memory
        budget, or without gradients); a group in chunks runs only the stretch all its rows hold once (_in_chunks)."""
        tokens = packed["tokens"]
        needed = _next(packed["assistant_mask"].bool())
        rows_of = _rows_of(packed)
        lengths = [len(r) for r in rows_of]
        # each row's logprobs, in column order
        pieces: list[list] = [[] for _ in lengths]
        # (the rows' KV cache, the rows, the column they part at, the log-softmax predicting it: None after the prompt)
        todo = [(cache, list(range(len(lengths))), 0, None)]
        while todo:
            cache, rows, begin, last = todo.pop()
            if len(rows) == 1 or _saved(rows_of, rows, begin) < SHARED_MIN:
                self._flat(cache, packed, rows, begin, prompt_length, last, pieces)
                continue
            if last is not None:
                for r in rows:
                    pieces[r].append(last[tokens[r, begin]].reshape(1))
            end = begin + _common(rows_of, rows, begin)
            if end > begin:
                head, last, cache = self._run_alike(cache, packed, rows, begin, end, prompt_length, needed)
                for r in rows:
                    pieces[r].append(head)
            # a row that ends here is done (its last column predicts nothing); the others part by their next token:
            # sets that go on alike far enough to save SHARED_MIN tokens are trees of their own, the rest side by side
            parts: dict[tuple[int, int], list[int]] = {}
            for r in rows:
                if lengths[r] > end:
                    parts.setdefault(rows_of[r][end], []).append(r)
            deeper = [p for p in parts.values() if len(p) > 1 and _saved(rows_of, p, end) >= SHARED_MIN]
            rest = [r for p in parts.values() if p not in deeper for r in p]
            forked = len(deeper) + bool(rest) > 1
            for together in deeper:
                todo.append((self.policy.fork(cache) if forked else cache, together, end, last))
            if rest:
                self._flat(self.policy.fork(cache) if forked else cache, packed, rest, end, prompt_length, last, pieces)
        return _joined(pieces, packed)

    def _flat(self, cache, packed, rows: list[int], begin: int, prompt_length: int, last, pieces: list) -> None:
        """`rows` from column `begin` on, side by side after `cache` (one row, which their columns before `begin`
        share; repeated for them in place), each row's logprobs appended to its pieces: its column begin - 1's from
        `last` (the log-softmax after the stretch before, None: none), then its own."""
        import torch

        tokens = packed["tokens"]
        valid, needed = (packed["group_ids"] >= 0).long(), _next(packed["assistant_mask"].bool())
        width = max(int(valid[r].sum()) for r in rows)
        if last is not None:
            for r in rows:
                pieces[r].append(last[tokens[r, begin]].reshape(1))
        if not needed[rows, begin:width].any():
            # nothing of their rest trained (the part of an episode ART split off another row)
            for r in rows:
                pieces[r].append(torch.zeros(int(valid[r].sum()) - begin))
            return
        for layer in cache.layers:
            layer.batch_repeat_interleave(len(rows))
        mask = torch.cat([torch.ones(len(rows), prompt_length + begin, dtype=torch.long), valid[rows, begin:width]], 1)
        out = self.policy.token_logprobs(
            tokens[rows, begin:width], mask, packed["input_pos"][rows, begin:width], needed[rows, begin:width], cache
        )
        for i, r in enumerate(rows):
            pieces[r].append(out[i, : int(valid[r].sum()) - begin])

    def _stretch(self, start, prompt, packed, alike: int, needed):
        """The prompt's rest and the stretch every row holds alike (_alike), run once as one row (_run_alike)."""
        cache = self.policy.prefix_after(start, prompt, 1)
        return self._run_alike(cache, packed, list(range(packed["tokens"].shape[0])), 0, alike, prompt.shape[1], needed)

    def _run_alike(self, cache, packed, rows: list[int], begin: int, end: int, prompt_length: int, needed):
        """Columns [begin, end) that `rows` hold alike, run once as one row after `cache` (their keys and values
        appended to it): (the logprob of each of its tokens after the first that one of the rows trains
        [end - begin - 1], 0 for the others; the log-softmax after its last token, from which each row's next
        token's logprob is taken [vocabulary]; the cache)."""
        import torch
        import torch.nn.functional as F

        tokens, positions, row = packed["tokens"], packed["input_pos"], rows[0]
        # the columns whose next token lies in the stretch and some row trains, and the stretch's last column
        cols = needed[rows, begin : end - 1].any(0).nonzero().flatten()
        out = self.policy.model(
            input_ids=tokens[row : row + 1, begin:end],
            attention_mask=torch.ones(1, prompt_length + end, dtype=torch.long),
            position_ids=positions[row : row + 1, begin:end],
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=torch.cat([cols, torch.tensor([end - begin - 1])]),
        )
        logits = out.logits.float()[0]
        inside = -F.cross_entropy(logits[:-1], tokens[row, begin + cols + 1], reduction="none")
        head = torch.zeros(end - begin - 1, dtype=inside.dtype).index_copy(0, cols, inside)
        return head, logits[-1].log_softmax(-1), cache

    @staticmethod
    def _loss(packed, new, ref, tokens: int, anchor: Anchor | None, kl: list):
        """ART's policy loss of one group's rows (their logprobs `new`, the reference's `ref`), summed, over all the
        step's tokens.

        ART packs a batch once and normalizes weights and advantages over it; here each group is packed
        and normalized by itself, so that its prompt is computed once (as ART's prefix-tree packing does).
        With an anchor, the reference's logprobs of the same tokens go to ART's loss, which adds
        coef x (the group's mean KL - the token's KL) to each token's advantage, the token's KL being the
        learner's logprob minus the reference's (LocalBackend's default, kl_penalty_source="current_learner");
        ART centres the penalty over its packed batch, this over the group."""
        from art.loss import LossInputs, loss_fn

        keys = ("tokens", "group_ids", "input_pos", "assistant_mask", "logprobs", "advantages", "weights")
        part = {k: packed[k] for k in keys}
        if ref is not None:
            kl[0] += float(((new.detach() - ref) * _next(part["assistant_mask"].bool())).sum())
        config = {"kl_penalty_coef": anchor.coef} if anchor is not None and anchor.coef > 0 else {}
        return loss_fn(LossInputs(inputs=part), new, ref, None, config, reduction="sum").policy_loss / tokens

    async def _train_sft(self, model, trajectories, config, dev_config, verbose: bool = False):
        """Supervised fine-tuning as LocalBackend batches it (ART's tokenizer and batch size), one AdamW step a batch."""
        from art.preprocessing.tokenize import tokenize_sft_batch
        from art.utils.model_config import get_instruction_response_parts
        from art.utils.sft import resolve_sft_batch_size

        tok = self.policy.tokenizer
        examples = [sft_ready(t, getattr(tok, "chat_template", None)) for t in trajectories]
        size = resolve_sft_batch_size(batch_size=config.batch_size, default_batch_size=2)
        parts = get_instruction_response_parts(model.base_model, tok)
        batches = []
        for i in range(0, len(examples), size):
            rate = (
                config.learning_rate[len(batches)] if isinstance(config.learning_rate, list) else config.learning_rate
            )
            batch = tokenize_sft_batch(
                examples[i : i + size],
                rate,
                tok,
                *parts,
                max_seq_length=self.policy.max_positions,
                assistant_turns=config.assistant_turns,
            )
            if batch.num_trainable_tokens:
                batches.append(batch)
        with phase("warm start", len(batches), "batches", self.quiet) as advance:
            for batch in batches:
                metrics = await self._run(self.policy.step, batch.learning_rate, self._sft_losses(batch), "sft")
                advance()
                yield {
                    **metrics,
                    "data/step_num_trajectories": float(len(examples)),
                    "data/step_trainable_assistant_tokens": float(sum(b.num_trainable_tokens for b in batches)),
                    "data/step_num_gradient_steps": float(len(batches)),
                }
        if batches:
            await self._run(self.policy.save, self._checkpoint(model, await self._get_step(model) + 1))

    def _sft_losses(self, batch):
        """Cross-entropy of the batch's labelled tokens over its trainable tokens, as one loss: the tokens every
        example begins with (the system prompt: SKILL.md) computed once, with gradients, and each example's rest
        run after it. The same loss and gradient as a full pass per example, with the shared prompt's forward
        and backward paid once per batch rather than once per example."""
        import torch

        rows = [(t["input_ids"][0], t["labels"][0]) for t in batch.trajectory_tensors]
        shared = min(len(ids) for ids, _ in rows) - 1
        # the prefix ends before the first trained token's predecessor
        for ids, labels in rows:
            differ, first = (ids[:shared] != rows[0][0][:shared]).nonzero(), (labels != -100).nonzero()
            shared = min(shared, int(differ[0]) if len(differ) else shared, int(first[0]) - 1 if len(first) else shared)
        prefix = self.policy.prefix_cache(rows[0][0][:shared].unsqueeze(0), 1)
        total = 0.0
        for ids, labels in rows:
            rest, trained = ids[shared:].unsqueeze(0), _next((labels[shared:] != -100).unsqueeze(0))
            lp = self.policy.token_logprobs(
                rest,
                torch.ones(1, len(ids), dtype=torch.long),
                torch.arange(shared, len(ids)).unsqueeze(0),
                trained,
                self.policy.fork(prefix),
            )
            total = total - (lp * trained).sum()
        yield total / batch.num_trainable_tokens

    async def close(self) -> None:
        if self.server is not None:
            await asyncio.to_thread(self.server.close)
            self.server = None
        self.worker.shutdown(wait=True)


def checkpoint_of(path: Path) -> Path:
    """A checkpoint folder itself, or a run folder's latest checkpoint; exit 2 when there is none."""
    if (path / "adapter_model.safetensors").is_file():
        return path
    steps = sorted((p for p in (path / "checkpoints").glob("[0-9]*") if p.name.isdigit()), key=lambda p: int(p.name))
    if not steps:
        raise Exit(2, f"{path}: neither a checkpoint (adapter_model.safetensors) nor a run folder with checkpoints/")
    return steps[-1]


def serve_checkpoint(
    checkpoint: Path | None,
    base_model: str = TINY_MODEL,
    name: str = "trained",
    port: int = 0,
    api_key: str | None = None,
) -> Server:
    """A server of `base` (no adapter) and, given a checkpoint, `name` (its adapter), on 127.0.0.1:port, answering
    requests that carry `api_key` (a random one when not given: `Server.api_key`)."""
    policy = Policy(base_model)
    names = {"base": False}
    if checkpoint is not None:
        policy.load(checkpoint_of(checkpoint))
        names[name] = True
    return Server(policy, names, port, api_key)
