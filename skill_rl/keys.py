"""The secrets this process knows, and the one function that takes them out of text: `redact`.

Servers echo keys back (a 401 whose body quotes the Authorization header, a header, even a
completion), and libraries put what servers said into exception messages. So nothing is trusted to
be clean: every sink goes through `redact` (printed lines, via `redacted_output`; records and
result files, via records.Sink and skills.atomic_write; `.art/` logs, via rollout.py), with every
key the process knows: the key flags, and every environment variable named like a secret (`.env`
is loaded into the environment first). Redact before truncating, or half a key gets through.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.I)
MIN_LENGTH = 8  # shorter values ("none", "EMPTY", "k") are placeholders, and replacing them would garble text
MASK = "***"
_known: tuple[str, ...] = ()


class EchoedKey(Exception):
    """A server's answer quoted one of our keys: it is not used (not logged, judged or trained on)."""


def collect(*flag_values: str | None) -> tuple[str, ...]:
    """Remember the secrets: the given flag values and the environment's secret-named variables."""
    global _known
    found = {v for v in flag_values if v} | {v for k, v in os.environ.items() if SECRET_NAME.search(k)}
    _known = tuple(sorted((v.strip() for v in found if len(v.strip()) >= MIN_LENGTH), key=len, reverse=True))
    return _known


def redact(text: str) -> str:
    """`text` with every known secret replaced by ***."""
    for key in _known:
        if key in text:
            text = text.replace(key, MASK)
    return text


class RedactingStream:
    """A text stream that redacts what is written to it; everything else is the wrapped stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(redact(text))

    def writelines(self, lines) -> None:
        self._stream.writelines(redact(line) for line in lines)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def redact_process_output() -> None:
    """For the script: stdout and stderr redacted until the process ends (what asyncio and the interpreter
    print while shutting down included)."""
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)


@contextlib.contextmanager
def redacted_output():
    """While inside, whatever is printed to stdout or stderr, by us or a library, is redacted."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(out), RedactingStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
