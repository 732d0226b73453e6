"""The sampler's store of recent prompts' keys and values (skill_rl/cpu/prefixes.py): the longest start a kept
prompt shares, under the weights it was computed with only, in bounded memory."""

import pytest

from skill_rl import cpu

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not cpu.available(), reason="needs the [cpu] extra")]


def layers(tokens, n_layers=2):
    """Per-layer (keys, values) [1, 1, length, 2] that say which tokens they are of (each position holds its token)."""
    import torch

    t = torch.tensor(tokens, dtype=torch.float32)[None, None, :, None].expand(1, 1, len(tokens), 2).contiguous()
    return [(t, t + 0.5) for _ in range(n_layers)]


def test_the_longest_shared_start_is_found_and_cropped_to_it():
    import torch

    from skill_rl.cpu.prefixes import Prefixes

    kept = Prefixes(budget=1 << 20)
    kept.add(torch.tensor([1, 2, 3, 4, 5]), layers([1, 2, 3, 4, 5]), "w")
    kept.add(torch.tensor([1, 2, 9, 9]), layers([1, 2, 9, 9]), "w")
    n, found = kept.longest(torch.tensor([1, 2, 3, 4, 7, 7]), "w")
    assert n == 4 and [k[0, 0, :, 0].tolist() for k, _ in found] == [[1, 2, 3, 4]] * 2
    assert found[0][1][0, 0, :, 0].tolist() == [1.5, 2.5, 3.5, 4.5]
    # a prompt longer than nothing kept, and one that is a kept one's start
    assert kept.longest(torch.tensor([8, 1, 2]), "w") == (0, None)
    assert kept.longest(torch.tensor([1, 2, 9]), "w")[0] == 3


def test_other_weights_find_nothing_and_empty_the_store():
    import torch

    from skill_rl.cpu.prefixes import Prefixes

    kept = Prefixes(budget=1 << 20)
    kept.add(torch.tensor([1, 2, 3]), layers([1, 2, 3]), ("adapter", 1))
    assert kept.longest(torch.tensor([1, 2, 3]), ("adapter", 2)) == (0, None)
    assert not kept.entries and kept.bytes == 0
    # and the old key does not bring them back
    assert kept.longest(torch.tensor([1, 2, 3]), ("adapter", 1)) == (0, None)


def test_a_prompt_another_begins_with_is_dropped_for_the_longer_and_memory_stays_in_budget():
    import torch

    from skill_rl.cpu.prefixes import Prefixes

    size = sum(k.nbytes + v.nbytes for k, v in layers([0] * 10))
    kept = Prefixes(budget=3 * size)
    kept.add(torch.tensor(list(range(5))), layers(list(range(5))), "w")
    # the next turn of that prompt replaces it: it serves the shorter one too
    kept.add(torch.tensor(list(range(10))), layers(list(range(10))), "w")
    assert len(kept.entries) == 1 and kept.longest(torch.tensor([0, 1, 2, 3, 4, 99]), "w")[0] == 5
    # a start of a kept one adds nothing
    kept.add(torch.tensor([0, 1, 2]), layers([0, 1, 2]), "w")
    assert len(kept.entries) == 1 and kept.bytes == size
    # over the budget, the least recently used goes first
    for first in (100, 200, 300):
        kept.add(torch.tensor([first] + [1] * 9), layers([first] + [1] * 9), "w")
    assert kept.bytes <= 3 * size and len(kept.entries) == 3
    assert kept.longest(torch.tensor(list(range(10))), "w") == (0, None)
    assert kept.longest(torch.tensor([200, 1]), "w")[0] == 2
    # one entry larger than the whole budget is not kept
    kept.add(torch.tensor(list(range(50))), layers(list(range(50))), "w")
    assert kept.longest(torch.tensor(list(range(50))), "w") == (0, None)
