"""SKILL.md: its YAML frontmatter (only the keys the Agent Skills spec allows, skill-rl settings under
`metadata` as strings, read as strictly as the reference validator reads it) and its markdown body, parsed
by markdown-it-py into sections by heading, the Procedure's steps and the Rules.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from markdown_it import MarkdownIt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skill_rl.files import BOM
from skill_rl.skills.skill import DEFAULT_WEIGHTS, DIMENSIONS, NAME_RE, Section
from skill_rl.text import problem, pydantic_problems, show

SPEC_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")


SKILL_RL_KEYS = {f"weight-{d}" for d in DIMENSIONS} | {"judge", "derive-checks"}


# YAML that PyYAML reads but the reference validator's parser (strictyaml) refuses, by token type
STRICTYAML_REFUSES = {
    "FlowMappingStartToken": "flow style '{...}'",
    "FlowSequenceStartToken": "flow style '[...]'",
    "AnchorToken": "an anchor '&'",
    "AliasToken": "an alias '*'",
    "TagToken": "a tag '!'",
}


QUOTE_IT = "put the value in quotes (YAML reads unquoted yes, no, true, false and numbers as other types)"


# frontmatter holds a handful of values; aliases may not expand it past this
MAX_YAML_VALUES = 10_000


class Frontmatter(BaseModel):
    """The Agent Skills frontmatter; unknown top-level keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    name: str = Field(min_length=1, max_length=64, pattern=NAME_RE.pattern)
    description: str = Field(min_length=1, max_length=1024, pattern=r"^[^<>]*$")
    license: str | None = None
    compatibility: str | None = Field(None, min_length=1, max_length=500)
    metadata: dict[str, str] = {}
    allowed_tools: str | None = Field(None, alias="allowed-tools")


