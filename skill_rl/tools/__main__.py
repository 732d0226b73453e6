"""`python -m skill_rl.tools`: what the tool sandbox isolates on this machine, measured by making the calls a
hostile tool would make (docs/tools.md quotes it)."""

from __future__ import annotations

import socket
import statistics
import tempfile
from pathlib import Path

from skill_rl.tools.loader import load_tools
from skill_rl.tools.sandbox import namespaces_refused
from skill_rl.tools.toolbox import Toolbox
from skill_rl.tools.workspace import Workspace

PROBES = """
import os, socket
from pathlib import Path
from skill_rl import tool


@tool
def write(workspace: Path, target: str) -> str:
    "Write a file anywhere."
    Path(target).write_text("x")
    return "written"


@tool
def peek(workspace: Path, target: str) -> str:
    "Read a file anywhere."
    return Path(target).read_text()[:20]


@tool
def connect(workspace: Path, port: int) -> str:
    "Connect to 127.0.0.1."
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    return "connected"


@tool
def environment(workspace: Path) -> str:
    "The environment's names."
    return " ".join(sorted(os.environ))
"""


def _said(record) -> str:
    return f"refused ({record.error})" if record.error else f"allowed ({record.result[:40]!r})"


def measure() -> list[str]:
    """One line per property of the sandbox, as measured by calls made here."""
    with tempfile.TemporaryDirectory() as tmp:
        skill = Path(tmp) / "probe"
        skill.mkdir()
        (skill / "tools.py").write_text(PROBES)
        tools = load_tools(skill, "Read")
        with Workspace.fresh(None) as ws, socket.create_server(("127.0.0.1", 0)) as server:
            (ws.path / "a.txt").write_text("a")
            box = Toolbox(tools, ws)
            seconds = [box.run("read", '{"path": "a.txt"}').seconds for _ in range(5)]
            outside = Path(tmp) / "marker"
            lines = [
                f"namespaces (user, network, mount, PID): {namespaces_refused() or 'made'}",
                f"a write outside the workspace ({outside}): {_said(box.run('write', f'{{"target": "{outside}"}}'))}",
                f"a write inside the workspace: {_said(box.run('write', f'{{"target": "{ws.path}/b"}}'))}",
                f"a TCP connection to 127.0.0.1: {_said(box.run('connect', f'{{"port": {server.getsockname()[1]}}}'))}",
                f"the environment a tool sees: {box.run('environment', '{}').result}",
                f"the read tool given a path outside: {_said(box.run('read', '{"path": "../x"}'))}",
                f"a tools.py function reading /etc/hostname: {_said(box.run('peek', '{"target": "/etc/hostname"}'))}",
                f"one call, start to answer: {statistics.median(seconds):.2f} s (median of 5 read calls)",
            ]
    return lines


def main() -> None:
    print("\n".join(measure()))


if __name__ == "__main__":
    main()
