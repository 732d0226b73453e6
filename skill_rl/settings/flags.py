"""Command-line validation, up front: argparse `type=` validators for every number and name, and a parser
whose errors are one line and exit 2 before any work (argparse would print its whole usage first).

    p.add_argument("--steps", type=count(), ...)               # a whole number >= 1
    p.add_argument("--temperature", type=number(minimum=0))   # finite, >= 0
    p.add_argument("--run-name", type=path_part)              # one folder name: no '/', no '..'
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from typing import Callable


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose error is one line on stderr, `error: argument --x: ...`, and exit status 2."""

    def error(self, message: str):
        from skill_rl.console import clean
        from skill_rl.keys import redact

        sys.stderr.write(f"error: {redact(clean(message))} (see --help)\n")
        sys.exit(2)


def count(minimum: int = 1, what: str = "", maximum: int | None = None) -> Callable[[str], int]:
    """A whole number >= `minimum` (and <= `maximum`); `what` says why, e.g. "RL compares answers"."""

    def parse(text: str) -> int:
        if not re.fullmatch(r"\s*[+-]?\d{1,18}\s*", text) or not minimum <= int(text) <= (maximum or int(text)):
            most = f" and at most {maximum}" if maximum is not None else ""
            raise argparse.ArgumentTypeError(f"must be a whole number of at least {minimum}{most}{what}, got {text!r}")
        return int(text)

    return parse


def number(
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    what: str = "",
) -> Callable[[str], float]:
    """A finite number within [minimum, maximum] (`above`, `below`: strict bounds); NaN and infinities never pass."""
    bounds = " and ".join(
        b
        for b in (
            f"at least {minimum:g}" if minimum is not None else "",
            f"above {above:g}" if above is not None else "",
            f"at most {maximum:g}" if maximum is not None else "",
            f"below {below:g}" if below is not None else "",
        )
        if b
    )

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            x = math.nan
        ok = (
            math.isfinite(x)
            and (minimum is None or x >= minimum)
            and (maximum is None or x <= maximum)
            and (above is None or x > above)
            and (below is None or x < below)
        )
        if not ok:
            raise argparse.ArgumentTypeError(
                f"must be a finite number{' ' + bounds if bounds else ''}{what}, got {text!r}"
            )
        return x

    return parse


def count_or_auto(text: str) -> int | str:
    """A whole number >= 1, or `auto` (--sft-batch-size: the backend's default)."""
    return "auto" if text == "auto" else count()(text)


def path_part(text: str) -> str:
    """A name that becomes one folder (--run-name, --project): never a path, never outside `.art/`."""
    if not text or text in (".", "..") or re.search(r"[/\\\x00-\x1f\x7f]", text) or text != text.strip():
        raise argparse.ArgumentTypeError(
            f"must be one folder name (no '/', '\\', '..', control characters or surrounding spaces), got {text!r}"
        )
    return text


def url(text: str) -> str:
    """An http(s) URL; anything else would be sent somewhere the user did not mean."""
    if not re.fullmatch(r"https?://[^\s/?#]+\S*", text):
        raise argparse.ArgumentTypeError(f"must be an http:// or https:// URL, got {text!r}")
    return text


def model_spec(text: str) -> str:
    """A --model SPEC: ID, or label=ID@URL. An endpoint without http(s):// is refused: the model id would
    take it in, and the request would go to the default provider instead."""
    label, eq, rest = text.partition("=")
    spec = rest if eq else text
    # the first: the URL may hold a user:password@ of its own
    endpoint = re.search(r"@https?://", spec)
    ident, at, where = (
        (spec[: endpoint.start()], "@", spec[endpoint.start() + 1 :]) if endpoint else spec.rpartition("@")
    )
    if at and re.search(r"[:/.]|^localhost", where) and not where.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"the endpoint after '@' must start with http:// or https://, got {text!r}")
    if eq and not label.strip() or not (ident if at else where).strip():
        raise argparse.ArgumentTypeError(f"expected ID or label=ID@URL, got {text!r}")
    return text


def skill_name(text: str) -> str:
    """A skill's name (--skill, --init): one folder, by the Agent Skills naming rule."""
    from skill_rl.skills import NAME_RE

    if not NAME_RE.fullmatch(text) or len(text) > 64:
        raise argparse.ArgumentTypeError(f"a skill name is 1-64 characters of a-z, 0-9 and single '-', got {text!r}")
    return text


def checkpoint_spec(text: str) -> str | int:
    """A checkpoint: a step number (1 or more), 'best' or 'latest'."""
    if text in ("best", "latest"):
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"must be a step number (1 or more), 'best' or 'latest', got {text!r}")
