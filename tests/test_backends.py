"""Choosing and building a backend, and what a run keeps at its end, against ART 0.5.23's own code:
its renderer lookup, model lists, config types and checkpoint rule; the strict dry-run backend;
real HTTP to the local test server. No GPU, no network, no paid service."""

import asyncio
import json
import os
import stat
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
from conftest import small_git_commit
from openai import AsyncOpenAI

from skill_rl.commands import config
from skill_rl.errors import Exit
from skill_rl.skills import find_skill, load_skill, skill_dirs
from skill_rl.training import backends
from train_skill import main, parse_args

# ART (and so torch) is imported inside the tests that use it, never while collecting: see conftest.py
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


GPU_HERE = Path("/proc/driver/nvidia").exists()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in ("WANDB_API_KEY", "TINKER_API_KEY", "ART_VLLM_RUNTIME_BIN"):
        monkeypatch.delenv(key, raising=False)
    return small_git_commit(tmp_path, train=2, val=1)


def run(skills, *flags):
    return main(["--skills-dir", str(skills), "--skill", "git-commit", "--judge", "none", *flags])


# ------------------------------------------------------------------ refusals at start-up, before anything is spent


@pytest.mark.skipif(bool(find_spec("unsloth")), reason="ART's backend extra is installed here")
def test_local_without_the_backend_extra_exits_2_with_the_install_command_that_resolves(workdir, capsys):
    assert run(workdir, "--backend", "local") == 2
    err = capsys.readouterr().err
    assert "--extra-index-url https://download.pytorch.org/whl/cu128" in err and '".[backend]"' in err
    assert "Traceback" not in err and not Path(".art").exists()


