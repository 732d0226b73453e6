"""How many torch threads the CPU backend takes: the cores that other work leaves free now."""

import os

from skill_rl.cpu import weights


def test_busy_cores_is_read_from_the_machine_now():
    busy = weights.busy_cores(0.2)
    assert 0.0 <= busy <= (os.cpu_count() or 1) + 1e-9


def test_threads_are_the_idle_cores_and_at_least_one(monkeypatch):
    monkeypatch.delenv("SKILL_RL_CPU_THREADS", raising=False)
    cores = os.cpu_count() or 1
    monkeypatch.setattr(weights, "busy_cores", lambda seconds=0.5: 0.1)
    assert weights.threads() == cores  # a lagging load average of 1.2 no longer takes a core away
    monkeypatch.setattr(weights, "busy_cores", lambda seconds=0.5: cores - 0.2)
    assert weights.threads() == 1
    monkeypatch.setenv("SKILL_RL_CPU_THREADS", "3")
    assert weights.threads() == 3
