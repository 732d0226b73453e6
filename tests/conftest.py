import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from openai_server import FakeOpenAI  # noqa: E402


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s


SMALL_DIFF = "diff --git a/app/x.py b/app/x.py\n--- a/app/x.py\n+++ b/app/x.py\n@@ -1,1 +1,1 @@\n-LIMIT = 1\n+LIMIT = {n}\n"


def small_git_commit(where: Path, train: int, val: int) -> Path:
    """A skills folder holding git-commit's SKILL.md and checks.py with a few one-line-diff tasks."""
    folder = where / "skills" / "git-commit"
    folder.mkdir(parents=True)
    for name in ("SKILL.md", "checks.py"):
        (folder / name).write_bytes((ROOT / "skills/git-commit" / name).read_bytes())
    (folder / "tasks.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "input": SMALL_DIFF.format(n=i + 2), "split": "val" if i >= train else "train",
                    "expect": {"type": "fix", "breaking": False}}) + "\n" for i in range(train + val)))
    return where / "skills"


@contextlib.contextmanager
def deadline(seconds: float, what: str = "it"):
    """Fail instead of hanging: raise TimeoutError in the main thread after `seconds` (a hang guard, not a speed target)."""
    def expired(*_):
        raise TimeoutError(f"{what} took over {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(autouse=True)
def own_cache_folder(tmp_path_factory, monkeypatch):
    """Each test its own user cache folder (the judge cache lives there): no test answers another's judge
    call from the cache, and none writes into the user's ~/.cache. Hugging Face keeps its usual folder."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    monkeypatch.setenv("HF_HOME", os.environ.get("HF_HOME") or str(home / "huggingface"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
