"""Any install works: a wheel built from this tree, installed (not editable) into a fresh virtual environment,
finds the shipped skills and writes new ones where the user is, through both entry points."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

# builds a wheel and a virtual environment
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def run(cmd, cwd, env=None, timeout=120):
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stdout + out.stderr


def build_wheel(tmp_path: Path) -> Path:
    """The wheel, built by setuptools from a copy of the tree (no build isolation: offline and quick);
    the build must print no warning."""
    src = tmp_path / "src"
    keep = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    shutil.copytree(ROOT / "skill_rl", src / "skill_rl", ignore=keep)
    shutil.copytree(ROOT / "skills", src / "skills", ignore=keep)
    for name in ("pyproject.toml", "README.md", "train_skill.py"):
        shutil.copy(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    code, log = run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta as b; b.build_wheel(sys.argv[1])",
            str(tmp_path / "dist"),
        ],
        cwd=src,
        env=env,
    )
    assert code == 0, log[-3000:]
    assert not re.findall(r".*(?:Warning\b|warning:).*", log), log[-3000:]
    return next((tmp_path / "dist").glob("skill_rl-*.whl"))


def fresh_venv(where: Path) -> Path:
    """A new venv without pip; its dependencies are this interpreter's, reached through a .pth line (a .pth
    line adds a folder but runs none of the .pth files in it, so an editable skill-rl there stays out)."""
    run([sys.executable, "-m", "venv", "--without-pip", str(where)], cwd=where.parent)
    python = where / "bin" / "python"
    site = Path(
        run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=where)[1].strip()
    )
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "deps-of-the-test-interpreter.pth").write_text("\n".join(deps) + "\n")
    return python


def test_a_wheel_in_a_fresh_venv_lists_checks_and_inits_from_another_directory(tmp_path):
    wheel = build_wheel(tmp_path)
    python = fresh_venv(tmp_path / "venv")
    code, log = run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        cwd=tmp_path,
    )
    assert code == 0, log
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = tmp_path / "venv" / "bin" / "skill-rl"

    code, out = run([str(script), "--list"], cwd=work, env=env)
    assert code == 0, out
    assert "git-commit" in out and "code-review" in out and "shipped" in out
    code, out = run([str(python), "-m", "skill_rl", "--skill", "git-commit", "--check"], cwd=work, env=env)
    assert code == 0 and "ok" in out, out
    code, out = run([str(script), "--init", "my-new-skill"], cwd=work, env=env)
    assert code == 0, out
    assert (work / "skills" / "my-new-skill" / "SKILL.md").is_file()
    # the wheel carries the template's checks.py
    assert (work / "skills" / "my-new-skill" / "checks.py").is_file()
    # never into the install
    assert not list((tmp_path / "venv").rglob("my-new-skill"))
    code, out = run(
        [
            str(python),
            "-c",
            "import sys; from train_skill import main; from skill_rl.skills import skill_dirs; "
            "print(*skill_dirs(), sep='\\n'); "
            "sys.exit(main(['--skill', 'my-new-skill', '--check']) or main(['--skill', 'code-review', '--check']))",
        ],
        cwd=work,
        env=env,
    )
    # ./skills first, then the shipped ones
    assert code == 0, out
    # the wheel carries code-review's exploits.py
    assert re.search(r"exploits \(exploits\.py\): [1-9][0-9]*, plus", out), out
    here, shipped = out.splitlines()[:2]
    # the wheel's own copy
    assert here == str(work / "skills") and shipped.startswith(str(tmp_path / "venv")), out
