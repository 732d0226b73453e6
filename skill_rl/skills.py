"""Load and lint a skill folder: SKILL.md, tasks.jsonl and the optional checks.py and exploits.py.

A skill is a valid Agent Skill (agentskills.io): YAML frontmatter with only the keys the spec
allows, skill-rl settings under `metadata` as strings, then a markdown body. The body is what
the policy sees as its system prompt; it is parsed (markdown-it-py, not regexes) into sections
by heading so the judge's rubric can list the procedure's numbered steps.

Every problem is collected, not just the first, and reported as one line naming the file, the
line and the field: `skills/git-commit/tasks.jsonl:7: field 'split' must be 'train' or 'val', got 'test'`.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import importlib.util
import inspect
import json
import os
import re
import reprlib
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import yaml
from markdown_it import MarkdownIt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .watchdog import Timeout, Watchdog

DIMENSIONS = ("format", "procedure", "correctness")
DEFAULT_WEIGHTS = {"format": 0.3, "procedure": 0.4, "correctness": 0.3}
SPEC_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
SKILL_RL_KEYS = {f"weight-{d}" for d in DIMENSIONS} | {"judge", "derive-checks"}
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_LINE_CHARS = 1_000_000  # one task line bigger than this is an error, not a model input
BOM = b"\xef\xbb\xbf"
# YAML that PyYAML reads but the reference validator's parser (strictyaml) refuses, by token type
STRICTYAML_REFUSES = {"FlowMappingStartToken": "flow style '{...}'", "FlowSequenceStartToken": "flow style '[...]'",
                      "AnchorToken": "an anchor '&'", "AliasToken": "an alias '*'", "TagToken": "a tag '!'"}
QUOTE_IT = "put the value in quotes (YAML reads unquoted yes, no, true, false and numbers as other types)"
IMPORT_SECONDS = 10.0  # a checks.py that takes longer to import is reported, not waited for
MAX_YAML_VALUES = 10_000  # frontmatter holds a handful of values; aliases may not expand it past this


class SkillError(Exception):
    """A skill or its tasks failed validation; `problems` holds one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def display(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _problem(path: Path, line: int | None, msg: str) -> str:
    return f"{display(path)}:{line}: {msg}" if line else f"{display(path)}: {msg}"


_repr = reprlib.Repr(maxlevel=2, maxtuple=4, maxlist=4, maxdict=4, maxset=4, maxstring=60, maxother=60)


def brief(error: BaseException, limit: int = 200) -> str:
    """An exception as one bounded line: `ZeroDivisionError: division by zero`."""
    from .keys import redact

    text = " ".join(redact(str(error)).split())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def show(value: Any, limit: int = 40) -> str:
    """A value as it appears in a message: bounded work and length, whatever its size or shape."""
    text = repr(value[:limit]) if isinstance(value, str) else _repr.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Frontmatter(BaseModel):
    """The Agent Skills frontmatter; unknown top-level keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    name: str = Field(min_length=1, max_length=64, pattern=NAME_RE.pattern)
    description: str = Field(min_length=1, max_length=1024, pattern=r"^[^<>]*$")
    license: str | None = None
    compatibility: str | None = Field(None, min_length=1, max_length=500)
    metadata: dict[str, str] = {}
    allowed_tools: str | None = Field(None, alias="allowed-tools")


class Task(BaseModel):
    """One line of tasks.jsonl. `expect` is validated by the skill's own `Expect` model."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    id: str = Field(min_length=1, pattern=r"\S")
    input: str = Field(min_length=1, pattern=r"\S")
    split: Literal["train", "val"] = "train"
    expect: Any = None
    reference: str | None = None
    line: int = Field(0, exclude=True)  # where it came from, for messages


def _refuse(self, *args, **kwargs):
    raise TypeError("a task is read-only: checks may not change it")


class ReadOnlyList(list):
    """A list from a task's `expect`: reads like a list, refuses every change."""

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __reduce_ex__(self, protocol):  # a copy is an ordinary list
        return list, (list(self),)


class ReadOnlyDict(dict):
    """A dict from a task's `expect`: reads like a dict, refuses every change."""

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __reduce_ex__(self, protocol):
        return dict, (dict(self),)


_FROZEN: dict[type, type] = {}  # a skill's pydantic model -> its frozen subclass


def read_only(value: Any) -> Any:
    """`value` (a validated `expect`) made deeply read-only, so that no check can change what the next check
    or the next output sees: pydantic models frozen, lists and dicts refusing changes, sets frozen."""
    if isinstance(value, BaseModel):
        for name, v in list(vars(value).items()):
            value.__dict__[name] = read_only(v)
        cls = type(value)
        if not cls.model_config.get("frozen"):
            if cls not in _FROZEN:
                _FROZEN[cls] = type(cls.__name__, (cls,), {"model_config": {**cls.model_config, "frozen": True},
                                                           "__module__": cls.__module__, "__qualname__": cls.__qualname__})
            object.__setattr__(value, "__class__", _FROZEN[cls])
        return value
    if isinstance(value, list):
        return ReadOnlyList(read_only(v) for v in value)
    if type(value) is tuple:
        return tuple(read_only(v) for v in value)
    if isinstance(value, dict):
        return ReadOnlyDict({k: read_only(v) for k, v in value.items()})
    if isinstance(value, set):
        return frozenset(value)
    return value


@dataclass(frozen=True)
class Section:
    title: str
    text: str  # markdown source of the section body, heading excluded
    line: int  # line of the heading in SKILL.md
    text_line: int = 0  # line in SKILL.md where `text` starts


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path  # the skill folder
    body: str  # the markdown after the frontmatter: the policy's system prompt
    sections: dict[str, Section]  # lower-cased heading -> section
    steps: tuple[str, ...]  # the Procedure's ordered-list items
    rules: tuple[str, ...]  # the Rules section's list items (may be empty)
    weights: dict[str, float]
    judged: tuple[str, ...]  # dimensions RULER scores
    checks: ModuleType | None  # the skill's checks.py, if any
    tasks: tuple[Task, ...] = field(default=())
    derive: bool = True  # derive format checks from SKILL.md's prose (metadata `derive-checks`)
    exploits: ModuleType | None = None  # the skill's exploits.py, if any: degenerate policies (skill_rl/exploits.py)

    def split(self, name: str) -> list[Task]:
        return [t for t in self.tasks if t.split == name]

    def task(self, task_id: str) -> Task | None:
        return next((t for t in self.tasks if t.id == task_id), None)

    def prompt_tokens(self, task: Task) -> int:
        """A deliberately high estimate of the prompt's tokens: 3 characters a token (code and diffs
        tokenize denser than prose), plus a little for the chat template."""
        return (len(self.body) + len(task.input)) // 3 + 16

    def fitting(self, tasks: list[Task], context_tokens: int, max_tokens: int) -> tuple[list[Task], str | None]:
        """The tasks whose prompt leaves room for `max_tokens` in the context, and a note naming the others."""
        keep, skipped = [], []
        for t in tasks:
            (keep if self.prompt_tokens(t) <= context_tokens - max_tokens else skipped).append(t)
        if not skipped:
            return keep, None
        return keep, (f"skipping {len(skipped)} task(s) longer than --context-tokens {context_tokens} minus "
                      f"--max-tokens {max_tokens} (estimated at 3 characters a token): {', '.join(t.id for t in skipped)}")


# ---------------------------------------------------------------- SKILL.md


def _read_text(path: Path, problems: list[str]) -> str | None:
    try:
        data = path.read_bytes()
    except OSError as e:
        problems.append(_problem(path, None, f"cannot read file: {e.strerror}"))
        return None
    if data.startswith(BOM):  # reported, then read past: the other problems are still worth listing
        problems.append(_problem(path, 1, "file starts with a UTF-8 byte-order mark, which the Agent Skills reference "
                                          "validator (skills-ref) and other agents refuse: save it as UTF-8 without BOM"))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        problems.append(_problem(path, line, f"file is not valid UTF-8 (byte 0x{data[e.start]:02x})"))
        return None
    return text.replace("\r\n", "\n")


def _split_frontmatter(path: Path, text: str, problems: list[str]) -> tuple[str, str, int] | None:
    """Return (yaml text, body, line where the body starts)."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        problems.append(_problem(path, 1, "SKILL.md must start with a '---' line opening the YAML frontmatter"))
        return None
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1 :]), i + 2
        if "---" in line:  # the reference parser ends the frontmatter at the first '---' anywhere
            problems.append(_problem(path, i + 1, "frontmatter holds '---' inside a line; the Agent Skills reference "
                                                  "parser would end the frontmatter there: reword it"))
    problems.append(_problem(path, 1, "frontmatter opened with '---' is never closed by a '---' line"))
    return None


def _yaml_problem(path: Path, e: yaml.YAMLError, problems: list[str]) -> None:
    mark = getattr(e, "problem_mark", None)
    what = getattr(e, "problem", None) or str(e).splitlines()[0]
    problems.append(_problem(path, mark.line + 2 if mark else 1, f"frontmatter is not valid YAML: {what}"))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else []


def _node_problem(root: yaml.Node) -> tuple[yaml.Node, str] | None:
    """The first thing plain frontmatter may not hold: a key that is not text, or aliases that expand it past
    MAX_YAML_VALUES values or into itself. Each node is counted once, so a "billion laughs" costs its size."""
    sizes: dict[int, int] = {}  # id(node) -> values once expanded; -1 while its children are being counted
    stack = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        kids = _children(node)
        if leaving:
            sizes[id(node)] = min(MAX_YAML_VALUES + 1, 1 + sum(sizes[id(k)] for k in kids))
            continue
        if id(node) in sizes:
            if sizes[id(node)] == -1:
                return node, "its aliases make a value contain itself"
            continue
        if isinstance(node, yaml.MappingNode):
            bad = next((k for k, _ in node.value if not isinstance(k, yaml.ScalarNode)), None)
            if bad is not None:
                return bad, f"keys must be plain text, got a {'list' if isinstance(bad, yaml.SequenceNode) else 'mapping'}"
        sizes[id(node)] = -1
        stack.append((node, True))
        stack.extend((k, False) for k in kids)
    if sizes[id(root)] > MAX_YAML_VALUES:
        return root, f"its aliases expand it to more than {MAX_YAML_VALUES:,} values; write the values out"
    return None


def _load_yaml(path: Path, source: str, problems: list[str]) -> tuple[dict, dict[str, int]] | None:
    """The frontmatter as plain data (text keys, standard tags, bounded aliases) and the SKILL.md line of each
    top-level key; duplicate keys are problems. None when it cannot be read."""
    loader = None
    try:
        loader = yaml.SafeLoader(source)  # it rejects control characters at once
        node = loader.get_single_node()
        if not isinstance(node, yaml.MappingNode):
            problems.append(_problem(path, 2, "frontmatter must be a YAML mapping of keys to values"))
            return None
        bad = _node_problem(node)
        if bad:
            problems.append(_problem(path, bad[0].start_mark.line + 2, f"frontmatter is not valid YAML here: {bad[1]}"))
            return None
        data = loader.construct_document(node)
    except yaml.YAMLError as e:  # syntax, or a tag the safe loader does not construct (!!python/..., !local)
        _yaml_problem(path, e, problems)
        return None
    except RecursionError:
        problems.append(_problem(path, 2, "frontmatter is not valid YAML: nested too deeply"))
        return None
    finally:
        if loader is not None:
            loader.dispose()
    lines: dict[str, int] = {}
    for key_node, _ in node.value:
        key = key_node.value
        if key in lines:
            problems.append(_problem(path, key_node.start_mark.line + 2, f"field '{key}' is given twice"))
        lines[key] = key_node.start_mark.line + 2
    return data, lines


def _pydantic_problems(path: Path, err: ValidationError, line_of, skip: set[str] = frozenset()) -> list[str]:
    """One line per error; errors on the top-level fields in `skip` (already reported) are left out."""
    out = []
    for e in err.errors():
        if e["loc"] and str(e["loc"][0]) in skip:
            continue
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            msg = f"field '{loc}' is not allowed"
        elif e["type"] == "missing":
            msg = f"field '{loc}' is required"
        else:
            msg = f"field '{loc}': {e['msg'][0].lower()}{e['msg'][1:]}, got {show(e.get('input'))}"
        out.append(_problem(path, line_of(e["loc"]), msg))
    return out


def _frontmatter(path: Path, source: str, problems: list[str]) -> tuple[Frontmatter | None, dict[str, int]]:
    """The validated frontmatter (None when invalid) and the SKILL.md line of each top-level key."""
    loaded = _load_yaml(path, source, problems)
    if loaded is None:
        return None, {}
    data, key_lines = loaded
    problems.extend(_strictyaml_problems(path, source))
    reported = _scalar_problems(path, data, key_lines, problems)
    extra = [k for k in data if k not in SPEC_KEYS]
    for key in extra:
        problems.append(
            _problem(path, key_lines.get(str(key)), f"field '{key}' is not allowed in Agent Skills frontmatter "
                     f"(allowed: {', '.join(SPEC_KEYS)}); put skill-rl settings under 'metadata'")
        )
        data.pop(key)
    try:
        return Frontmatter.model_validate(data), key_lines
    except ValidationError as e:
        problems.extend(_pydantic_problems(path, e, lambda loc: key_lines.get(str(loc[0])), skip=reported))
        return None, key_lines


def _strictyaml_problems(path: Path, source: str) -> list[str]:
    """YAML the reference validator refuses (its parser, strictyaml, allows a strict subset of YAML)."""
    out = []
    for token in yaml.scan(source, Loader=yaml.SafeLoader):
        what = STRICTYAML_REFUSES.get(type(token).__name__)
        if what:
            out.append(_problem(path, token.start_mark.line + 2, f"frontmatter uses {what}, which the Agent Skills "
                                "reference validator (skills-ref) refuses: write plain indented YAML"))
    return out


def _scalar_problems(path: Path, data: dict, key_lines: dict[str, int], problems: list[str]) -> set[str]:
    """Strings that YAML read as something else, and the rules where skill-rl is stricter than the spec on
    purpose. Offending values are removed from `data`; returns the top-level fields reported."""
    reported = set()
    for key in ("name", "description", "license", "compatibility", "allowed-tools"):
        if not isinstance(data.get(key), (str, list, dict, type(None))):  # `description: yes`, dates, !!binary: say so, once
            problems.append(_problem(path, key_lines[key], f"field '{key}' must be a string, got {show(data[key])}: {QUOTE_IT}"))
            reported.add(key)
    if isinstance(data.get("description"), str) and re.search("[<>]", data["description"]):
        problems.append(_problem(path, key_lines["description"], "field 'description' must not contain '<' or '>': "
                                 "stricter than the Agent Skills spec on purpose, as agents put descriptions inside "
                                 "XML tags in their prompts"))
        reported.add("description")
    meta = data.get("metadata")
    for k, v in list(meta.items()) if isinstance(meta, dict) else []:
        if not isinstance(v, str):
            problems.append(_problem(path, key_lines["metadata"], f"field 'metadata.{k}' must be a string, got {show(v)}: "
                                     f"{QUOTE_IT}; stricter than skills-ref on purpose, which turns any value into a string"))
            meta.pop(k)
    for key in reported:
        data.pop(key)
    return reported


def _settings(path: Path, fm: Frontmatter, line: int | None, problems: list[str]):
    """Rubric weights, judged dimensions and whether to derive checks, from `metadata` (strings, as the spec requires)."""
    meta = fm.metadata
    weights = dict(DEFAULT_WEIGHTS)
    for dim in DIMENSIONS:
        raw = meta.get(f"weight-{dim}")
        if raw is None:
            continue
        try:
            weights[dim] = float(raw)
        except ValueError:
            problems.append(_problem(path, line, f"field 'metadata.weight-{dim}' must be a number in a string, got {show(raw)}"))
            continue
        if not 0 <= weights[dim] <= 1:
            problems.append(_problem(path, line, f"field 'metadata.weight-{dim}' must be between 0 and 1, got {raw}"))
    if abs(sum(weights.values()) - 1) > 1e-6:
        got = " + ".join(f"{weights[d]:g}" for d in DIMENSIONS)
        problems.append(_problem(path, line, f"field 'metadata.weight-*' must sum to 1, got {got} = {sum(weights.values()):g}"))
    for key in meta:
        if key.startswith("weight-") and key not in SKILL_RL_KEYS:
            problems.append(_problem(path, line, f"field 'metadata.{key}' is not a rubric dimension (allowed: {', '.join(sorted(SKILL_RL_KEYS))})"))
    judged = tuple(d.strip() for d in meta.get("judge", "procedure,correctness").split(",") if d.strip())
    for dim in judged:
        if dim not in DIMENSIONS and dim != "none":
            problems.append(_problem(path, line, f"field 'metadata.judge' names unknown dimension {dim!r} (allowed: {', '.join(DIMENSIONS)}, none)"))
    derive = meta.get("derive-checks", "true")
    if derive not in ("true", "false"):
        problems.append(_problem(path, line, f"field 'metadata.derive-checks' must be \"true\" or \"false\", got {show(derive)}"))
    return weights, tuple(d for d in judged if d in DIMENSIONS), derive != "false"


MAX_NESTING = 100  # markdown-it stops reading blocks nested deeper than this (lists count twice)
_md = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING})


def _too_deep(tokens) -> int | None:
    """The body line (0-based) where markdown-it gave up nesting, if it did: it skips the rest of that block."""
    for tok in tokens:
        if tok.level >= MAX_NESTING - 1:
            return tok.map[0] if tok.map else 0
    return None


def _sections(tokens, body: str, offset: int) -> dict[str, Section]:
    """Split the body into sections by heading; a section runs to the next heading of its level or higher.
    One pass with a stack of the open sections: linear in the number of headings."""
    lines = body.split("\n")
    heads = [(i, t) for i, t in enumerate(tokens) if t.type == "heading_open"]
    ends = [len(lines)] * len(heads)
    still_open: list[int] = []
    for n, (_, tok) in enumerate(heads):
        while still_open and heads[still_open[-1]][1].tag >= tok.tag:  # "h2" >= "h1": same or deeper level
            ends[still_open.pop()] = tok.map[0]
        still_open.append(n)
    out: dict[str, Section] = {}
    for n, (i, tok) in enumerate(heads):
        title = tokens[i + 1].content.strip()
        if title.lower() not in out:
            raw = "\n".join(lines[tok.map[1] : ends[n]])
            lead = raw[: len(raw) - len(raw.lstrip())].count("\n")  # blank lines that strip() drops
            out[title.lower()] = Section(title, raw.strip(), tok.map[0] + offset, tok.map[1] + lead + offset)
    return out


def _list_items(text: str, ordered: bool | None) -> list[str]:
    """Top-level list items of a markdown fragment, each as its source text without the marker."""
    tokens = _md.parse(text)
    lines = text.split("\n")
    items, depth, list_ok = [], 0, False
    for tok in tokens:
        if tok.type in ("ordered_list_open", "bullet_list_open"):
            depth += 1
            if depth == 1:
                list_ok = ordered is None or (tok.type == "ordered_list_open") == ordered
        elif tok.type in ("ordered_list_close", "bullet_list_close"):
            depth -= 1
        elif tok.type == "list_item_open" and depth == 1 and list_ok:
            src = "\n".join(lines[tok.map[0] : tok.map[1]]).strip()
            items.append(" ".join(re.sub(r"^(\d+[.)]|[-*+])\s+", "", src).split()))
    return items


# ---------------------------------------------------------------- checks.py and tasks.jsonl


def _callable_problem(path: Path, what: str, name: str, fn, params: str, args: tuple) -> str | None:
    """Why a function that checks.py or exploits.py marked (`what`: 'check' or 'exploit') could never be called
    as `fn(*args)`: it is no function, it is async, or its parameters do not take `params`."""
    line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
    if not inspect.isfunction(fn):
        return _problem(path, line, f"{what} '{name}' is not a function; @{what} marks functions ({params})")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return _problem(path, line, f"{what} '{name}' is async; {what}s are plain functions ({params})")
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        return _problem(path, line, f"{what} '{name}' must take ({params}), got {name}{inspect.signature(fn)}")
    return None


def _check_problems(path: Path, module: ModuleType) -> list[str]:
    """A check that could never be called as `check(output, task)` is a problem of the skill, found at load."""
    found = (_callable_problem(path, "check", name, fn, "output, task", ("", None))
             for name, fn in vars(module).items() if getattr(fn, "dimension", None) in DIMENSIONS)
    return [p for p in found if p]


def marked_exploits(module: ModuleType | None) -> list:
    """The functions of an exploits.py marked with `@exploit` (skill_rl/exploits.py), in the order it defines them."""
    fns = dict.fromkeys(v for v in vars(module).values() if isinstance(getattr(v, "exploit", None), str)) if module else {}
    return sorted(fns, key=lambda f: getattr(getattr(f, "__code__", None), "co_firstlineno", 0))


def _exploit_problems(path: Path, module: ModuleType) -> list[str]:
    """An exploit that could never be called as `exploit(ctx, task)`, or that takes another one's name."""
    out, seen = [], {}
    for name, fn in vars(module).items():
        if not isinstance(getattr(fn, "exploit", None), str) or seen.get(fn.exploit, (None, None))[1] is fn:
            continue
        if problem := _callable_problem(path, "exploit", name, fn, "ctx, task", (None, None)):
            out.append(problem)
        elif fn.exploit in seen:
            out.append(_problem(path, fn.__code__.co_firstlineno, f"exploit '{name}' is named {fn.exploit!r}, "
                                f"like exploit '{seen[fn.exploit][0]}': give each its own name"))
        seen.setdefault(fn.exploit, (name, fn))
    return out


def _user_line(error: BaseException, path: Path) -> int | None:
    """The line of `path` that was running when `error` was raised (the innermost frame in that file)."""
    line, tb, target = None, error.__traceback__, os.path.abspath(path)
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _load_user_code(folder: Path, file: str, lint, problems: list[str]) -> ModuleType | None:
    """Import a skill's own Python file (checks.py, exploits.py): user code, so bounded in time, its prints sent
    to stderr (stdout may be JSONL), whatever it raises, SystemExit included, reported as one line naming the
    line it was running, and what `lint(path, module)` finds wrong with it reported the same way."""
    path = folder / file
    if not path.exists():
        return None
    name = f"skill_rl_{path.stem}_{folder.name.replace('-', '_')}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pydantic look their module up while it runs
    with Watchdog(IMPORT_SECONDS) as dog, contextlib.redirect_stdout(sys.stderr):
        _, error = dog.call(spec.loader.exec_module, module)
    if isinstance(error, SyntaxError):
        problems.append(_problem(path, error.lineno, f"{file} does not parse: {error.msg}"))
    elif isinstance(error, Timeout):
        problems.append(_problem(path, _user_line(error, path), f"{file} did not finish importing within {IMPORT_SECONDS:g} s"))
    elif error is not None:
        problems.append(_problem(path, _user_line(error, path), f"{file} failed to import: {brief(error)}"))
    else:
        found = lint(path, module)
        problems.extend(found)
        if not found:
            return module
    del sys.modules[name]
    return None


def no_duplicate_keys(pairs):
    """json.loads hook: a key given twice in one object is an error (JSON would keep the last silently)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"field '{dup}' is given twice")
    return out


def parse_task_line(path: Path, n: int, raw: bytes, expect_model, problems: list[str]) -> Task | None:
    """Parse one tasks.jsonl line (1-based `n`); append problems and return None when it is invalid."""
    if len(raw) > MAX_LINE_CHARS:
        problems.append(_problem(path, n, f"line is {len(raw):,} bytes; the limit is {MAX_LINE_CHARS:,}"))
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        problems.append(_problem(path, n, f"line is not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"))
        return None
    try:
        obj = json.loads(text, object_pairs_hook=no_duplicate_keys)
    except ValueError as e:  # JSONDecodeError is a ValueError; so is a duplicate key
        msg = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        col = f" at column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        problems.append(_problem(path, n, f"invalid JSON{col}: {msg}"))
        return None
    except RecursionError:
        problems.append(_problem(path, n, "invalid JSON: nested too deeply"))
        return None
    if not isinstance(obj, dict):
        problems.append(_problem(path, n, f"each line must be a JSON object, got {type(obj).__name__}"))
        return None
    try:
        task = Task.model_validate({**obj, "line": n})
    except ValidationError as e:
        problems.extend(_pydantic_problems(path, e, lambda loc: n))
        return None
    if task.expect is None:
        return task
    if expect_model is None:
        problems.append(_problem(path, n, "field 'expect' is given but this skill has no checks.py defining an Expect schema"))
        return None
    try:
        return task.model_copy(update={"expect": read_only(expect_model.model_validate(task.expect))})
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(p) for p in ("expect", *err["loc"]))
            problems.append(_problem(path, n, f"field '{loc}': {err['msg'][0].lower()}{err['msg'][1:]}, got {show(err.get('input'))}"))
        return None


def load_tasks(path: Path, expect_model, problems: list[str]) -> list[Task]:
    try:
        f = path.open("rb")
    except OSError as e:
        problems.append(_problem(path, None, f"cannot read file: {e.strerror}"))
        return []
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    with f:  # line by line: a 100,000-task file never sits in memory twice
        for n, raw in enumerate(f, start=1):
            raw = raw.rstrip(b"\r\n")
            if n == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM, as some editors write
            if not raw.strip():
                continue
            task = parse_task_line(path, n, raw, expect_model, problems)
            if task is None:
                continue
            if task.id in seen:
                problems.append(_problem(path, n, f"field 'id' {task.id!r} is already used on line {seen[task.id]}"))
                continue
            seen[task.id] = n
            tasks.append(task)
    if not tasks and not any(p.startswith(display(path)) for p in problems):
        problems.append(_problem(path, None, "no tasks: add one JSON object per line"))
    return tasks


# ---------------------------------------------------------------- the whole skill


def _body(md: Path, body: str, body_line: int, problems: list[str]) -> tuple[dict[str, Section], list[str], list[str]]:
    """Sections, procedure steps and rules of the markdown body, with a problem for each that is missing."""
    tokens = _md.parse(body)
    deep = _too_deep(tokens)
    if deep is not None:  # what follows was skipped by the parser: report that, not the sections it hid
        problems.append(_problem(md, deep + body_line, "markdown nested too deeply to read (lists or quotes inside "
                                 "each other); the rest of the file cannot be read: flatten it"))
        return {}, [], []
    sections = _sections(tokens, body, body_line)
    steps: list[str] = []
    if "procedure" not in sections:
        problems.append(_problem(md, body_line, "section 'Procedure' is missing: add a '## Procedure' heading with a numbered list of steps"))
    else:
        steps = _list_items(sections["procedure"].text, ordered=True)
        if len(steps) < 2:
            problems.append(_problem(md, sections["procedure"].line, f"section 'Procedure' must hold an ordered list of at least 2 steps, found {len(steps)}"))
    if "output format" not in sections:
        problems.append(_problem(md, body_line, "section 'Output Format' is missing: add a '## Output Format' heading describing the output"))
    elif not sections["output format"].text:
        problems.append(_problem(md, sections["output format"].line, "section 'Output Format' is empty"))
    rules = _list_items(sections["rules"].text, ordered=None) if "rules" in sections else []
    return sections, steps, rules


def load_skill(folder: Path, *, with_tasks: bool = True, with_checks: bool = True) -> Skill:
    """Load and validate a skill folder; raise SkillError listing every problem found.
    `with_checks=False` (for `--list`) runs none of the skill's own code: no checks.py, no exploits.py, no tasks."""
    folder = Path(folder)
    md = folder / "SKILL.md"
    problems: list[str] = []
    text = _read_text(md, problems)
    parts = _split_frontmatter(md, text, problems) if text is not None else None
    if parts is None:
        raise SkillError(problems)
    source, body, body_line = parts
    fm, key_line = _frontmatter(md, source, problems)
    if fm is not None and fm.name != folder.name:
        problems.append(_problem(md, key_line.get("name"), f"field 'name' must equal the folder name {folder.name!r}, got {fm.name!r}"))
    weights, judged, derive = _settings(md, fm, key_line.get("metadata"), problems) if fm else (DEFAULT_WEIGHTS, (), True)
    sections, steps, rules = _body(md, body, body_line, problems)
    checks = _load_user_code(folder, "checks.py", _check_problems, problems) if with_checks else None
    exploits = _load_user_code(folder, "exploits.py", _exploit_problems, problems) if with_checks else None
    tasks = load_tasks(folder / "tasks.jsonl", getattr(checks, "Expect", None), problems) if with_tasks and with_checks else []
    if problems:
        raise SkillError(problems)
    return Skill(
        name=fm.name, description=fm.description, path=folder, body=body.strip(), sections=sections,
        steps=tuple(steps), rules=tuple(rules), weights=weights, judged=judged, checks=checks, tasks=tuple(tasks),
        derive=derive, exploits=exploits,
    )


def replace_problem(path: Path) -> str | None:
    """Why `path` must not be replaced by a new file: it is a folder, a device, a pipe or a socket (`/dev/null`:
    as root, replacing it would break the machine). A regular file, a link (the link is replaced, never
    what it points to) or nothing there are fine."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return e.strerror
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return None
    return "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, pipe or socket); pass a file path"


def _umask() -> int:
    try:  # Linux tells it without changing it (os.umask would, for a moment, for every thread)
        return int(next(ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("Umask:")), 8)
    except (OSError, StopIteration, ValueError, IndexError):
        return 0o022


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write a whole file or nothing: a crash or a full disk leaves the old file (or none), never half a new
    one. The one write path for every output we replace: a new temporary file with a unique name in the
    same folder (created with O_EXCL, so a link planted at any name is never followed), then renamed over
    `path`, which must be a regular file or nothing (OSError otherwise). Text is redacted, like every sink."""
    from .keys import redact  # what is written is redacted, like every other sink

    path = Path(path)
    if problem := replace_problem(path):
        raise OSError(errno.EINVAL, f"{problem}, not replaced", str(path))
    data = redact(text).encode() if isinstance(text, str) else text
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:100]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # as a plain open() would make it, not mkstemp's 0600
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # a full disk leaves no half-written temporary beside the old file
        raise


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSONL file another run was appending to; a line cut short by a crash is dropped."""
    out = []
    for raw in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue
    return out


def shipped_skills_dir() -> Path:
    """The skills that come with skill-rl: `skills/` of a checkout (editable installs included), or the
    copy that a wheel or a plain `pip install .` puts in the package as `skill_rl/shipped_skills`."""
    package = Path(__file__).resolve().parent
    installed = package / "shipped_skills"
    return installed if installed.is_dir() else package.parent / "skills"


def skill_dirs(explicit: Path | None = None) -> list[Path]:
    """Where skills are looked up, first match wins: `--skills-dir` alone when given; otherwise `skills/`
    in the working directory (when there is one), then the shipped skills."""
    if explicit is not None:
        return [Path(explicit)]
    here, shipped = Path.cwd() / "skills", shipped_skills_dir()
    if here.is_dir() and here.resolve() != shipped.resolve():
        return [here, shipped]
    return [shipped]


def list_skills(skills_dirs: Path | list[Path]) -> list[Path]:
    """Every skill folder in `skills_dirs`, by name; a name found twice is the first folder's."""
    found: dict[str, Path] = {}
    for d in [skills_dirs] if isinstance(skills_dirs, Path) else skills_dirs:
        for p in sorted(Path(d).glob("*/SKILL.md")):
            found.setdefault(p.parent.name, p.parent)
    return sorted(found.values(), key=lambda p: p.name)


def find_skill(skills_dirs: Path | list[Path], name: str) -> Path:
    dirs = [skills_dirs] if isinstance(skills_dirs, Path) else skills_dirs
    for d in dirs:
        if (Path(d) / name / "SKILL.md").exists():
            return Path(d) / name
    names = [p.name for p in list_skills(dirs)]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    where = " or ".join(display(d) for d in dirs)
    hint = (f"did you mean {' or '.join(repr(c) for c in close)}?" if close
            else f"--list shows the {len(names)} skill(s) there")
    raise SkillError([f"{where}: no skill named {name!r}; {hint}"])
