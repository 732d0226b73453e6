"""--tasks-from-git against hostile repositories: nothing a repository holds makes git contact anything
or run a command, a shallow clone's oldest commit is not a diff of its whole tree, no secret lands in a
task, and the skill's own files are never the output."""

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from test_mining import ROOT, Scripted, mine, reasons, run

from skill_rl import mining
from skill_rl.keys import secret_in


@pytest.fixture
def origin(tmp_path):
    r = Scripted(tmp_path / "origin")
    r.git("config", "uploadpack.allowFilter", "true")
    r.commit("one", "feat(core): add the core", {"src/core.py": "A = 1\n", "README.md": "# core\n"})
    r.commit("two", "fix(core): count from two", {"src/core.py": "A = 2\n"})
    r.commit("three", "feat(core): add B", {"src/core.py": "A = 2\nB = 3\n"})
    return r


def clone(origin, dest: Path, *flags) -> Scripted:
    subprocess.run(
        ["git", "clone", "-q", "--no-checkout", *flags, f"file://{origin.path}", str(dest)],
        env=origin.env,
        check=True,
        capture_output=True,
    )
    r = Scripted.__new__(Scripted)
    r.path, r.n, r.shas, r.env = dest, 0, dict(origin.shas), origin.env
    return r


def hostile(r: Scripted, how: str, marker: Path) -> None:
    """Repository config that runs `touch marker` as soon as git contacts the remote."""
    touch = f"touch {shlex.quote(str(marker))}"
    if how == "uploadpack":
        r.git("config", "remote.origin.uploadpack", f"{touch}; git-upload-pack")
    elif how == "sshCommand":
        r.git("config", "remote.origin.url", "ssh://example.invalid/repo")
        r.git("config", "core.sshCommand", f"{touch}; false")
    elif how == "ext":
        r.git("config", "remote.origin.url", f"ext::sh -c {touch.replace(' ', '% ')}")
        r.git("config", "protocol.ext.allow", "always")


@pytest.mark.parametrize("how", ["uploadpack", "sshCommand", "ext"])
def test_a_partial_clone_is_refused_in_one_line_and_no_remote_command_runs(origin, tmp_path, how):
    r = clone(origin, tmp_path / "partial", "--filter=blob:none")
    marker = tmp_path / "PWNED"
    hostile(r, how, marker)
    code, stdout, stderr, tasks = mine(r, "git-commit", tmp_path / "out.jsonl")
    assert not marker.exists()
    assert (code, stderr.count("\n"), "partial clone" in stderr, tasks) == (2, 1, True, []), stderr


@pytest.mark.parametrize("lazy_fetch_switch", [True, False])
def test_git_never_fetches_even_when_asked_for_a_missing_object(origin, tmp_path, monkeypatch, lazy_fetch_switch):
    """Behind the up-front refusal: no lazy fetch (GIT_NO_LAZY_FETCH, which the git here honours), and every
    transport forbidden (for a git that does not know that variable)."""
    r = clone(origin, tmp_path / "partial", "--filter=blob:none")
    marker = tmp_path / "PWNED"
    hostile(r, "uploadpack", marker)
    monkeypatch.setattr(mining.git, "refuse_remote_objects", lambda repo: None)
    # an older git, which does not know GIT_NO_LAZY_FETCH
    if not lazy_fetch_switch:
        env = mining.git.git_env
        monkeypatch.setattr(
            mining.git, "git_env", lambda path: {k: v for k, v in env(path).items() if k != "GIT_NO_LAZY_FETCH"}
        )
    repo = mining.Repo(r.path)
    blob = subprocess.run(
        ["git", "-C", str(origin.path), "rev-parse", "HEAD:src/core.py"], capture_output=True, text=True, check=True
    ).stdout.strip()
    with pytest.raises(mining.Skip):
        repo.git("cat-file", "-p", blob)
    assert not marker.exists()


def test_a_shallow_clone_never_mines_its_oldest_commit_as_the_whole_tree(origin, tmp_path):
    r = clone(origin, tmp_path / "shallow", "--depth", "2")
    code, stdout, stderr, tasks = mine(r, "git-commit", tmp_path / "out.jsonl")
    assert code == 0, stderr
    # 'two' is the cut: its parent is absent
    assert [t["id"] for t in tasks] == [f"git-{origin.shas['three'][:12]}"]
    assert reasons(stdout) == {"shallow clone: its parent is not in the clone": 1}
    assert "README.md" not in tasks[0]["input"]


