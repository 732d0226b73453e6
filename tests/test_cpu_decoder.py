"""The sampler's own decoding loop (skill_rl/cpu/decoder.py) against transformers' forward pass and generate: the
same tokens and logprobs where it multiplies the base's own weights, and a small logprob gap to the trainer where
it multiplies them packed as int4."""

import statistics

import pytest

from skill_rl import cpu

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not cpu.available(), reason="needs the [cpu] extra")]


def adapted_policy(monkeypatch, packed: bool):
    """The tiny model in float32 with LoRA weights that change its answers (a trained adapter's place)."""
    import torch

    monkeypatch.setenv("SKILL_RL_CPU_DTYPE", "float32")
    monkeypatch.setenv("SKILL_RL_CPU_INT4", "1" if packed else "0")
    policy = cpu.Policy(cpu.TINY_MODEL)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return policy


def prompts(policy) -> list[list[int]]:
    """Three prompts of different lengths under one system prompt (its start shared, as a step's are)."""
    system = {"role": "system", "content": "Answer the question in one short sentence. " * 6}
    return [
        policy.prompt_ids([system, {"role": "user", "content": q}])
        for q in ("What is a commit?", "Why write tests before the code, and when not to?", "Name a colour.")
    ]


@pytest.mark.parametrize("counts", [(2, 1, 3), (1, 1, 1)], ids=["rows-per-prompt", "one-row-each"])
def test_the_decoder_answers_as_transformers_generate_with_rows_ending_at_different_steps(monkeypatch, counts):
    """Unpacked, float32: per-prompt rows (or one each: new tokens written after the prompt's keys), a shared start,
    the adapter, and rows that end early (a stop token chosen among the first answer's tokens) leaving the batch:
    the tokens and logprobs of transformers' generate (the path for models the decoder does not cover); without
    the adapter, other logprobs."""
    policy = adapted_policy(monkeypatch, packed=False)
    assert policy.decoder is not None and policy.decoder.packed == 0
    ids = prompts(policy)
    asked = list(zip(ids, counts))
    reference = policy._generate_hf(asked, 0.0, 10, True)
    # a token the first answer writes midway ends the rows that write it, at their own step
    policy.stop_ids = {*policy.stop_ids, reference[0].token_ids[4]}
    reference = policy._generate_hf(asked, 0.0, 10, True)
    got = policy.generate_many(asked, 0.0, 10, True)
    assert [s.token_ids for s in got] == [s.token_ids for s in reference]
    assert [s.finished for s in got] == [s.finished for s in reference]
    assert any(s.finished for s in got) and len({len(s.token_ids) for s in got}) > 1
    for a, b in zip(got, reference):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-3
    # the trainer's forward over the same tokens: no gap where the weights are the trainer's
    assert max(policy.sampling_gaps(got)) < 1e-3
    # the adapter is read: the same prompt decodes to other logprobs without it
    on, off = (policy.generate_many(asked[:1], 0.0, 10, adapter)[0] for adapter in (True, False))
    assert max(abs(x - y) for x, y in zip(on.logprobs, off.logprobs)) > 0.01


def test_packed_decoding_packs_every_layer_matrix_and_keeps_the_logprob_gap_to_the_trainer_small(monkeypatch):
    """The tiny model's GGUF is Q4_1: every layer matrix is 4-bit levels and is packed; sampled at temperature 1,
    each token's logprob is within the bench's bound (0.05 nats mean) of the trainer's forward pass over the
    same tokens."""
    import torch

    policy = adapted_policy(monkeypatch, packed=True)
    assert policy.decoder.packed == 4 * len(policy.decoder.layers)
    ids = prompts(policy)
    torch.manual_seed(0)
    gaps = policy.sampling_gaps(policy.generate_many([(p, 2) for p in ids], 1.0, 16, True))
    assert len(gaps) >= 6 * 8 and statistics.mean(gaps) < 0.05 and max(gaps) < 0.5


def test_a_matrix_that_is_not_4_bit_levels_is_multiplied_as_it_is():
    import torch

    from skill_rl.cpu.decoder import Int4

    # Q4_1's levels: each run of 32 holds its smallest (0) and its largest (15)
    levels = torch.randint(0, 16, (64, 64)).float()
    levels[:, ::32], levels[:, 1::32] = 0, 15
    steps, lows = torch.rand(64, 2, 1) * 0.01, torch.randn(64, 2, 1) * 0.1
    weight = (levels.view(64, 2, 32) * steps + lows).view(64, 64)
    packed = Int4.of(weight)
    assert packed is not None
    x = torch.randn(3, 64)
    assert torch.allclose(packed(x), x @ weight.T, atol=0.02 * float((x @ weight.T).abs().max()))
    assert Int4.of(torch.randn(64, 64)) is None


def test_a_next_turn_reads_its_chat_so_far_from_the_kept_prompts_and_decodes_as_if_computed_anew(monkeypatch):
    """A tool episode's next turn is its last prompt, the answer and the tool's result: its prompt's keys and values
    are read from the last call's (Prefixes) and only the rest is computed, giving the tokens and logprobs of a
    decoding that computes the whole prompt (unpacked, float32: packed, the bf16 rounding of the activations turns
    the 1e-5 of a different summation order into up to 0.1 nats on this random adapter, as the shared start does).
    Weights changed in place (an optimizer step, a checkpoint) or the adapter turned off: nothing kept is read,
    since it is of other weights."""
    import torch

    policy = adapted_policy(monkeypatch, packed=False)
    first = [(p, 1) for p in prompts(policy)]
    answers = policy.generate_many(first, 0.0, 6, True)
    result = policy.tokenizer.encode(" tool says: 3 files changed, the tests pass", add_special_tokens=False)
    after = [(p + a.token_ids + result, 2) for (p, _), a in zip(first, answers)]

    def anew(adapter=True):
        policy.prefixes.clear()
        return policy.generate_many(after, 0.0, 6, adapter)

    def next_turn(adapter=True):
        policy.prefixes.clear()
        policy.generate_many(first, 0.0, 6, True)
        reused = policy.prefixes.reused
        got = policy.generate_many(after, 0.0, 6, adapter)
        return got, policy.prefixes.reused - reused

    def same(a, b):
        assert [s.token_ids for s in a] == [s.token_ids for s in b]
        assert max(abs(x - y) for s, t in zip(a, b) for x, y in zip(s.logprobs, t.logprobs)) < 1e-4

    got, reused = next_turn()
    # every prompt of the next turn began with a kept one, its last token aside
    assert reused == sum(len(p) - 1 for p, _ in first)
    same(got, anew())
    # the adapter off: the kept prompts are the adapter's, not read
    got, reused = next_turn(adapter=False)
    assert reused == 0
    same(got, anew(adapter=False))
    # the adapter's weights changed in place after the first turn: not read either
    policy.prefixes.clear()
    policy.generate_many(first, 0.0, 6, True)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.mul_(-1.0)
    reused = policy.prefixes.reused
    got = policy.generate_many(after, 0.0, 6, True)
    assert policy.prefixes.reused == reused
    same(got, anew())
