"""`conventional` agrees with the real commitlint. Opt-in: it needs Node and an npm install.

npm install --prefix /tmp/cl @commitlint/cli@20 @commitlint/config-conventional@20
SKILL_RL_COMMITLINT_DIR=/tmp/cl python -m pytest -m commitlint
"""

import os
import re
import subprocess
from pathlib import Path

import pytest
from test_git_commit_checks import COMMITLINT, checks

from skill_rl.skills import load_skill

ROOT = Path(__file__).resolve().parent.parent
HOME = os.environ.get("SKILL_RL_COMMITLINT_DIR")
pytestmark = [
    pytest.mark.commitlint,
    pytest.mark.skipif(not HOME, reason="set SKILL_RL_COMMITLINT_DIR to a folder with @commitlint/cli installed"),
]
MESSAGES = [m for m, _, _ in COMMITLINT] + [t.reference for t in load_skill(ROOT / "skills/git-commit").tasks]


@pytest.mark.parametrize("message", MESSAGES)
def test_conventional_reports_the_errors_commitlint_reports(message):
    # beside node_modules, so the preset resolves
    config = Path(HOME) / "commitlint.config.js"
    config.write_text("module.exports = {extends: ['@commitlint/config-conventional']};\n")
    run = subprocess.run(
        [f"{HOME}/node_modules/.bin/commitlint", "--config", str(config)],
        input=message,
        capture_output=True,
        text=True,
        cwd=HOME,
        timeout=60,
    )
    theirs = sorted(set(re.findall(r"✖\s+.*?\[([a-z-]+)\]", run.stdout)))
    assert (run.returncode == 0) == (not theirs)
    assert sorted(set(checks.commitlint_errors(message))) == theirs