def test_missing_uv_is_reported_up_front_unless_the_venv_has_it(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    monkeypatch.setenv("PATH", str(empty))
    # no prepared runtime there
    monkeypatch.setenv("ART_VLLM_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ART_VLLM_RUNTIME_BIN", raising=False)
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    with pytest.raises(Exit) as refused:
        backends.ensure_uv()
    assert (
        refused.value.code == 2
        and "pip install uv" in str(refused.value)
        and "art runtime prepare" in str(refused.value)
    )

    # what the backend extra installs beside the interpreter of a venv that was not activated
    uv = venv_bin / "uv"
    uv.write_text("#!/bin/sh\n")
    uv.chmod(uv.stat().st_mode | stat.S_IXUSR)
    backends.ensure_uv()
    assert os.environ["PATH"].split(os.pathsep)[0] == str(venv_bin)


def test_tinker_refuses_a_base_model_its_renderer_does_not_know_and_defaults_to_one_it_knows(
    workdir, monkeypatch, capsys
):
    from art.tinker.renderers import get_renderer_name

    # what TinkerBackend would hit at register with the old default
    with pytest.raises(ValueError):
        get_renderer_name("Qwen/Qwen2.5-3B-Instruct")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test")
    assert run(workdir, "--backend", "tinker", "--base-model", "Qwen/Qwen2.5-3B-Instruct") == 2
    err = capsys.readouterr().err
    assert "no chat renderer" in err and backends.DEFAULT_BASE_MODEL["tinker"] in err
    assert "Traceback" not in err and not Path(".art").exists()
    assert backends.tinker_renderer(backends.DEFAULT_BASE_MODEL["tinker"]) == get_renderer_name(
        "Qwen/Qwen3-4B-Instruct-2507"
    )


def test_serverless_refuses_a_base_model_it_does_not_train(workdir, monkeypatch, capsys):
    import art

    monkeypatch.setenv("WANDB_API_KEY", "wandb-test")
    assert run(workdir, "--backend", "serverless", "--base-model", "Qwen/Qwen2.5-3B-Instruct") == 2
    err = capsys.readouterr().err
    assert all(m in err for m in backends.SERVERLESS_MODELS) and not Path(".art").exists()
    # the list it comes from
    listed = (Path(art.__file__).parent / "skills/train-rl/SKILL.md").read_text()
    assert all(f"`{m}`" in listed for m in backends.SERVERLESS_MODELS)


@pytest.mark.skipif(GPU_HERE, reason="a GPU here: --backend auto may pick it")
def test_auto_picks_serverless_with_a_model_it_trains_and_says_why_and_who_bills(workdir, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-test")
    with_wandb(monkeypatch)
    plan = config.resolve(
        parse_args(["--skill", "git-commit", "--judge-api-key", "sk-test-judge"]),
        load_skill(find_skill(skill_dirs(None), "git-commit")),
    ).plan
    assert (plan.kind, plan.base_model) == ("serverless", "OpenPipe/Qwen3-14B-Instruct")
    assert (
        "--backend auto" in plan.describe() and "WANDB_API_KEY is set" in plan.describe() and "bills" in plan.describe()
    )


def with_wandb(monkeypatch, installed: bool = True):
    """The serverless extra's wandb installed, or not, whatever this environment holds."""
    real = backends.find_spec
    monkeypatch.setattr(
        backends,
        "find_spec",
        lambda name, *a: (real("json") if installed else None) if name == "wandb" else real(name, *a),
    )


def test_serverless_without_wandb_exits_2_before_any_work_with_the_install_command(workdir, monkeypatch, capsys):
    """ART's Serverless warm start imported wandb after the teacher's examples were collected and judged."""
    monkeypatch.setenv("WANDB_API_KEY", "wandb-test")
    with_wandb(monkeypatch, installed=False)
    assert (
        run(
            workdir, "--backend", "serverless", "--sft", "--sft-from", "teacher", "--teacher", "m@http://127.0.0.1:9/v1"
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err == f"error: {err[7:].splitlines()[0]}\n" and backends.SERVERLESS_INSTALL in err and "wandb" in err
    assert not Path(".art").exists()
    # the extra the message names exists, with the wandb ART's own GPU extra pins
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["serverless"]
    from importlib.metadata import requires

    pinned = [r.split(";")[0].strip() for r in requires("openpipe-art") if r.startswith("wandb") and "'backend'" in r]
    assert pinned and pinned[0].replace(" ", "") in extra
    # with it, the same command gets past the check
    with_wandb(monkeypatch, installed=True)
    assert (
        config.resolve(
            parse_args(["--skill", "git-commit", "--judge", "none", "--backend", "serverless"]),
            load_skill(find_skill(skill_dirs(None), "git-commit")),
        ).plan.kind
        == "serverless"
    )


def test_docs_show_the_no_backend_message_as_it_is_printed():
    assert f"error: {backends.NO_BACKEND}\n" in (ROOT / "docs/backends.md").read_text()


# ------------------------------------------------------------------ the flags that fit a GPU


def test_gpu_flags_reach_art_in_its_own_config_fields():
    from art import dev

    args = parse_args(
        [
            "--skill",
            "s",
            "--backend",
            "local",
            "--base-model",
            "Qwen/Qwen2.5-3B-Instruct",
            "--run-name",
            "r",
            "--context-tokens",
            "8192",
            "--gpu-memory",
            "0.7",
            "--lora-rank",
            "32",
        ]
    )
    model = backends.make_model(args, "skill-s")
    config = model._internal_config
    assert config["engine_args"] == {"max_model_len": 8192, "gpu_memory_utilization": 0.7, "max_lora_rank": 32}
    assert config["init_args"] == {"max_seq_length": 8192} and model.lora_config == {"rank": 32}
    assert set(config) <= set(dev.InternalModelConfig.__annotations__)
    assert set(config["engine_args"]) <= set(dev.EngineArgs.__annotations__)
    assert set(config["init_args"]) <= set(dev.InitArgs.__annotations__)

    tinker = parse_args(["--skill", "s", "--backend", "tinker", "--base-model", "Qwen/Qwen3-8B", "--lora-rank", "16"])
    assert backends.internal_config(tinker)["tinker_args"] == {
        "renderer_name": "qwen3_disable_thinking",
        "training_client_args": {"rank": 16},
    }
    with pytest.raises(SystemExit):
        parse_args(["--gpu-memory", "1.5"])


# ------------------------------------------------------------------ the strict stand-in, and what the end keeps


def dry_model(tmp_path, run_name):
    import art

    return art.TrainableModel(name="skill-x", run_name=run_name, project="p", base_model="b", base_path=str(tmp_path))


def test_the_dry_run_trains_only_completions_that_carry_logprobs(tmp_path, server, monkeypatch):
    import art

    from skill_rl.training.dryrun import DryRunBackend

    monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)

    async def go():
        backend, model = DryRunBackend(), dry_model(tmp_path, "logprobs")
        await model.register(backend)
        client = AsyncOpenAI(base_url=server.url, api_key="x")

        async def group(**extra):
            trajs = []
            for reward in (0.0, 1.0):
                traj = art.Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}], reward=reward)
                answer = await client.chat.completions.create(
                    model=model.get_inference_name(), messages=traj.messages(), **extra
                )
                traj.messages_and_choices.append(answer.choices[0])
                trajs.append(traj)
            return art.TrajectoryGroup(trajs)

        with pytest.raises(ValueError, match="2 of 2 trajectories have a completion without logprobs"):
            await backend.train(model, [await group()])
        assert (await backend.train(model, [await group()], allow_training_without_logprobs=True)).step == 1
        assert (await backend.train(model, [await group(logprobs=True)])).step == 2
        # served as name@step
        assert [r["model"] for r in server.requests] == ["skill-x@0"] * 4 + ["skill-x@1"] * 2

    asyncio.run(go())


