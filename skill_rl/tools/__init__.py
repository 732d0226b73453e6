"""Tools a skill declares, the workspace a rollout acts in, and the sandbox each tool call runs in (docs/tools.md).

    declare.py    @tool, Tool (name, description, parameters: the JSON schema; schema() for the OpenAI API)
    allowed.py    SKILL.md's allowed-tools: Bash(<prefix>:*) as the `bash` tool, Read as the `read` tool
    loader.py     load_tools(skill_dir, allowed_tools)
    workspace.py  Workspace.fresh(source): a private copy per rollout; inside(workspace, path)
    toolbox.py    Toolbox(tools, workspace).run(name, arguments) -> CallRecord; Episode (what an episode check gets)
    episodes.py   Episodes: a batch's open episodes (workspace and calls) by the id their trajectories carry
    sandbox.py    one call in a child process: scrubbed environment, time limit, output cap
    child.py      the child: namespaces (user, network, mount, PID), resource limits, the call
    scripted.py   play(skill, task, calls, answer) -> Played: a scripted episode (the warm start's references)

Nothing here imports ART or torch; names are loaded on first use, so a tool's child process (which imports `tool`
through the user's tools.py) stays light.
"""

__all__ = [
    "CallRecord",
    "Episode",
    "Episodes",
    "Outside",
    "Played",
    "Tool",
    "ToolProblem",
    "Toolbox",
    "Workspace",
    "inside",
    "load_tools",
    "play",
    "tool",
]

_WHERE = {
    "CallRecord": "toolbox",
    "Episode": "toolbox",
    "Episodes": "episodes",
    "Toolbox": "toolbox",
    "Outside": "workspace",
    "Workspace": "workspace",
    "inside": "workspace",
    "Tool": "declare",
    "ToolProblem": "declare",
    "tool": "declare",
    "load_tools": "loader",
    "Played": "scripted",
    "play": "scripted",
}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'skill_rl.tools' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"skill_rl.tools.{_WHERE[name]}"), name)
