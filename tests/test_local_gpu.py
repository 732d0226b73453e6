"""A local GPU run's set-up on a machine that may be offline: `--backend auto` picks the GPU only when ART's vLLM
runtime is prepared or can be built (PyPI answers), and the base model's weights go to a cache that outlives a
reboot. The GPU, ART's backend extra, the runtime check and the network probe are stood in for: in-process, no
GPU, no ART import, no network."""

import os

import pytest

from skill_rl.commands import config
from skill_rl.errors import Exit
from skill_rl.settings import env
from skill_rl.skills import find_skill, load_skill, skill_dirs
from skill_rl.training import backends
from train_skill import main, parse_args


@pytest.fixture
def gpu_machine(monkeypatch):
    """A machine with a CUDA GPU and ART's backend extra; ART's runtime unprepared and PyPI unreachable until a
    test says otherwise. Returns the probes made, as (what, argument)."""
    probes = []
    monkeypatch.setattr(backends, "has_gpu", lambda: True)
    monkeypatch.setattr(backends, "backend_extra", lambda: True)
    monkeypatch.setattr(backends, "_vllm_runtime_ready", lambda: probes.append(("runtime", None)) or False)
    monkeypatch.setattr(env, "reachable", lambda url, timeout=3.0: probes.append(("network", url)) or False)
    for name in ("ART_VLLM_RUNTIME_BIN", "WANDB_API_KEY", "TINKER_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return probes


def test_auto_on_an_offline_gpu_without_a_prepared_runtime_exits_2_saying_what_to_run(gpu_machine, capsys):
    with pytest.raises(Exit) as e:
        backends.pick_backend("auto")
    assert e.value.code == 2 and "`art runtime prepare`" in str(e.value) and "ART_VLLM_RUNTIME_BIN" in str(e.value)
    assert gpu_machine == [("runtime", None), ("network", backends.PACKAGE_INDEX)]
    # the command: one line
    assert main(["--skill", "git-commit", "--judge", "none", "--format-only-reward"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: --backend auto found a CUDA GPU, but ART's vLLM runtime")


@pytest.mark.parametrize("ready", ["prepared", "index reachable", "runtime given"])
def test_auto_picks_the_gpu_when_the_runtime_is_prepared_or_can_be_built(gpu_machine, monkeypatch, ready):
    if ready == "prepared":
        monkeypatch.setattr(backends, "_vllm_runtime_ready", lambda: True)
    elif ready == "index reachable":
        monkeypatch.setattr(env, "reachable", lambda url, timeout=3.0: url == backends.PACKAGE_INDEX)
    else:
        monkeypatch.setenv("ART_VLLM_RUNTIME_BIN", "/opt/runtime/.venv/bin/art-vllm-runtime-server")
    assert backends.pick_backend("auto")[0] == "local"


def test_an_explicit_backend_is_not_probed(gpu_machine):
    assert backends.pick_backend("local")[0] == "local" and gpu_machine == []


# ------------------------------------------------------------------ the model cache


@pytest.fixture
def no_hf_home(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_a_local_run_without_hf_home_caches_under_the_users_cache_and_says_so(no_hf_home, monkeypatch):
    note = config.model_cache("local")
    want = str(no_hf_home / "home" / ".cache" / "huggingface")
    assert os.environ["HF_HOME"] == want and note.startswith("note: HF_HOME was unset") and want in note
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(no_hf_home / "xdg"))
    assert config.model_cache("local") and os.environ["HF_HOME"] == str(no_hf_home / "xdg" / "huggingface")


def test_hf_home_given_or_a_backend_that_is_not_local_is_left_alone(no_hf_home, monkeypatch):
    monkeypatch.setattr(backends, "has_gpu", lambda: False)
    for backend in ("cpu", "serverless", "tinker", "auto", "skill_rl.training.dryrun:DryRunBackend"):
        assert config.model_cache(backend) is None and "HF_HOME" not in os.environ
    monkeypatch.setenv("HF_HOME", str(no_hf_home / "mine"))
    assert config.model_cache("local") is None and os.environ["HF_HOME"] == str(no_hf_home / "mine")


def test_hf_home_is_set_before_auto_looks_at_arts_runtime_and_said_in_the_runs_first_lines(
    gpu_machine, no_hf_home, monkeypatch
):
    seen = []
    monkeypatch.setattr(backends, "_vllm_runtime_ready", lambda: seen.append(os.environ.get("HF_HOME")) or True)
    monkeypatch.setattr(
        backends, "plan", lambda s, skill, picked: backends.Plan("local", "Qwen/Qwen2.5-3B-Instruct", "test")
    )
    skill = load_skill(find_skill(skill_dirs(None), "git-commit"))
    run = config.resolve(parse_args(["--skill", "git-commit", "--judge", "none", "--format-only-reward"]), skill)
    want = str(no_hf_home / "home" / ".cache" / "huggingface")
    assert seen == [want] and run.notes[0].startswith("note: HF_HOME was unset") and want in run.notes[0]


def test_export_on_an_offline_gpu_names_the_run_as_training_did_without_asking_for_the_runtime(
    gpu_machine, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert main(["--skill", "git-commit", "--export", "out"]) == 2
    err = capsys.readouterr().err
    assert "git-commit-qwen2.5-3b-instruct" in err and "art runtime prepare" not in err and gpu_machine == []
