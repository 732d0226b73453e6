"""The step pass: what stays the same across different tasks, once each task's own words are removed, is paid for
nowhere.

A policy that gives every task one answer, appends one paragraph to every answer, or fills one template with
each task's names ("handle `X` in `Y`") repeats itself across tasks: text that fits every task says nothing
about any. Checks see one output at a time, so this pass runs over everything scored together (a training
step's groups, a `--score` file) and is applied to the reward itself (monitor.py reports `monitor/collapse`
besides).

Each line of an output is reduced to its *skeleton*: what the task supplies is masked (`§`): the input's words
(its identifiers, paths, title words), numbers, code spans and any word shaped like code (camelCase, snake_case,
dotted, with digits), a run of masks joined by commas or "and" becoming one mask, and the rest lower-cased.
Words nearly every input holds (a third or more of the step's inputs), filler and the SKILL.md's own words stay
as they are, since they are the template's words and not the task's. A skeleton line is *repeated* when an output
for a different task has it too, and it weighs its literal letters (those outside masks):

    repeated = min(1, sum of the weights of the output's distinct repeated skeleton lines / FULL_LETTERS)
               (1 when the whole output is another task's output verbatim)
    reward  *= 1 - repeated

The penalty is the repeated skeleton itself, not its share of the output, so adding unique text never dilutes
it: an output that adds false findings to a repeated one is charged at least as much. What is the same because it
is right is never charged: an output or line of under MIN_LETTERS letters of its own (a label, a verdict,
"add § to the §"), a line of structure (a heading of up to three words, a label line, a trailer such as
`Signed-off-by:`), a line the SKILL.md prescribes (its Output Format's lines, its placeholders' alternatives,
its lines of alternatives filled in (`Release type: minor`) and the code spans of it and of its Rules: a footer,
a template heading, a verdict; not its examples, which copied into every answer are the constant answer), a
skeleton of the task's own reference, and for a task without a reference a skeleton two references to different
tasks share (a section heading, "docs: fix typo in §"). Outputs for the same task (a group's rollouts) never count
against each other.
"""

from __future__ import annotations

import dataclasses
import re
from functools import lru_cache

from skill_rl.scoring.diffs import FILLER, NAMEISH

# literal letters: a shorter output or line (a label, a verdict; "add § to the §") is not charged
MIN_LETTERS = 10
# Lines that are structure, not content: a short heading (`## Validation`), a label line (`Root cause:`), a trailer
# (`Co-authored-by: A Person <a@example.com>`, `Assisted-by: Claude Opus`: a name or up to six words, not a
# sentence of boilerplate in a trailer's clothes). They repeat between honest answers and pay for nothing.
STRUCTURE = re.compile(
    r"^(#{1,6} +\S+(?: +\S+){0,2}|\S+(?: +\S+)? *:"
    # a trailer: a name
    r"|[A-Za-z]+(?:-[A-Za-z]+)+: (?:\S+(?: \S+){0,5}|.*<[^<>@\s]+@[^<>\s]+>))$"
)
# literal letters of repeated skeleton that cost the whole reward
FULL_LETTERS = 40
# a word in one in three or more of the step's inputs is the template's, not the task's
COMMON_SHARE = 3
MASK = "§"
TOKEN = re.compile(r"`[^`\n]*`|[A-Za-z0-9_$@#./\\-]+|[^\sA-Za-z0-9_$@#./\\-]")
SPLIT = re.compile(r"[A-Za-z]+|\d+")
RUN = re.compile(rf"{MASK}(?:\s*(?:,|and|or|&|/|\+|;)?\s*{MASK})+")


@lru_cache(maxsize=4096)
def supplied(text: str) -> frozenset[str]:
    """The lower-cased words a task's input supplies: every token, and its letter and digit runs."""
    out: set[str] = set()
    for token in TOKEN.findall(text.lower()):
        out.add(token.strip(".-/"))
        out.update(SPLIT.findall(token))
    return frozenset(out)


# a step scores every family's lines against the same tasks' words, and every step the same references' (exempt)
@lru_cache(maxsize=1 << 16)
def _masked(token: str, words: frozenset[str], common: frozenset[str]) -> bool:
    if token.startswith("`") or any(c.isdigit() for c in token) or NAMEISH.search(token.strip(".")):
        return True
    bare = token.strip(".-/").lower()
    if not bare or bare in common:
        return False
    # `resolve-extends`, `src/cli`: a compound of the task's words
    parts = SPLIT.findall(bare)
    return bare in words or len(parts) > 1 and all(p in words for p in parts) and not all(p in common for p in parts)


@lru_cache(maxsize=1 << 14)
def skeleton(line: str, words: frozenset[str], common: frozenset[str] = frozenset()) -> tuple[str, int]:
    """(the line's skeleton, its literal letters): the task's words masked (module docstring)."""
    parts = []
    for token in TOKEN.findall(line.strip()):
        # `/Users/x/deno5` is a word, `--` is not
        if token[0] == "`" or any(c.isalnum() for c in token):
            parts.append(MASK if _masked(token, words, common) else token.lower())
        else:
            parts.append(token)
    text = RUN.sub(MASK, " ".join(parts))
    return text, sum(c.isalpha() for c in text)