@pytest.mark.parametrize("name", ["SKILL.md", "checks.py", "tasks.jsonl"])
def test_mining_refuses_the_skills_own_files_as_out_even_with_force(origin, tmp_path, name):
    skills = tmp_path / "skills"
    import shutil

    shutil.copytree(ROOT / "skills" / "git-commit", skills / "git-commit")
    target = skills / "git-commit" / name
    before = target.read_bytes()
    code, _, stderr = run(
        "--skills-dir", skills, "--skill", "git-commit", "--tasks-from-git", origin.path, "--out", target, "--force"
    )
    assert (code, stderr.count("\n"), "the skill's" in stderr) == (2, 1, True), stderr
    assert target.read_bytes() == before


SECRETS = {
    "env": "DB_PASSWORD=hunter2hunter2\n",
    "env export": "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLE\n",
    "python": "client_secret = 'q8Zr4LmW2xPn'\n",
    "yaml": "x_api_key: Zq3vT9mL2pRw8sK\n",
    "json": '{"X_API_KEY": "Zq3vT9mL2pRw8sK"}\n',
    "quoted env": 'SERVICE_TOKEN="a1b2c3d4e5f6g7"\n',
    "js": 'const stripeSecretKey = "Zq3vT9mL2pRw8sKx";\n',
    "npm": "//registry.npmjs.org/:_authToken=npm_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5\n",
    "url": "DATABASE = 'postgres://app:s3cr3tP4ss@db.internal/app'\n",
    "high entropy": 'CONFIG = {"signing": "Tz7pQ2vXk9LmR4sW8yNb3Hc6Fd1Gj5KeA0uZ"}\n',
}
CLEAN = {
    "env reference": "DB_PASSWORD=${DB_PASSWORD}\n",
    "actions": "      GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}\n",
    "code": "const token = await getToken(options);\n",
    "attribute": "password = config.password\n",
    "process env": "const apiKey = process.env.OPENAI_API_KEY;\n",
    "placeholder": "API_KEY=<your-api-key>\n",
    "sha": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n",
    "integrity": '"integrity": "sha512-Tz7pQ2vXk9LmR4sW8yNb3Hc6Fd1Gj5KeA0uZQ2vXk9LmR4sW8yNb3Hc6Fd1Gj5KeA0uZ=="\n',
    "camel case": "it('shouldRejectTheTokenWhenItExpiresInTheFuture2', () => {})\n",
    "token type": "tokenType: 'Bearer'\n",
    "empty": "SECRET_KEY=\n",
    "url placeholder": "git clone https://user:pass@example.com/repo.git\n",
    "base64 of text": "<!--renovate-debug:eyJjcmVhdGVkSW5WZXIiOiI0NC4xMS40IiwidXBkYXRlZEluVmVyIjoiNDQuMTEuNCJ9-->\n",
    "document id": "https://docs.google.com/document/d/1QrDFcIiPjSLDn3EL15IJygNPiHORgU1_OOAqWjiDU5Y/edit\n",
    "path": "NPM_TOKEN=$(cat $KEYSTORE_DIR/73713_google-cloud-npm-token-1)\n",
}


@pytest.mark.parametrize("case", SECRETS)
def test_a_secret_assignment_key_or_token_in_a_diff_is_found(case):
    assert secret_in(SECRETS[case]), case


@pytest.mark.parametrize("case", CLEAN)
def test_references_placeholders_and_hashes_are_not_secrets(case):
    assert secret_in(CLEAN[case]) is None, case


def test_a_commit_with_a_prefixed_secret_name_is_skipped_and_counted(tmp_path):
    r = Scripted(tmp_path / "repo")
    r.commit("base", "feat: add the app", {"app.cfg": "NAME=app\n"})
    for i, (case, text) in enumerate(SECRETS.items()):
        r.commit(f"s{i}", f"feat(config): set the {case} value", {f"conf/c{i}.txt": f"NAME=app\n{text}"})
    r.commit("ok", "feat(config): name the app", {"app.cfg": "NAME=app2\n"})
    code, stdout, stderr, tasks = mine(r, "git-commit", tmp_path / "out.jsonl")
    assert reasons(stdout).get("matches a secret pattern (never mined)") == len(SECRETS), stdout
    written = (tmp_path / "out.jsonl").read_text()
    assert "hunter2" not in written and "q8Zr4LmW2xPn" not in written and "Zq3vT9mL2pRw8sK" not in written
    assert [json.loads(line)["id"] for line in written.splitlines()][-1] == f"git-{r.shas['ok'][:12]}"
