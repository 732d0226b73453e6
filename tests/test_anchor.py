"""The KL anchor (training/anchor.py): the flags checked against what ART's backends do with them, and on the strict
dry-run stand-in: what reaches `backend.train`, a resumed run's reference, and the reference kept through cleanup."""

import ast
import json
from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path

import pytest
from conftest import DRY_RUN, SMALL_GROUPS, main_in_process, small_git_commit

from skill_rl.commands import config
from skill_rl.errors import Exit
from skill_rl.training import anchor
from train_skill import parse_args


def train_parameters(module: str, cls: str) -> set[str]:
    """The keyword parameters of ART's `cls.train`, read from its installed source (LocalBackend's import needs torch)."""
    # imports nothing
    source = Path(find_spec("art").origin).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(source.read_text())
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "train")
    return {a.arg for a in fn.args.args + fn.args.kwonlyargs}


@pytest.mark.parametrize(
    "module, cls", [("art.local.backend", "LocalBackend"), ("art.serverless.backend", "ServerlessBackend")]
)
def test_the_anchors_arguments_are_those_of_arts_train(module, cls):
    assert set(anchor.Anchor(0.1, 3).kwargs()) <= train_parameters(module, cls)
    assert anchor.Anchor(0.1, 3).kwargs() == {"kl_penalty_coef": 0.1, "kl_penalty_reference_step": 3}
    # no anchor: ART's defaults, untouched
    assert anchor.Anchor().kwargs() == {}


def test_tinker_refuses_kl_coef_since_art_drops_it_there():
    args = parse_args(["--skill", "git-commit", "--judge", "none", "--kl-coef", "0.1"])
    with pytest.raises(Exit) as e:
        config.kl_anchor(replace(args, backend="tinker"), warm_start=True)
    assert e.value.code == 2 and "art/tinker/service.py" in str(e.value)


@pytest.mark.parametrize(
    "backend, warm, expected",
    [
        ("local", True, anchor.DEFAULT_COEF),
        ("local", False, 0.0),
        ("tinker", True, 0.0),
        ("cpu", True, anchor.DEFAULT_COEF),
    ],
)
def test_the_default_coefficient_applies_after_a_warm_start_where_the_backend_applies_it(backend, warm, expected):
    args = parse_args(["--skill", "git-commit"])
    resolved = config.kl_anchor(replace(args, backend=backend), warm_start=warm)
    assert resolved.kl_coef == expected and args.kl_coef is None


def test_kl_coef_and_its_reference_are_validated_as_they_are_parsed(capsys):
    for bad in (["--kl-coef", "-1"], ["--kl-coef", "nan"], ["--kl-ref-step", "-2"]):
        with pytest.raises(SystemExit) as e:
            parse_args(["--skill", "git-commit", *bad])
        assert e.value.code == 2
    assert capsys.readouterr().err.count("error: argument --kl-") == 3


# the dry-run backend and the training loop import ART
@pytest.mark.slow
def test_kl_coef_reaches_arts_train_a_resumed_run_keeps_its_reference_and_cleanup_keeps_it(
    tmp_path, server, monkeypatch, capfd
):
    skills = small_git_commit(tmp_path, train=4, val=1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
    run = (
        "--skills-dir",
        skills,
        "--skill",
        "git-commit",
        *DRY_RUN,
        "--judge",
        "none",
        "--format-only-reward",
        *SMALL_GROUPS,
        "--eval-every",
        "100",
    )
    # no anchor: nothing passed
    assert main_in_process(capfd, *run, "--steps", "1").returncode == 0
    anchored = main_in_process(capfd, *run, "--steps", "3", "--kl-coef", "0.2", "--kl-ref-step", "1")
    assert anchored.returncode == 0 and "KL anchor: coefficient 0.2 to checkpoint 1" in anchored.stdout
    run_dir = next((tmp_path / ".art").rglob("dryrun.jsonl")).parent
    # the reference outlives cleanup
    assert {p.name for p in (run_dir / "checkpoints").iterdir()} >= {"0001", "0003"}

    refused = main_in_process(capfd, *run, "--steps", "4", "--kl-coef", "0.2", "--kl-ref-step", "2")
    assert refused.returncode == 2 and "anchored to step 1" in refused.stderr
    # resumed: the same reference
    assert main_in_process(capfd, *run, "--steps", "4", "--kl-coef", "0.2").returncode == 0
    steps = [json.loads(line) for line in (run_dir / "dryrun.jsonl").read_text().splitlines()]
    assert [s["kl"] for s in steps] == [{}] + [{"kl_penalty_coef": 0.2, "kl_penalty_reference_step": 1}] * 3
    # the anchor off for a step
    assert main_in_process(capfd, *run, "--steps", "5", "--kl-coef", "0").returncode == 0
    # its reference still kept for a later resume
    assert "0001" in {p.name for p in (run_dir / "checkpoints").iterdir()}