def read_text(path: Path, problems: list[str]) -> str | None:
    try:
        data = path.read_bytes()
    except OSError as e:
        problems.append(problem(path, None, f"cannot read file: {e.strerror}"))
        return None
    # reported, then read past: the other problems are still worth listing
    if data.startswith(BOM):
        problems.append(
            problem(
                path,
                1,
                "file starts with a UTF-8 byte-order mark, which the Agent Skills reference "
                "validator (skills-ref) and other agents refuse: save it as UTF-8 without BOM",
            )
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        problems.append(problem(path, line, f"file is not valid UTF-8 (byte 0x{data[e.start]:02x})"))
        return None
    return text.replace("\r\n", "\n")


def split_frontmatter(path: Path, text: str, problems: list[str]) -> tuple[str, str, int] | None:
    """Return (yaml text, body, line where the body starts)."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        problems.append(problem(path, 1, "SKILL.md must start with a '---' line opening the YAML frontmatter"))
        return None
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1 :]), i + 2
        # the reference parser ends the frontmatter at the first '---' anywhere
        if "---" in line:
            problems.append(
                problem(
                    path,
                    i + 1,
                    "frontmatter holds '---' inside a line; the Agent Skills reference "
                    "parser would end the frontmatter there: reword it",
                )
            )
    problems.append(problem(path, 1, "frontmatter opened with '---' is never closed by a '---' line"))
    return None


def _yaml_problem(path: Path, e: yaml.YAMLError, problems: list[str]) -> None:
    mark = getattr(e, "problem_mark", None)
    what = getattr(e, "problem", None) or str(e).splitlines()[0]
    problems.append(problem(path, mark.line + 2 if mark else 1, f"frontmatter is not valid YAML: {what}"))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else []


def _node_problem(root: yaml.Node) -> tuple[yaml.Node, str] | None:
    """The first thing plain frontmatter may not hold: a key that is not text, or aliases that expand it past
    MAX_YAML_VALUES values or into itself. Each node is counted once, so a "billion laughs" costs its size."""
    # id(node) -> values once expanded; -1 while its children are being counted
    sizes: dict[int, int] = {}
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
                return (
                    bad,
                    f"keys must be plain text, got a {'list' if isinstance(bad, yaml.SequenceNode) else 'mapping'}",
                )
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
        # it rejects control characters at once
        loader = yaml.SafeLoader(source)
        node = loader.get_single_node()
        if not isinstance(node, yaml.MappingNode):
            problems.append(problem(path, 2, "frontmatter must be a YAML mapping of keys to values"))
            return None
        bad = _node_problem(node)
        if bad:
            problems.append(problem(path, bad[0].start_mark.line + 2, f"frontmatter is not valid YAML here: {bad[1]}"))
            return None
        data = loader.construct_document(node)
    # syntax, or a tag the safe loader does not construct (!!python/..., !local)
    except yaml.YAMLError as e:
        _yaml_problem(path, e, problems)
        return None
    except RecursionError:
        problems.append(problem(path, 2, "frontmatter is not valid YAML: nested too deeply"))
        return None
    finally:
        if loader is not None:
            loader.dispose()
    lines: dict[str, int] = {}
    for key_node, _ in node.value:
        key = key_node.value
        if key in lines:
            problems.append(problem(path, key_node.start_mark.line + 2, f"field '{key}' is given twice"))
        lines[key] = key_node.start_mark.line + 2
    return data, lines


def parse_frontmatter(path: Path, source: str, problems: list[str]) -> tuple[Frontmatter | None, dict[str, int]]:
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
            problem(
                path,
                key_lines.get(str(key)),
                f"field '{key}' is not allowed in Agent Skills frontmatter "
                f"(allowed: {', '.join(SPEC_KEYS)}); put skill-rl settings under 'metadata'",
            )
        )
        data.pop(key)
    try:
        return Frontmatter.model_validate(data), key_lines
    except ValidationError as e:
        problems.extend(pydantic_problems(path, e, lambda loc: key_lines.get(str(loc[0])), skip=reported))
        return None, key_lines


def _strictyaml_problems(path: Path, source: str) -> list[str]:
    """YAML the reference validator refuses (its parser, strictyaml, allows a strict subset of YAML)."""
    out = []
    for token in yaml.scan(source, Loader=yaml.SafeLoader):
        what = STRICTYAML_REFUSES.get(type(token).__name__)
        if what:
            out.append(
                problem(
                    path,
                    token.start_mark.line + 2,
                    f"frontmatter uses {what}, which the Agent Skills "
                    "reference validator (skills-ref) refuses: write plain indented YAML",
                )
            )
    return out


def _scalar_problems(path: Path, data: dict, key_lines: dict[str, int], problems: list[str]) -> set[str]:
    """Strings that YAML read as something else, and the rules where skill-rl is stricter than the spec on
    purpose. Offending values are removed from `data`; returns the top-level fields reported."""
    reported = set()
    for key in ("name", "description", "license", "compatibility", "allowed-tools"):
        # `description: yes`, dates, !!binary: say so, once
        if not isinstance(data.get(key), (str, list, dict, type(None))):
            problems.append(
                problem(path, key_lines[key], f"field '{key}' must be a string, got {show(data[key])}: {QUOTE_IT}")
            )
            reported.add(key)
    if isinstance(data.get("description"), str) and re.search("[<>]", data["description"]):
        problems.append(
            problem(
                path,
                key_lines["description"],
                "field 'description' must not contain '<' or '>': "
                "stricter than the Agent Skills spec on purpose, as agents put descriptions inside "
                "XML tags in their prompts",
            )
        )
        reported.add("description")
    meta = data.get("metadata")
    for k, v in list(meta.items()) if isinstance(meta, dict) else []:
        if not isinstance(v, str):
            problems.append(
                problem(
                    path,
                    key_lines["metadata"],
                    f"field 'metadata.{k}' must be a string, got {show(v)}: "
                    f"{QUOTE_IT}; stricter than skills-ref on purpose, which turns any value into a string",
                )
            )
            meta.pop(k)
    for key in reported:
        data.pop(key)
    return reported


def skill_settings(path: Path, fm: Frontmatter, line: int | None, problems: list[str]):
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
            problems.append(
                problem(path, line, f"field 'metadata.weight-{dim}' must be a number in a string, got {show(raw)}")
            )
            continue
        if not 0 <= weights[dim] <= 1:
            problems.append(problem(path, line, f"field 'metadata.weight-{dim}' must be between 0 and 1, got {raw}"))
    if abs(sum(weights.values()) - 1) > 1e-6:
        got = " + ".join(f"{weights[d]:g}" for d in DIMENSIONS)
        problems.append(
            problem(path, line, f"field 'metadata.weight-*' must sum to 1, got {got} = {sum(weights.values()):g}")
        )
    for key in meta:
        if key.startswith("weight-") and key not in SKILL_RL_KEYS:
            problems.append(
                problem(
                    path,
                    line,
                    f"field 'metadata.{key}' is not a rubric dimension (allowed: {', '.join(sorted(SKILL_RL_KEYS))})",
                )
            )
    judged = tuple(d.strip() for d in meta.get("judge", "procedure,correctness").split(",") if d.strip())
    for dim in judged:
        if dim not in DIMENSIONS and dim != "none":
            problems.append(
                problem(
                    path,
                    line,
                    f"field 'metadata.judge' names unknown dimension {dim!r} (allowed: {', '.join(DIMENSIONS)}, none)",
                )
            )
    derive = meta.get("derive-checks", "true")
    if derive not in ("true", "false"):
        problems.append(
            problem(path, line, f'field \'metadata.derive-checks\' must be "true" or "false", got {show(derive)}')
        )
    return weights, tuple(d for d in judged if d in DIMENSIONS), derive != "false"


# markdown-it stops reading blocks nested deeper than this (lists count twice)
MAX_NESTING = 100


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
        # "h2" >= "h1": same or deeper level
        while still_open and heads[still_open[-1]][1].tag >= tok.tag:
            ends[still_open.pop()] = tok.map[0]
        still_open.append(n)
    out: dict[str, Section] = {}
    for n, (i, tok) in enumerate(heads):
        title = tokens[i + 1].content.strip()
        if title.lower() not in out:
            raw = "\n".join(lines[tok.map[1] : ends[n]])
            # blank lines that strip() drops
            lead = raw[: len(raw) - len(raw.lstrip())].count("\n")
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


def parse_body(
    md: Path, body: str, body_line: int, problems: list[str]
) -> tuple[dict[str, Section], list[str], list[str]]:
    """Sections, procedure steps and rules of the markdown body, with a problem for each that is missing."""
    tokens = _md.parse(body)
    deep = _too_deep(tokens)
    # what follows was skipped by the parser: report that, not the sections it hid
    if deep is not None:
        problems.append(
            problem(
                md,
                deep + body_line,
                "markdown nested too deeply to read (lists or quotes inside "
                "each other); the rest of the file cannot be read: flatten it",
            )
        )
        return {}, [], []
    sections = _sections(tokens, body, body_line)
    steps: list[str] = []
    if "procedure" not in sections:
        problems.append(
            problem(
                md,
                body_line,
                "section 'Procedure' is missing: add a '## Procedure' heading with a numbered list of steps",
            )
        )
    else:
        steps = _list_items(sections["procedure"].text, ordered=True)
        if len(steps) < 2:
            problems.append(
                problem(
                    md,
                    sections["procedure"].line,
                    f"section 'Procedure' must hold an ordered list of at least 2 steps, found {len(steps)}",
                )
            )
    if "output format" not in sections:
        problems.append(
            problem(
                md,
                body_line,
                "section 'Output Format' is missing: add a '## Output Format' heading describing the output",
            )
        )
    elif not sections["output format"].text:
        problems.append(problem(md, sections["output format"].line, "section 'Output Format' is empty"))
    rules = _list_items(sections["rules"].text, ordered=None) if "rules" in sections else []
    return sections, steps, rules
