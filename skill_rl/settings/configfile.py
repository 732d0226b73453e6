"""`--config FILE`: a run's flags from a YAML file, and the resolved settings written back as one.

The keys are the flags' names, as `dest` (`learning_rate`) or as written after `--` (`learning-rate`);
every value goes through its flag's own argparse `type` and `choices`, so a file accepts exactly what the
command line accepts. A flag given on the command line wins over the file, even when it equals its
default. YAML rather than TOML: PyYAML (already a dependency, for SKILL.md frontmatter) reads and
writes it, where the standard library only reads TOML; and TRL's `--config` files are YAML.

    train_skill.py --config run.yaml --steps 5          # the file's settings, but 5 steps
    train_skill.py --config .art/skill-rl/models/<run>/config.yaml   # a training run again
"""

from __future__ import annotations

import argparse
import difflib
import os
import stat
import sys
from pathlib import Path

import yaml

from skill_rl.errors import Exit

# beside a training run's records
NAME = "config.yaml"
# a config file holds a few dozen settings; anything near this is not one
MAX_BYTES = 1024 * 1024
# Flags that choose what the command does (pick a command, export, upload, overwrite, which checkpoint leaves):
# the command line's alone, so that a file, which is data, never turns a replay into another command.
COMMANDS = (
    "config",
    "help",
    "list",
    "init",
    "check",
    "score",
    "eval",
    "tasks_from_git",
    "export",
    "checkpoint",
    "card_eval",
    "push_to_hub",
)
# ... and flags that let a command replace or write elsewhere: accepted only as false or null (the defaults a
# run's own config.yaml records), never set by a file.
OUTPUTS = ("force", "out", "resume")


def apply(parser: argparse.ArgumentParser, argv: list[str] | None, args: argparse.Namespace) -> argparse.Namespace:
    """`args` (the parsed command line) with the file's values for every flag the command line left out."""
    given = given_flags(parser, argv)
    values = read(Path(args.config), parser)
    return argparse.Namespace(**{**vars(args), **{k: v for k, v in values.items() if k not in given}})


def given_flags(parser: argparse.ArgumentParser, argv: list[str] | None) -> set[str]:
    """The dests set on the command line itself (a flag equal to its default included): parsed again with
    every default suppressed, so only what was given lands in the namespace."""
    saved = [(a, a.default) for a in parser._actions]
    try:
        for a, _ in saved:
            a.default = argparse.SUPPRESS
        return set(vars(parser.parse_args(sys.argv[1:] if argv is None else argv)))
    finally:
        for a, default in saved:
            a.default = default


def read(path: Path, parser: argparse.ArgumentParser) -> dict:
    """The file's settings by dest, each converted as its flag would be; Exit(2) naming file, line and key."""
    text = read_text(path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise Exit(2, f"{where}: not valid YAML: {getattr(e, 'problem', None) or e}")
    except RecursionError:
        raise Exit(
            2, f"{path}: nested too deeply to read; a config file is a flat mapping of flag names to values"
        ) from None
    if root is None:
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise Exit(
            2,
            f"{path}:{root.start_mark.line + 1}: a config file is a mapping of flag names to values, e.g. `steps: 20`",
        )
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    out: dict = {}
    for knode, _ in root.value:
        line = f"{path}:{knode.start_mark.line + 1}"
        if not isinstance(knode, yaml.ScalarNode) or knode.tag != "tag:yaml.org,2002:str":
            raise Exit(2, f"{line}: a key is a flag's name, got {knode.value!r}")
        key, dest = knode.value, knode.value.replace("-", "_")
        if dest in COMMANDS or dest in OUTPUTS and data[key] not in (None, False):
            raise Exit(
                2,
                f"{line}: {key}: {'picks a command' if dest in COMMANDS else 'lets the command replace files'}"
                f"; give --{dest.replace('_', '-')} on the command line, not in a config file",
            )
        if dest not in actions:
            near = difflib.get_close_matches(dest, list(actions), n=1)
            raise Exit(
                2,
                f"{line}: unknown key {key!r}"
                + (f" (did you mean {near[0]!r}?)" if near else "")
                + "; keys are the flags' names (see --help)",
            )
        if dest in out:
            raise Exit(2, f"{line}: {key}: given twice")
        value = data[key]
        out[dest] = None if value is None else convert(actions[dest], value, f"{line}: {key}")
    # null: the flag's default
    return {k: v for k, v in out.items() if v is not None}


def read_text(path: Path) -> str:
    """The file's text: a regular file of at most MAX_BYTES, UTF-8; Exit(2) in one line otherwise (never a read of
    /dev/zero or of a 3 GB file)."""
    try:
        # a FIFO: opened, refused, never waited on
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise Exit(2, f"--config {path}: cannot read it (not a regular file)")
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise Exit(2, f"--config {path}: cannot read it ({e.strerror or e})") from None
    if len(raw) > MAX_BYTES:
        raise Exit(
            2, f"--config {path}: cannot read it (larger than {MAX_BYTES:,} bytes; a config file holds a run's flags)"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Exit(
            2, f"--config {path}: cannot read it (not UTF-8: byte 0x{raw[e.start]:02x} at offset {e.start})"
        ) from None


def convert(action: argparse.Action, value, where: str):
    """`value` as the command line would have made it: through the flag's `type` and `choices`."""
    # --resume, --sft / --no-sft: a switch
    if action.nargs == 0:
        if not isinstance(value, bool):
            raise Exit(2, f"{where}: must be true or false, got {value!r}")
        # the setting's value, as `dest` holds it
        return value
    # --model, --sft-from: a list (one value: a list of one)
    if isinstance(action, argparse._AppendAction):
        return [one(action, v, where) for v in (value if isinstance(value, list) else [value])]
    return one(action, value, where)


def one(action: argparse.Action, value, where: str):
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        what = {bool: "true/false", list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)
        raise Exit(2, f"{where}: must be one value (quote it to pass text), got {what}")
    text = str(value)
    try:
        result = action.type(text) if action.type else text
    except argparse.ArgumentTypeError as e:
        raise Exit(2, f"{where}: {e}")
    except (TypeError, ValueError):
        raise Exit(2, f"{where}: must be {getattr(action.type, '__name__', 'valid')}, got {text!r}")
    if action.choices is not None and result not in action.choices:
        raise Exit(2, f"{where}: must be one of {', '.join(map(str, action.choices))}, got {text!r}")
    return result


def dump(settings) -> str:
    """A run's resolved settings as a config file: no secret (no *api_key value; the text redacted when
    written), no command flag, nothing left unset."""
    kept = {
        k: (str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, list) else v)
        for k, v in vars(settings).items()
        if k not in COMMANDS and k not in OUTPUTS and not k.endswith("api_key") and v is not None and v != []
    }
    return (
        "# the resolved settings of a training run, secrets left out (keys come from the environment);\n"
        "# `train_skill.py --config THIS_FILE` runs it again, flags given beside it win\n"
        + yaml.safe_dump(kept, sort_keys=False, allow_unicode=True)
    )


def write(settings, folder: Path) -> Path | None:
    """`<folder>/config.yaml`, replaced whole (a resumed run writes the settings it resumed with), the user's alone
    (0600), as the run folder is made (0700): its records hold the tasks, the outputs and the endpoints."""
    from skill_rl.files import atomic_write

    path = Path(folder) / NAME
    try:
        os.chmod(folder, 0o700)
        atomic_write(path, dump(settings), private=True)
    # the run itself is not at stake: said, and it goes on
    except OSError as e:
        print(f"warning: {path}: the run's settings not written ({e.strerror or e}); the run goes on", file=sys.stderr)
        return None
    return path
