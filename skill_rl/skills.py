"""Load and lint a skill folder: SKILL.md, tasks.jsonl and the optional checks.py.

A skill is a valid Agent Skill (agentskills.io): YAML frontmatter with only the keys the spec
allows, skill-rl settings under `metadata` as strings, then a markdown body. The body is what
the policy sees as its system prompt; it is parsed (markdown-it-py, not regexes) into sections
by heading so the judge's rubric can list the procedure's numbered steps.

Every problem is collected, not just the first, and reported as one line naming the file, the
line and the field: `skills/git-commit/tasks.jsonl:7: field 'split' must be 'train' or 'val', got 'test'`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import yaml
from markdown_it import MarkdownIt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

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


def _show(value: Any, limit: int = 40) -> str:
    text = repr(value)
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


def _yaml_key_lines(path: Path, source: str, problems: list[str]) -> dict[str, int] | None:
    """Line (in SKILL.md) of each top-level key; duplicate keys are problems."""
    try:
        node = yaml.compose(source, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 2 if mark else 1
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        problems.append(_problem(path, line, f"frontmatter is not valid YAML: {what}"))
        return None
    except RecursionError:
        problems.append(_problem(path, 2, "frontmatter is not valid YAML: nested too deeply"))
        return None
    if not isinstance(node, yaml.MappingNode):
        problems.append(_problem(path, 2, "frontmatter must be a YAML mapping of keys to values"))
        return None
    lines: dict[str, int] = {}
    for key_node, _ in node.value:
        key = key_node.value
        if key in lines:
            problems.append(_problem(path, key_node.start_mark.line + 2, f"field '{key}' is given twice"))
        lines[key] = key_node.start_mark.line + 2
    return lines


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
            msg = f"field '{loc}': {e['msg'][0].lower()}{e['msg'][1:]}, got {_show(e.get('input'))}"
        out.append(_problem(path, line_of(e["loc"]), msg))
    return out


def _frontmatter(path: Path, source: str, problems: list[str]) -> tuple[Frontmatter | None, dict[str, int]]:
    """The validated frontmatter (None when invalid) and the SKILL.md line of each top-level key."""
    key_lines = _yaml_key_lines(path, source, problems)
    if key_lines is None:
        return None, {}
    problems.extend(_strictyaml_problems(path, source))
    data = yaml.safe_load(source)
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
        if isinstance(data.get(key), (int, float, bool)):  # YAML `description: yes`: say so, once, don't coerce
            problems.append(_problem(path, key_lines[key], f"field '{key}' must be a string, got {_show(data[key])}: {QUOTE_IT}"))
            reported.add(key)
    if isinstance(data.get("description"), str) and re.search("[<>]", data["description"]):
        problems.append(_problem(path, key_lines["description"], "field 'description' must not contain '<' or '>': "
                                 "stricter than the Agent Skills spec on purpose, as agents put descriptions inside "
                                 "XML tags in their prompts"))
        reported.add("description")
    meta = data.get("metadata")
    for k, v in list(meta.items()) if isinstance(meta, dict) else []:
        if not isinstance(v, str):
            problems.append(_problem(path, key_lines["metadata"], f"field 'metadata.{k}' must be a string, got {_show(v)}: "
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
            problems.append(_problem(path, line, f"field 'metadata.weight-{dim}' must be a number in a string, got {_show(raw)}"))
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
        problems.append(_problem(path, line, f"field 'metadata.derive-checks' must be \"true\" or \"false\", got {_show(derive)}"))
    return weights, tuple(d for d in judged if d in DIMENSIONS), derive != "false"


_md = MarkdownIt("commonmark")


def _sections(body: str, offset: int) -> dict[str, Section]:
    """Split the body into sections by heading; a section runs to the next heading of its level or higher."""
    tokens = _md.parse(body)
    lines = body.split("\n")
    heads = [(i, t) for i, t in enumerate(tokens) if t.type == "heading_open"]
    out: dict[str, Section] = {}
    for n, (i, tok) in enumerate(heads):
        level = int(tok.tag[1])
        end = len(lines)
        for _, later in heads[n + 1 :]:
            if int(later.tag[1]) <= level:
                end = later.map[0]
                break
        title = tokens[i + 1].content.strip()
        raw = "\n".join(lines[tok.map[1] : end])
        lead = raw[: len(raw) - len(raw.lstrip())].count("\n")  # blank lines that strip() drops
        out.setdefault(title.lower(), Section(title, raw.strip(), tok.map[0] + offset, tok.map[1] + lead + offset))
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


def _load_checks(folder: Path, problems: list[str]) -> ModuleType | None:
    path = folder / "checks.py"
    if not path.exists():
        return None
    name = f"skill_rl_checks_{folder.name.replace('-', '_')}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pydantic look their module up while it runs
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        del sys.modules[name]
        problems.append(_problem(path, e.lineno, f"checks.py does not parse: {e.msg}"))
        return None
    except Exception as e:  # a user's module: report it in one line, whatever it raised
        del sys.modules[name]
        problems.append(_problem(path, None, f"checks.py failed to import: {type(e).__name__}: {e}"))
        return None
    return module


def _no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise ValueError(f"field '{dup}' is given twice")
    return dict(pairs)


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
        obj = json.loads(text, object_pairs_hook=_no_duplicate_keys)
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
        return task.model_copy(update={"expect": expect_model.model_validate(task.expect)})
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(p) for p in ("expect", *err["loc"]))
            problems.append(_problem(path, n, f"field '{loc}': {err['msg'][0].lower()}{err['msg'][1:]}, got {_show(err.get('input'))}"))
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


def load_skill(folder: Path, *, with_tasks: bool = True) -> Skill:
    """Load and validate a skill folder; raise SkillError listing every problem found."""
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

    sections = _sections(body, body_line)
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

    checks = _load_checks(folder, problems)
    tasks = load_tasks(folder / "tasks.jsonl", getattr(checks, "Expect", None), problems) if with_tasks else []
    if problems:
        raise SkillError(problems)
    return Skill(
        name=fm.name, description=fm.description, path=folder, body=body.strip(), sections=sections,
        steps=tuple(steps), rules=tuple(rules), weights=weights, judged=judged, checks=checks, tasks=tuple(tasks),
        derive=derive,
    )


def atomic_write(path: Path, text: str) -> None:
    """Write a whole file or nothing: a crash leaves the old file (or none), never half a new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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
    names = ", ".join(p.name for p in list_skills(dirs)) or "none"
    where = " or ".join(display(d) for d in dirs)
    raise SkillError([f"{where}: no skill named {name!r} (available: {names})"])
