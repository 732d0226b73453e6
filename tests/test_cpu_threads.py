"""How many torch threads the CPU backend takes: the cores that other work leaves free now."""

import os

import pytest

from skill_rl.cpu import weights
from skill_rl.errors import Exit


def test_busy_cores_is_read_from_the_machine_now():
    busy = weights.busy_cores(0.2)
    assert 0.0 <= busy <= (os.cpu_count() or 1) + 1e-9


def test_threads_are_the_idle_cores_and_at_least_one(monkeypatch):
    monkeypatch.delenv("SKILL_RL_CPU_THREADS", raising=False)
    cores = os.cpu_count() or 1
    monkeypatch.setattr(weights, "busy_cores", lambda seconds=0.5: 0.1)
    # a lagging load average of 1.2 no longer takes a core away
    assert weights.threads() == cores
    monkeypatch.setattr(weights, "busy_cores", lambda seconds=0.5: cores - 0.2)
    assert weights.threads() == 1
    monkeypatch.setenv("SKILL_RL_CPU_THREADS", str(cores))
    assert weights.threads() == cores


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "0", "-1", "1.5", "1e3", "abc", "99999999999999", "cores+1"])
def test_a_thread_count_that_is_not_a_whole_number_up_to_the_cores_is_one_line_exit_2(monkeypatch, value):
    cores = os.cpu_count() or 1
    monkeypatch.setenv("SKILL_RL_CPU_THREADS", str(cores + 1) if value == "cores+1" else value)
    with pytest.raises(Exit) as e:
        weights.threads()
    assert e.value.code == 2 and str(e.value).startswith("SKILL_RL_CPU_THREADS=") and f"1 to {cores}" in str(e.value)


@pytest.mark.parametrize("value", ["yes", "2", "on", "00"])
def test_packed_decoding_is_on_unless_set_to_0_and_another_value_is_one_line_exit_2(monkeypatch, value):
    monkeypatch.delenv("SKILL_RL_CPU_INT4", raising=False)
    assert weights.packed_decoding() is True
    monkeypatch.setenv("SKILL_RL_CPU_INT4", "0")
    assert weights.packed_decoding() is False
    monkeypatch.setenv("SKILL_RL_CPU_INT4", value)
    with pytest.raises(Exit) as e:
        weights.packed_decoding()
    assert e.value.code == 2 and str(e.value) == f"SKILL_RL_CPU_INT4={value!r}: expected 0 or 1"