@dataclasses.dataclass(frozen=True)
class Exempt:
    """What is the same across tasks because it is right: the lines SKILL.md prescribes, each task's own reference's
    skeletons (`own`, by task input), and for a task without a reference the skeletons two references to different
    tasks share; `common`: the words that stay unmasked."""

    lines: frozenset[str] = frozenset()
    own: dict = dataclasses.field(default_factory=dict)
    shared: frozenset[str] = frozenset()
    common: frozenset[str] = FILLER


SPAN = re.compile(r"`([^`\n]+)`")
# a template placeholder of alternatives, `<approve | request-changes>`
CHOICES = re.compile(r"<([^<>\n]*\|[^<>\n]*)>")


def prescribed(skill) -> frozenset[str]:
    """The lines SKILL.md prescribes for an output: its Output Format section's lines (the template included), the
    alternatives of its placeholders (`<approve | request-changes>`), its lines whose only placeholders are
    alternatives, filled with each (`Release type: minor`), and the code spans of it and of its Rules. Not its
    examples: an example copied into every answer is the constant answer, not a prescribed line."""
    fmt = skill.sections["output format"].text if "output format" in skill.sections else ""
    rules = "\n".join(skill.rules)
    lines = [line.strip().lstrip("-*> ").strip() for line in fmt.split("\n")]
    choices = [c.strip() for group in CHOICES.findall(fmt) for c in group.split("|")]
    filled = [x for line in lines for x in _filled(line)]
    return frozenset(x for x in lines + choices + filled + SPAN.findall(fmt) + SPAN.findall(rules) if x.strip())


# a template line's fillings, at most: more alternatives than this are not a prescribed line
FILLED_MOST = 64


def _filled(line: str) -> list[str]:
    """A template line whose only placeholders are alternatives (`Release type: <major | minor | patch>`), filled
    with each: every filling is a line SKILL.md prescribes. A line with a free placeholder (`- <entry> (#<n>)`)
    prescribes nothing once filled: what fills it is the answer's own content."""
    if not CHOICES.search(line) or "<" in CHOICES.sub("", line):
        return []
    out = [""]
    # literal text, then a placeholder's alternatives, in turn
    for i, part in enumerate(CHOICES.split(line)):
        options = [c.strip() for c in part.split("|")] if i % 2 else [part]
        out = [head + o for head in out for o in options]
        if len(out) > FILLED_MOST:
            return []
    return out


def exempt(skill=None, inputs: list[str] = ()) -> Exempt:
    """The exemptions for a step over `inputs` (its tasks' inputs) of `skill` (None: none but filler)."""
    distinct = list(dict.fromkeys(inputs))
    counts: dict[str, int] = {}
    for text in distinct:
        for w in supplied(text):
            counts[w] = counts.get(w, 0) + 1
    common = set(FILLER)
    if len(distinct) >= 3:
        common |= {w for w, n in counts.items() if COMMON_SHARE * n >= len(distinct)}
    if skill is None:
        return Exempt(common=frozenset(common))
    common = frozenset(common | supplied(skill.body))
    own: dict[str, set[str]] = {}
    seen: dict[str, str] = {}
    shared = set()
    for task in skill.tasks:
        if task.reference:
            words = supplied(task.input)
            for line in task.reference.split("\n"):
                skel = skeleton(line, words, common)[0]
                own.setdefault(task.input, set()).add(skel)
                if seen.setdefault(skel, task.input) != task.input:
                    shared.add(skel)
    return Exempt(prescribed(skill), own, frozenset(shared), common)


def _skeletons(output: str, task: str, ex: Exempt) -> dict[str, int | None]:
    """The output's distinct skeleton lines of MIN_LETTERS or more literal letters: skeleton -> its letters when
    it could be charged, None when it is right here (a prescribed line, a skeleton of the task's own reference,
    or without a reference one two references share). A right line still counts as seen for the other tasks."""
    words, right = supplied(task), ex.own.get(task, ex.shared)
    out: dict[str, int | None] = {}
    for line in output.split("\n"):
        bare = line.strip()
        if not bare or STRUCTURE.match(bare):
            continue
        skel, letters = skeleton(bare, words, ex.common)
        if letters >= MIN_LETTERS:
            free = bare in ex.lines or bare.lstrip("-*> ").strip() in ex.lines or skel in right
            out[skel] = None if free or out.get(skel, 0) is None else letters
    return out


def shares(items: list[tuple[str, str]], skill=None) -> list[float]:
    """For (task input, output) pairs scored together, each output's penalty for repeats (see the module)."""
    ex = exempt(skill, [task for task, _ in items])
    whole: dict[str, set[str]] = {}
    where: dict[str, set[str]] = {}
    found = []
    for task, output in items:
        whole.setdefault(output.strip(), set()).add(task)
        lines = _skeletons(output, task, ex)
        found.append(lines)
        for skel in lines:
            where.setdefault(skel, set()).add(task)
    out = []
    for (_task, output), lines in zip(items, found):
        if len(whole[output.strip()]) > 1 and any(n is not None for n in lines.values()):
            # another task's output verbatim, and not because it is right for this one
            out.append(1.0)
            continue
        charged = {skel: n for skel, n in lines.items() if n is not None and len(where[skel]) > 1}
        out.append(min(1.0, sum(charged.values()) / FULL_LETTERS))
    return out


def penalised(score, repeated: float):
    """The Score with its reward multiplied by 1 - repeated, and `repeated` recorded."""
    if not repeated:
        return score
    return dataclasses.replace(score, reward=score.reward * (1 - repeated), repeated=repeated)
