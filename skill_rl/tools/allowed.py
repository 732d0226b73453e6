"""SKILL.md's `allowed-tools` (the Agent Skills spec's field, space-separated) as tools:

    allowed-tools: Bash(git status:*) Bash(git diff:*) Bash(git log:*) Read

`Bash(<prefix>:*)` entries become one `bash` tool that runs a command whose argv starts with one of the prefixes;
`Bash(<command>)` (no `:*`) allows that exact argv; `Read` becomes a `read` tool for a file of the workspace.
A command is split with shlex and run as argv, never by a shell: `;`, `|`, `&&`, `$(...)` and globs are plain
words. Anything else in the field is a problem of the skill, reported at load.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from skill_rl.tools.declare import Tool, parameters_schema

# one entry: Bash(...), or a bare word
_ENTRY = re.compile(r"(\w+)\(([^()]*)\)|(\S+)")
BASH, READ = "bash", "read"


def _model(name: str, field: str):
    from pydantic import ConfigDict, create_model

    return create_model(name, __config__=ConfigDict(extra="forbid", strict=True), **{field: (str, ...)})


def _bash_tool(prefixes: list[tuple[str, ...]], exact: list[tuple[str, ...]]) -> Tool:
    model = _model("bash_arguments", "command")
    # an exact command is kept as its words and a final '': the whole argv must equal them (`allowed`)
    every = tuple(prefixes) + tuple((*p, "") for p in exact)
    description = (
        "Run one command in the workspace and return what it prints. The command is split into words as a "
        "shell would quote them, but no shell runs it: ';', '|', '&&', '$(...)' and globs are plain words. "
        f"Allowed (... where more words may follow): {allowed_text(every)}"
    )
    return Tool(BASH, description, parameters_schema(model), "bash", prefixes=every, model=model)


def _read_tool() -> Tool:
    model = _model("read_arguments", "path")
    description = "Read a text file of the workspace; `path` is relative to the workspace."
    return Tool(READ, description, parameters_schema(model), "read", model=model)


def _bash_entry(arg: str) -> tuple[str, tuple[str, ...]] | str:
    """('prefix' or 'exact', argv words) for the inside of Bash(...), or why it is refused."""
    text, star = (arg[:-2], "prefix") if arg.endswith(":*") else (arg, "exact")
    try:
        words = tuple(shlex.split(text))
    except ValueError as e:
        return f"Bash({arg}) does not split into words: {e}"
    if not words:
        return f"Bash({arg}) names no command; write Bash(<command>:*), e.g. Bash(git status:*)"
    if "*" in text:
        return f"Bash({arg}): only a trailing ':*' is supported as a pattern"
    return star, words


def parse_allowed_tools(path: Path, line: int | None, value: str | None) -> tuple[list[Tool], list[str]]:
    """The tools `allowed-tools` names, and one problem line (naming SKILL.md and the field) per entry refused."""
    from skill_rl.text import problem, show

    prefixes, exact, read, problems = [], [], False, []
    for m in _ENTRY.finditer(value or ""):
        kind, arg, bare = m.group(1), m.group(2), m.group(3)
        why = None
        if bare == "Read":
            read = True
        elif kind == "Bash":
            got = _bash_entry(arg.strip())
            if isinstance(got, str):
                why = got
            else:
                (prefixes if got[0] == "prefix" else exact).append(got[1])
        else:
            why = f"{show(m.group(0))} is not supported (supported: Bash(<command prefix>:*), Bash(<command>), Read)"
        if why:
            problems.append(problem(path, line, f"field 'allowed-tools': {why}"))
    tools = ([_bash_tool(prefixes, exact)] if prefixes or exact else []) + ([_read_tool()] if read else [])
    return tools, problems


def allowed(prefixes: tuple[tuple[str, ...], ...], argv: list[str]) -> bool:
    """Whether `argv` starts with one of the allowed prefixes (an exact entry, ending in '', must be the whole argv)."""
    for p in prefixes:
        if p and p[-1] == "":
            if tuple(argv) == p[:-1]:
                return True
        elif tuple(argv[: len(p)]) == p:
            return True
    return False


def allowed_text(prefixes: tuple[tuple[str, ...], ...]) -> str:
    """The allowed commands as a reader writes them: `git status ...; git log -1` (... where more words may follow)."""
    return "; ".join(shlex.join(p[:-1]) if p and p[-1] == "" else shlex.join(p) + " ..." for p in prefixes)
