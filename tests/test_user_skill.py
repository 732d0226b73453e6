"""A newcomer's first skill, in a copy of the project as a fresh clone has it: `--init`, a markdown-only skill of six
tasks without references, then the project's tests. The tests that hold every skill to the exploit contract run over
the shipped skills and the template, so the user's skill fails none of them; `--check` tells its author instead
which exploit families its checks pay, and exits 0."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# runs the project's own contract tests in a copy of the project
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
CONTRACT_TESTS = ["tests/test_exploits.py", "tests/test_derived.py", "tests/test_skills.py"]
# their tests on the real corpus (tests/data's mined commits, scored by the shipped skills they name) cannot see a
# user's skill, and are half the modules' time: left to the project's own run
NOT_ON_THE_CORPUS = ["-k", "not real"]

SKILL_MD = """---
name: myskill
description: Answer a trivia question in one sentence, with how sure you are.
---

# Trivia answer

You receive one trivia question; answer it.

## Procedure

1. Read the question.
2. Answer it in one sentence and say how sure you are.

## Output Format

```
## Answer
<the answer, in one sentence>

Confidence: <low | medium | high>
```

Every line is at most 200 characters.
"""
QUESTIONS = [
    "Which planet is closest to the Sun?",
    "Who wrote Hamlet?",
    "What is seven times eight?",
    "Which gas do plants take in?",
    "At what temperature does water boil at sea level?",
    "Which ocean is the largest?",
]


def fresh_clone(where: Path) -> Path:
    """The files a clone of this tree holds (tracked, and new files not ignored), copied: no .venv, no .art."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, where / name)
    return where


def run(args, cwd, timeout=900):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT")
    }
    out = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stdout + out.stderr


def test_a_users_markdown_only_skill_fails_no_project_test_and_check_names_what_its_checks_pay(tmp_path):
    clone = fresh_clone(tmp_path / "clone")
    code, out = run(["train_skill.py", "--init", "myskill"], clone)
    assert code == 0, out
    folder = clone / "skills" / "myskill"
    (folder / "checks.py").unlink()
    (folder / "SKILL.md").write_text(SKILL_MD)
    (folder / "tasks.jsonl").write_text(
        "".join(
            json.dumps({"id": f"q{i}", "input": q, "split": "val" if i >= 4 else "train"}) + "\n"
            for i, q in enumerate(QUESTIONS)
        )
    )
    code, out = run(["-c", "import skill_rl; print(skill_rl.__file__)"], clone)
    # the copy's code, not this tree's
    assert out.strip() == str(clone / "skill_rl" / "__init__.py"), out

    code, out = run(["-m", "pytest", "--collect-only", "-n", "0", "-m", "slow or not slow"], clone)
    assert code == 0, out[-3000:]
    # no test is parametrized on it
    assert "myskill" not in out and "the --init template" in out, out[-3000:]
    code, out = run(["-m", "pytest", "-n", "2", *NOT_ON_THE_CORPUS, *CONTRACT_TESTS], clone)
    assert code == 0 and " passed" in out and "failed" not in out, out[-3000:]

    code, out = run(["train_skill.py", "--skill", "myskill", "--check"], clone)
    flat = " ".join(out.split())
    assert code == 0, out
    assert "paid one constant answer for every task: as high on 6 of 6 tasks" in flat, out
    assert "the checks pay 1 of 4 families tried: one constant answer for every task" in flat, out
    assert "to add: a `reference`" in flat and "to add: `expect` on the tasks" in flat, out
