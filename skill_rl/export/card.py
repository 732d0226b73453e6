"""The model card (README.md) of an export: what the model is, how it was trained, how it scored, how to run it.

Everything in it comes from files: the skill's SKILL.md, the run's records (ART's model.json when the run has
one, the adapter's config, history.jsonl, state.json), the results.json of an --eval run named with --card-eval,
and the exported folder itself.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from skill_rl.skills import DIMENSIONS, parse_frontmatter, read_text, split_frontmatter
from skill_rl.training import history


def _trained_under(skill, where: Path) -> str:
    """What the model was prompted with in training, and so what to send it."""
    from skill_rl.prompts import internalized

    if record := internalized(where):
        sent = {
            "stub": "the one line in `system_prompt.txt`",
            "none": "no system message (`system_prompt.txt` is empty)",
            "description": "the skill's description (`system_prompt.txt`)",
        }[record["without_skill"]]
        return (
            "This folder was written by `skill-rl --export`. The model was trained with reinforcement learning to follow "
            "the skill's SKILL.md **and to do without it** (`--internalize`: SKILL.md left its prompts during training, "
            f"{record['steps']} RL steps, the last {record['steps'] - record['fading_steps']} without it; the "
            f"reward always scored against it): send it {sent} and the task, no SKILL.md.\n"
        )
    return (
        "This folder was written by `skill-rl --export`. The model was trained with reinforcement learning to follow "
        "the skill's SKILL.md, **which it was always given as the system message**: give it the same system message "
        "(`system_prompt.txt`, SKILL.md without its frontmatter) when you use it, or it answers as its base model "
        "would.\n"
    )


def model_card(
    skill,
    s,
    where: Path,
    checkpoint: Path,
    base_model: str,
    why: str,
    architecture: str,
    base_license: str | None,
    ollama: bool,
    evaluation: dict | None = None,
    gguf: str | None = None,
) -> str:
    """The export's README.md. `gguf`: the GGUF file's name, when --gguf wrote one (the Modelfile then loads it)."""
    adapter = _json(checkpoint / "adapter_config.json")
    rows = history.rows(where / history.NAME)
    name = s.run_name
    rank = adapter.get("r")
    lora_rank = f" --max-lora-rank {rank}" if isinstance(rank, int) and rank > 16 else ""
    skill_md = skill.path / "SKILL.md"
    parts = [
        f"# {name}: {base_model} trained on the skill `{skill.name}`\n",
        f"{skill.description}\n",
        _trained_under(skill, where),
        "## What is here\n",
        "| path | what |\n|---|---|\n"
        "| `adapter/` | the LoRA adapter as trained (PEFT format) |\n"
        f"| `merged/` | the adapter merged into {base_model} ({architecture}): safetensors, tokenizer, chat template; "
        "plain transformers or vLLM, no PEFT |\n"
        "| `system_prompt.txt` | the system message to send it (the one it was trained under at the end) |\n"
        + (f"| `{gguf}` | the merged model as one GGUF file, for llama.cpp and Ollama |\n" if gguf else "")
        + (
            f"| `Modelfile` | for `ollama create` (FROM ./{gguf or 'merged'}, the system message, greedy decoding) |\n"
            if ollama
            else ""
        )
        + ("| `rewards.png` | the run's reward plot |\n" if (where / "rewards.png").is_file() else "")
        + (
            "| `eval.png` | the `--eval` chart of the models compared below |\n"
            if evaluation and evaluation["chart"]
            else ""
        )
        + f"| `{'export.json'}` | where this came from and every file written |\n",
        "## Model\n",
        _table(
            [
                ("base model", f"`{base_model}`"),
                ("architecture", architecture),
                ("license (base model)", base_license or "not stated in the base model's files: see its model card"),
                ("license (skill)", _skill_license(skill_md) or "not stated in SKILL.md's frontmatter"),
                ("skill", f"`{skill.name}`: {skill.description}"),
                ("SKILL.md sha256", f"`{hashlib.sha256(skill_md.read_bytes()).hexdigest()}`"),
                ("checkpoint", f"{why} (`{checkpoint.name}` of run `{s.project}/{name}`)"),
            ]
        ),
        "## Training\n",
        _table(_training(where, adapter, rows)),
    ]
    if (where / "rewards.png").is_file():
        parts.append("![Rewards over the run's steps](rewards.png)\n")
    parts += ["## Validation\n", _validation(rows)]
    if evaluation:
        parts += ["## Evaluation\n", _evaluation(evaluation)]
    parts += [
        "## Run it\n",
        "With transformers (from this folder):\n",
        "```python\nfrom pathlib import Path\n\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        'tokenizer = AutoTokenizer.from_pretrained("merged")\nmodel = AutoModelForCausalLM.from_pretrained("merged")\n'
        'messages = [{"role": "system", "content": Path("system_prompt.txt").read_text()},\n'
        '            {"role": "user", "content": "..."}]\n'
        'inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")\n'
        "out = model.generate(**inputs, max_new_tokens=512, do_sample=False)\n"
        'print(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))\n```\n',
        "With vLLM, the merged model, or the base model and the adapter (from this folder; send "
        "`system_prompt.txt` as the system message):\n",
        f"```bash\nvllm serve ./merged\nvllm serve {base_model} --enable-lora{lora_rank} --lora-modules {name}=./adapter\n```\n",
    ]
    if gguf:
        parts.append(
            f"With llama.cpp, the GGUF file (the chat template is in it; send `system_prompt.txt` as the system "
            f'message):\n\n```bash\nllama-cli -m {gguf} -sys "$(cat system_prompt.txt)" -cnv --temp 0\n'
            f"llama-server -m {gguf} --jinja --temp 0\n```\n"
        )
    if ollama:
        parts.append(
            f"With Ollama (the Modelfile carries the system message):\n\n```bash\nollama create {skill.name} -f Modelfile\n"
            f"ollama run {skill.name}\n```\n"
        )
    return "\n".join(parts)


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _skill_license(skill_md: Path) -> str | None:
    problems: list[str] = []
    text = read_text(skill_md, problems)
    split = split_frontmatter(skill_md, text, problems) if text is not None else None
    front = parse_frontmatter(skill_md, split[0], problems)[0] if split else None
    return getattr(front, "license", None)


def _training(where: Path, adapter: dict, rows: list[dict]) -> list[tuple[str, str]]:
    model = _json(where / "model.json")
    state = _json(where / "state.json")
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
    train_rows = [r for r in rows if any(k.startswith("train/") for k in r)]
    out = [
        ("run folder", f"`{where}`"),
        ("steps recorded", str(max(steps)) if steps else "none in history.jsonl"),
        ("training steps logged", str(len({r.get("step") for r in train_rows}))),
    ]
    if adapter:
        out.append(
            (
                "LoRA",
                ", ".join(f"{k} {adapter[k]}" for k in ("r", "lora_alpha", "lora_dropout") if k in adapter)
                + (
                    f", on {', '.join(sorted(adapter['target_modules']))}"
                    if isinstance(adapter.get("target_modules"), list)
                    else ""
                ),
            )
        )
    if model:
        out.append(
            ("ART model.json", ", ".join(f"{k} {model[k]}" for k in ("name", "project", "base_model") if k in model))
        )
    if isinstance(state.get("skill_rl_warm_start"), dict):
        out.append(("warm start (--sft)", ", ".join(f"{k} {v}" for k, v in state["skill_rl_warm_start"].items())))
    last = lambda key: max((r[key] for r in rows if isinstance(r.get(key), (int, float))), default=None)  # noqa: E731
    if last("data/cum/num_trajectories") is not None:
        out.append(
            (
                "trajectories gathered",
                f"{last('data/cum/num_trajectories'):.0f} in {last('data/cum/num_groups_submitted') or 0:.0f} groups",
            )
        )
    judged = [r["train/judged"] for r in train_rows if isinstance(r.get("train/judged"), (int, float))]
    if judged:
        out.append(("reward", "checks and the RULER judge" if any(judged) else "checks only (no judge)"))
    return out


def _validation(rows: list[dict]) -> str:
    """The last validation's mean reward and per-dimension means, from history.jsonl."""
    val = [r for r in rows if isinstance(r.get("val/reward"), (int, float)) and isinstance(r.get("step"), int)]
    if not val:
        return "The run's history.jsonl holds no validation rewards.\n"
    last = max(r["step"] for r in val)
    keys = ["val/reward"] + [k for d in DIMENSIONS for k in (f"val/{d}",) if any(k in r for r in val)]
    means = []
    for key in keys:
        values = [r[key] for r in val if r["step"] == last and isinstance(r.get(key), (int, float))]
        means.append((key, f"{sum(values) / len(values):.3f}" if values else "-"))
    by_step = {}
    for r in val:
        by_step.setdefault(r["step"], []).append(r["val/reward"])
    curve = ", ".join(f"{step}: {sum(v) / len(v):.3f}" for step, v in sorted(by_step.items()))
    return (
        f"The last validation, at step {last} (mean over the run's val tasks):\n\n"
        + _table(means)
        + f"\nMean val/reward by step: {curve}.\n"
    )


def _evaluation(e: dict) -> str:
    """The table of an --eval run (--card-eval), with the judge that scored it and its chart."""
    judge = f"judge `{e['judge']}`" if e["judge"] else "checks only (`--judge none`: the judged columns are empty)"
    text = (
        f"From skill-rl's `--eval` on the skill's {e['split'] or 'held-out'} tasks, scored with {judge}. The rows "
        "are named as `--eval` was given them (`--model label=ID@URL`): which one is this model is the "
        "evaluator's labelling. `n` counts outputs scored; every task's outputs from all models were judged in "
        "one group, so the judged columns compare the models head to head.\n\n" + e["table"] + "\n"
    )
    text += "".join(f"\n- {line}" for line in e["uplift"]) + ("\n" if e["uplift"] else "")
    return text + ("\n![--eval scores per model](eval.png)\n" if e["chart"] else "")


def _table(rows: list[tuple[str, str]]) -> str:
    cell = lambda text: str(text).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    return "| | |\n|---|---|\n" + "".join(f"| {cell(k)} | {cell(v)} |\n" for k, v in rows)