TOOLS = [{"type": "function", "function": {"name": "git_log", "parameters": {"type": "object"}}}]


def test_the_dry_run_trains_tool_episodes_each_choice_a_completion_and_refuses_broken_ones(
    tmp_path, server, monkeypatch
):
    import art
    import pyarrow.parquet as pq

    from skill_rl.training.dryrun import DryRunBackend
    from skill_rl.training.rollout import tool_rollout
    from skill_rl.training.turns import Call

    monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
    skill = load_skill(small_git_commit(tmp_path, 2, 1) / "git-commit")
    call = {"tool_calls": [{"name": "git_log", "arguments": {}}]}
    server.policy_answers.extend([call, "fix: a", call, call, "fix: b"])

    async def go():
        backend, model = DryRunBackend(), dry_model(tmp_path, "tools")
        await model.register(backend)

        async def episode():
            traj, _ = await tool_rollout(
                model,
                skill,
                skill.tasks[0],
                TOOLS,
                lambda name, arguments: Call(name, arguments, "fix: x"),
                temperature=1.0,
                max_tokens=32,
                max_turns=4,
            )
            return traj

        good = [await episode(), await episode()]
        good[1].reward = 1.0
        assert (await backend.train(model, [art.TrajectoryGroup(good)])).step == 1
        # what the run keeps under .art/ (ART's parquet): the tools, the calls and their results
        await model.log([art.TrajectoryGroup(good)], split="train")
        # an answer to no call; calls in a trajectory without its tools
        stray = good[0].model_copy(deep=True)
        stray.messages_and_choices[3] = {**stray.messages_and_choices[3], "tool_call_id": "call_x"}
        bare = good[1].model_copy(deep=True)
        bare.tools = None
        for broken, said in ((stray, "answers 'call_x', no call"), (bare, "carries no tools")):
            with pytest.raises(ValueError, match=said):
                await backend.train(model, [art.TrajectoryGroup([broken, good[1]])])
        return pq.read_table(Path(model._get_output_dir()) / "trajectories/train/0001.parquet").to_pylist()[1]

    logged = asyncio.run(go())
    assert json.loads(logged["tools"]) == TOOLS
    roles = [(m["role"], m["tool_call_id"] is not None, m["trainable"]) for m in logged["messages"][2:]]
    assert roles == [("assistant", False, True), ("tool", True, False)] * 2 + [("assistant", False, True)]
    assert json.loads(logged["messages"][2]["tool_calls"])[0]["function"]["name"] == "git_log"
    assert logged["messages"][3]["content"] == "fix: x"
    record = [json.loads(line) for line in (tmp_path / "p/models/tools/dryrun.jsonl").read_text().splitlines()]
    assert [(r["step"], r["turns"], r["tools"]) for r in record] == [(1, [[2, 3]], ["git_log"])]


def test_the_dry_run_cannot_be_used_after_close(tmp_path):
    from skill_rl.training.dryrun import DryRunBackend

    async def go():
        backend, model = DryRunBackend(), dry_model(tmp_path, "closed")
        await model.register(backend)
        await backend.close()
        for use in (model.get_step, model.delete_checkpoints, lambda: backend.train(model, [])):
            with pytest.raises(RuntimeError, match="after close"):
                await use()
        with pytest.raises(RuntimeError, match="after close"):
            model.get_inference_name()
        # closing twice is allowed, as in ART
        await backend.close()

    asyncio.run(go())


