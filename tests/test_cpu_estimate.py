"""The CPU rehearsal's printed time estimate: what each part of a run adds to it (cpu/presets.py).

The constants are measured (docs/cpu-learning.md); these tests hold the arithmetic that combines them."""

import pytest

from skill_rl.cpu import presets
from skill_rl.prompts import Fade
from skill_rl.settings import Settings


def settings(**changed) -> Settings:
    base = {
        **presets.DEFAULTS,
        "eval_every": presets.DEFAULTS["steps"],
        "sft_epochs": 1,
        "internalize": False,
        "internalize_floor": 0.3,
    }
    return Settings(**{**base, **changed})


def test_the_defaults_add_up_their_parts():
    s = presets.estimated_seconds(settings(), val_tasks=24, train_tasks=64)
    # the base model, after the warm start, at step eval_every, at the end
    validations = 4
    parts = (
        presets.STARTUP_SECONDS
        + 10 * presets.STEP_SECONDS
        + validations * 6 * presets.VAL_TASK_SECONDS
        + 64 * presets.SFT_EXAMPLE_SECONDS
    )
    assert s == pytest.approx(parts)


def test_more_steps_cost_steps_and_fewer_answers_cost_less():
    base = presets.estimated_seconds(settings(eval_every=1000), 24, 64)
    assert presets.estimated_seconds(settings(steps=20, eval_every=1000), 24, 64) == pytest.approx(
        base + 10 * presets.STEP_SECONDS
    )
    assert presets.estimated_seconds(settings(rollouts_per_group=2, eval_every=1000), 24, 64) < base
    # steps 2, 4, .., 10 validate
    assert presets.estimated_seconds(settings(eval_every=2), 24, 64) == pytest.approx(
        base + 5 * 6 * presets.VAL_TASK_SECONDS
    )


def test_no_warm_start_drops_its_examples_and_its_validation():
    base = presets.estimated_seconds(settings(eval_every=1000), 24, 64)
    cold = presets.estimated_seconds(settings(sft=False, eval_every=1000), 24, 64)
    assert base - cold == pytest.approx(64 * presets.SFT_EXAMPLE_SECONDS + 2 * 6 * presets.VAL_TASK_SECONDS)


@pytest.mark.parametrize("floor", [0.3, 1.0])
def test_internalize_doubles_the_warm_start_and_validations_and_cheapens_steps_without_the_skill(floor):
    plain = presets.estimated_seconds(settings(), 24, 64)
    internal = presets.estimated_seconds(settings(internalize=True, internalize_floor=floor), 24, 64)
    carried = sum(Fade(10, floor).probability(s) for s in range(1, 11)) / 10
    steps = 10 * presets.STEP_SECONDS * (carried + (1 - carried) * presets.WITHOUT_SKILL_STEP_SHARE)
    assert internal - plain == pytest.approx(
        64 * presets.SFT_EXAMPLE_SECONDS + 4 * 6 * presets.VAL_TASK_SECONDS + steps - 10 * presets.STEP_SECONDS
    )
    # no RL step carries SKILL.md
    if floor == 1.0:
        assert steps == pytest.approx(10 * presets.STEP_SECONDS * presets.WITHOUT_SKILL_STEP_SHARE)


@pytest.mark.parametrize(
    "busy, threads, cores, factor",
    [
        # a quiet machine: the measured figure
        (0.0, 2, 2, 1.0),
        # one core busy elsewhere: one thread on the other
        (1.0, 1, 2, 2.0),
        # 2.6 runnable threads share 2 cores: the run's one gets 2 / 2.6 of a core
        (1.6, 1, 2, 2.6),
        # another run's two threads and this one's: a third of the machine each
        (2.0, 1, 2, 3.0),
        (3.0, 1, 2, 4.0),
        # more cores than measured are not assumed to help
        (0.0, 16, 16, 1.0),
    ],
)
def test_the_slowdown_is_the_measured_cores_over_the_cores_the_run_gets(busy, threads, cores, factor):
    assert presets.slowdown(busy, threads, cores) == pytest.approx(factor)


def test_a_loaded_machine_gets_the_longer_figure_the_load_and_the_threads():
    quiet = presets.clock(settings(), 900, busy=0.1, threads_=2, cores=2)
    assert quiet == "about 15 min on 2 cores (2 torch threads)"
    loaded = presets.clock(settings(), 900, busy=1.0, threads_=1, cores=2)
    assert (
        loaded
        == "about 30 min here: other work keeps 1.0 of 2 cores busy, so it runs on 1 torch thread (15 min on 2 idle cores)"
    )


def test_a_skill_with_tools_is_estimated_from_its_own_measured_episodes():
    s = settings(**presets.TOOL_DEFAULTS, eval_every=1000)
    text = presets.estimated_seconds(s, 7, 22)
    tools = presets.estimated_seconds(s, 7, 22, tools=True)
    # the base model, after the warm start, the end: 6 val tasks (--limit) each, the base's episodes cheaper
    parts = (
        presets.STARTUP_SECONDS
        + s.steps * presets.TOOL_STEP_SECONDS
        + 6 * (2 * presets.TOOL_VAL_TASK_SECONDS + presets.TOOL_BASE_VAL_TASK_SECONDS)
        + 22 * s.sft_epochs * presets.TOOL_SFT_EXAMPLE_SECONDS
    )
    assert tools == pytest.approx(parts) and tools > 2 * text


def test_a_cpu_without_native_bf16_is_estimated_from_the_float32_run():
    s = settings()
    bf16 = presets.estimated_seconds(s, val_tasks=24, train_tasks=64)
    f32 = presets.estimated_seconds(s, val_tasks=24, train_tasks=64, precision="float32")
    parts = (
        presets.STARTUP_SECONDS
        + 10 * presets.FLOAT32_STEP_SECONDS
        + 4 * 6 * presets.FLOAT32_VAL_TASK_SECONDS
        + 64 * presets.FLOAT32_SFT_EXAMPLE_SECONDS
    )
    assert f32 == pytest.approx(parts) and f32 > bf16
    # a skill with tools: its own float32 run's figures
    t = settings(**presets.TOOL_DEFAULTS, eval_every=1000)
    assert presets.estimated_seconds(t, 7, 22, tools=True, precision="float32") == pytest.approx(
        presets.STARTUP_SECONDS
        + t.steps * presets.FLOAT32_TOOL_STEP_SECONDS
        + 6 * (2 * presets.FLOAT32_TOOL_VAL_TASK_SECONDS + presets.FLOAT32_TOOL_BASE_VAL_TASK_SECONDS)
        + 22 * t.sft_epochs * presets.FLOAT32_TOOL_SFT_EXAMPLE_SECONDS
    )
