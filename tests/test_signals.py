"""A training stopped by a signal says so in its exit status: 128 + the signal (143 for SIGTERM, 130 for
Ctrl-C), as a shell reports a process the signal killed, never 0; and the same command resumes after the last
whole step."""

import os
import signal
import threading

import pytest
from conftest import DRY_RUN, SMALL_GROUPS, small_git_commit
from openai_server import FakeOpenAI
from test_mining import run

# the training loop loads ART (and so torch)
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_training_stopped_by_a_signal_exits_128_plus_the_signal(tmp_path, monkeypatch, sig, code):
    sent = threading.Event()

    def policy(request):
        # the first rollout of step 1: the run's signal handlers are in place
        if not sent.is_set():
            sent.set()
            os.kill(os.getpid(), sig)
        return "fix(app): raise the limit"

    skills = small_git_commit(tmp_path, train=8, val=1)
    monkeypatch.chdir(tmp_path)
    with FakeOpenAI(policy_fn=policy) as server:
        monkeypatch.setenv("SKILL_RL_POLICY_BASE_URL", server.url)
        command = (
            "--skills-dir",
            skills,
            "--skill",
            "git-commit",
            *DRY_RUN,
            "--judge",
            "none",
            "--steps",
            "5",
            *SMALL_GROUPS,
            "--eval-every",
            "100",
        )
        got, stdout, stderr = run(*command)
        assert got == code, stderr[-2000:]
        assert (
            "stopping after this step" in stderr and "stopped early: yes" in stdout and "step    1 | reward" in stdout
        )
        assert "step    2 |" not in stdout
        got, stdout, stderr = run(*command)
    assert got == 0 and "starting at step 1 of 5" in stdout and "step    5 | reward" in stdout, stderr[-2000:]