async def _trained(tmp_path, run_name, val):
    """A dry-run model at step max(val) with val/reward logged through ART, several rows per step allowed."""
    from skill_rl.training.dryrun import DryRunBackend

    backend, model = DryRunBackend(), dry_model(tmp_path, run_name)
    await model.register(backend)
    for _ in range(max(step for step, _ in val)):
        await backend.train(model, [])
    for step, reward in val:
        await model.log(metrics={"reward": reward}, step=step, split="val")
    return model


def kept_steps(model) -> set[int]:
    return {int(p.name) for p in (Path(model._get_output_dir()) / "checkpoints").iterdir()}


def test_the_printed_best_step_is_the_one_arts_rule_keeps(tmp_path):
    # step 2: best row, but mean 0.5; step 3: best mean
    val = [(2, 0.9), (2, 0.1), (3, 0.6), (4, 0.3)]

    async def go():
        art_rule = await _trained(tmp_path, "art", val)
        # ART's own choice
        await art_rule.delete_checkpoints("val/reward")
        ours = await _trained(tmp_path, "ours", val)
        kept = await backends.keep_best_and_latest(ours, await ours.get_step())
        return kept_steps(art_rule), kept, kept_steps(ours)

    by_art, kept, by_us = asyncio.run(go())
    assert by_art == by_us == {3, 4}
    assert kept.best == (3, pytest.approx(0.6)) and kept.latest == 4 and kept.served_as == "skill-x@3"
    assert kept.where.is_absolute() and (kept.where / "checkpoints/0003").is_dir()


def test_on_a_tie_the_printed_best_step_is_the_one_kept(tmp_path):
    async def go():
        model = await _trained(tmp_path, "tie", [(1, 0.5), (2, 0.5), (3, 0.2)])
        return model, await backends.keep_best_and_latest(model, await model.get_step())

    model, kept = asyncio.run(go())
    # ART's own pick among 1 and 2 varies from call to call
    assert kept.best[0] == 2 and kept_steps(model) == {2, 3}


def test_the_base_models_validation_at_step_0_is_never_the_best_checkpoint(tmp_path):
    # a warm start's run validates the base model first; it has no checkpoint to keep
    async def go():
        model = await _trained(tmp_path, "base-best", [(0, 0.9), (1, 0.4), (2, 0.3)])
        return model, await backends.keep_best_and_latest(model, await model.get_step())

    model, kept = asyncio.run(go())
    assert kept.best == (1, pytest.approx(0.4)) and kept_steps(model) == {1, 2} and kept.served_as == "skill-x@1"


def test_the_end_of_a_run_says_how_to_use_the_model_on_each_backend(tmp_path):
    import art

    args = parse_args(["--skill", "s", "--base-model", "Qwen/Qwen2.5-3B-Instruct", "--lora-rank", "32"])
    where = (tmp_path / "run").resolve()
    local = backends.ending_lines("local", args, "skill-s", backends.Kept(where, 5, (3, 0.7), "skill-s@3", None))
    assert any("pip install vllm" in line for line in local)
    assert any(f"--max-lora-rank 32 --lora-modules skill-s={where}/checkpoints/0003" in line for line in local)

    serverless, model = art.ServerlessBackend(api_key="wandb-test"), dry_model(tmp_path, "run")
    # what ServerlessBackend.register sets; built offline, never registered
    model.entity = "me"
    name = serverless._model_inference_name(model, step=3)
    lines = backends.ending_lines(
        "serverless", args, "skill-s", backends.Kept(where, 5, (3, 0.7), name, serverless._base_url)
    )
    assert name == "wandb-artifact:///me/p/run:step3" and any(
        name in line and "api.training.wandb.ai" in line for line in lines
    )
    tinker = backends.ending_lines("tinker", args, "skill-s", backends.Kept(where, 5, (3, 0.7), "skill-s@3", None))
    assert any(f"{where}/checkpoints/0003/info.yaml" in line for line in tinker)
    on_cpu = "\n".join(
        backends.ending_lines("cpu", args, "skill-s", backends.Kept(where, 5, (3, 0.7), "skill-s@3", None))
    )
    assert f"--checkpoint {where}/checkpoints/0003 --base-model Qwen/Qwen2.5-3B-Instruct" in on_cpu
    stopped = "\n".join(backends.ending_lines("cpu", args, "skill-s", backends.Kept(where, 0, None, "skill-s@0", None)))
    # stopped before a step: no folder 0000
    assert "--checkpoint" not in stopped and "nothing was trained" in stopped
