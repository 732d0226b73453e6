import json
import os
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Iterable, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
# each xdist worker its share of the cores for torch (read when torch loads): two workers running
if WORKERS > 1:
    # torch's default thread count on the same cores oversubscribe them, and each step then took 2-4x as long here
    for var in ("OMP_NUM_THREADS", "SKILL_RL_CPU_THREADS"):
        os.environ.setdefault(var, str(max(1, (os.cpu_count() or 1) // WORKERS)))

from openai_server import FakeOpenAI  # noqa: E402


def shipped_skills() -> list[str]:
    """The skills skill-rl ships, by name, as pyproject.toml's package data lists them: the tests that hold every
    skill to the contract run over these (and the --init template), never over a skill a user added to skills/."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    return sorted({pattern.split("/")[0] for pattern in data["skill_rl.shipped_skills"]})


SHIPPED_SKILLS = shipped_skills()
# a parameter beside the shipped skills' names: init_template makes it a folder
# training on the stand-in ART backend, and the smallest groups RL compares (the argv pieces most tests share)
DRY_RUN = ("--backend", "skill_rl.training.dryrun:DryRunBackend")
SMALL_GROUPS = ("--groups-per-step", "2", "--rollouts-per-group", "2")
TEMPLATE = "the --init template"


def training(skills, *flags) -> list[str]:
    """The command line of a git-commit training run in a subprocess, under `skills`, on the stand-in backend,
    validating only at its end."""
    return [
        sys.executable,
        str(ROOT / "train_skill.py"),
        *("--skills-dir", str(skills), "--skill", "git-commit", *DRY_RUN, "--eval-every", "100"),
        *flags,
    ]


def policy_env(server, **more: str) -> dict:
    """This environment, with the policy at `server` and no W&B key (a training run in a subprocess)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SKILL_RL_POLICY_BASE_URL": server.url, **more}
    env.pop("WANDB_API_KEY", None)
    return env


def launch(cmd: list[str], cwd, env) -> subprocess.Popen:
    """`cmd` started in `cwd`, its output read as text through pipes."""
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def score_flags(src, out, skills=None) -> list[str]:
    """--score of the git-commit answers in `src` into `out` by the checks alone (the skill under `skills` when given)."""
    where = ["--skills-dir", str(skills)] if skills is not None else []
    return [*where, "--skill", "git-commit", "--score", str(src), "--judge", "none", "--out", str(out)]


def init_template(where: Path, name: str = "my-skill") -> Path:
    """A skill folder written by --init from the template, as a user gets it."""
    from skill_rl.commands.cli import init_skill

    init_skill(where, name)
    return where / name


def contract_skill(name: str, where: Path) -> Path:
    """The folder of a shipped skill, or (for TEMPLATE) a fresh --init of the template under `where`."""
    return init_template(where) if name == TEMPLATE else ROOT / "skills" / name


# set in each process (xdist worker) whose collection imported torch
TORCH_WHILE_COLLECTING = []
# the grouped tests xdist's loadgroup will not hold on one worker
GROUPS_IGNORED = []


# The slow tier's longest modules (CI's --durations: 40-120 s of one worker each, the export's three tests bound to
# one worker by their xdist group). xdist hands tests out in collection order, so these go first: collected in
# file order, the export started two thirds of the way through and finished alone, the other workers idle.
LONGEST_FIRST = ("test_export.py", "test_cpu_model_files.py", "test_user_skill.py", "test_cpu.py", "test_runs.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_finish(session):
    if "torch" in sys.modules:
        TORCH_WHILE_COLLECTING.append(True)
    # xdist's loadgroup marks a grouped test by its node id; where pytest and xdist disagree on node ids (pytest 9.2
    # with xdist 3.8, pytest-xdist #1386) the groups are silently ignored and a group's module fixture is built on
    # every worker: the grouped tests fail saying so (xdist_group_held)
    if session.config.getoption("loadgroup", False):
        GROUPS_IGNORED.extend(
            i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid
        )


@pytest.fixture(autouse=True)
def xdist_group_held(request):
    """A test in an xdist group fails where xdist ignored its group (see pytest_collection_finish)."""
    if request.node.nodeid in GROUPS_IGNORED:
        pytest.fail(
            "xdist ignored this test's xdist_group (pytest-xdist #1386 under pytest 9.2): pytest<9.2", pytrace=False
        )


@pytest.fixture(autouse=True)
def fast_tier_imports_no_torch(request):
    """The fast tier (`pytest`) never imports torch, which alone takes seconds of a worker's time: a test that is not
    marked slow fails if torch was imported while collecting (a test module importing ART or torch at its top) or
    first imported while it ran."""
    fast = request.node.get_closest_marker("slow") is None
    if fast and TORCH_WHILE_COLLECTING:
        pytest.fail(
            "collecting the tests imported torch: import ART and torch-heavy modules inside the tests that "
            "use them (marked slow), not at the top of a test module",
            pytrace=False,
        )
    before = "torch" in sys.modules
    yield
    if fast and not before and "torch" in sys.modules:
        pytest.fail(
            "this test imported torch (through ART, the judge, the dry-run backend or the CPU backend): "
            "mark it @pytest.mark.slow",
            pytrace=False,
        )


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s


def skill_folder(
    where: Path,
    name: str = "demo",
    *,
    md: str | bytes,
    tasks: str | bytes | Iterable[dict] = (),
    checks: str | bytes | None = None,
    exploits: str | None = None,
) -> Path:
    """The one factory for a skill folder `where/name` as a user writes it: SKILL.md, tasks.jsonl (its text or bytes as
    given, or task records, one JSON line each), and checks.py and exploits.py when given. Returns the folder."""
    folder = where / name
    folder.mkdir(parents=True, exist_ok=True)
    if not isinstance(tasks, (str, bytes)):
        tasks = "".join(json.dumps(t) + "\n" for t in tasks)
    for file, text in {"SKILL.md": md, "tasks.jsonl": tasks, "checks.py": checks, "exploits.py": exploits}.items():
        if text is not None:
            (folder / file).write_bytes(text.encode() if isinstance(text, str) else text)
    return folder


SMALL_DIFF = (
    "diff --git a/app/x.py b/app/x.py\n--- a/app/x.py\n+++ b/app/x.py\n@@ -1,1 +1,1 @@\n-LIMIT = 1\n+LIMIT = {n}\n"
)


def small_git_commit(where: Path, train: int, val: int) -> Path:
    """A skills folder holding git-commit's SKILL.md and checks.py with a few one-line-diff tasks."""
    shipped = ROOT / "skills" / "git-commit"
    skill_folder(
        where / "skills",
        "git-commit",
        md=(shipped / "SKILL.md").read_bytes(),
        checks=(shipped / "checks.py").read_bytes(),
        tasks=[
            {
                "id": f"t{i}",
                "input": SMALL_DIFF.format(n=i + 2),
                "split": "val" if i >= train else "train",
                "expect": {"type": "fix", "breaking": False},
            }
            for i in range(train + val)
        ],
    )
    return where / "skills"


def wait_for(predicate, seconds: float = 300):
    """Poll until predicate() holds (a bound on a hang, not on speed); raise if it never does."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    raise TimeoutError(f"condition never met in {seconds} s")


def held_at(model: str, answer):
    """A policy for FakeOpenAI that answers answer(request) but holds every request for `model` (a checkpoint's
    name, so a step) until `.release` is set; `.reached` is set when the first such request arrives. A run can be
    stopped at a known point, whatever the machine's load; set `.release` before the server closes."""
    reached, release = threading.Event(), threading.Event()

    def policy(request):
        if request.get("model") == model and not release.is_set():
            reached.set()
            release.wait(120)
        return answer(request)

    policy.reached, policy.release = reached, release
    return policy


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def main_in_process(capfd, *argv) -> Ran:
    """train_skill.main(argv) in this process, read as a subprocess's result: its exit status and what reached file
    descriptors 1 and 2 (a library's own writes included). ART is imported once per worker, not once per run."""
    from train_skill import main

    capfd.readouterr()
    try:
        code = main([str(a) for a in argv])
    # a flag refused as it is parsed
    except SystemExit as e:
        code = e.code
    return Ran(code, *capfd.readouterr())


def read_until(stream, text: str) -> str:
    """Lines of a running process's stream up to the one holding `text` (or to its end)."""
    got = ""
    while text not in got and (line := stream.readline()):
        got += line
    return got


@pytest.fixture(autouse=True)
def own_cache_folder(tmp_path_factory, monkeypatch):
    """Each test its own user cache folder (the judge cache lives there): no test answers another's judge
    call from the cache, and none writes into the user's ~/.cache. Hugging Face keeps its usual folder."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    monkeypatch.setenv("HF_HOME", os.environ.get("HF_HOME") or str(home / "huggingface"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
