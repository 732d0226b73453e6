"""The secrets this process knows, and the one function that takes them out of text: `redact`.

Servers echo keys back (a 401 whose body quotes the Authorization header, a header, even a
completion), and libraries put what servers said into exception messages. So nothing is trusted to
be clean: every sink goes through `redact` (printed lines, via `redacted_output`; records and
result files, via records.Sink and files.atomic_write; `.art/` logs, via rollout.py), with every
key the process knows: the key flags, and every environment variable named like a secret (`.env`
is loaded into the environment first), and the password of every URL (`http://user:PASSWORD@host`). Redact before truncating, or half a key gets through.
"""

from __future__ import annotations

import base64
import contextlib
import math
import os
import re
import sys

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.I)
# shorter values ("none", "EMPTY", "k") are placeholders, and replacing them would garble text
MIN_LENGTH = 8
MASK = "***"
_known: tuple[str, ...] = ()


class EchoedKey(Exception):
    """A server's answer quoted one of our keys: it is not used (not logged, judged or trained on)."""


def url_passwords(values) -> list[str]:
    """The passwords of the URLs in `values` (strings, or lists of them, as flags hold them; others ignored)."""
    texts = [x for v in values for x in (v if isinstance(v, list) else [v]) if isinstance(x, str) and "@" in x]
    return [m["password"] for t in texts for m in URL_PASSWORD.finditer(t)]


def collect(*flag_values: str | None) -> tuple[str, ...]:
    """Remember the secrets: the given flag values, the environment's secret-named variables and the passwords of
    the URLs in its values (also masked wherever a server or library quotes them without their URL)."""
    global _known
    found = (
        {v for v in flag_values if v}
        | {v for k, v in os.environ.items() if SECRET_NAME.search(k)}
        | set(url_passwords(os.environ.values()))
    )
    _known = tuple(sorted((v.strip() for v in found if len(v.strip()) >= MIN_LENGTH), key=len, reverse=True))
    return _known


def remember(secret: str) -> None:
    """Add a secret read from elsewhere than the environment or a flag (a token file) to those redacted."""
    global _known
    if len(secret.strip()) >= MIN_LENGTH:
        _known = tuple(sorted({*_known, secret.strip()}, key=len, reverse=True))


# The password of any URL (`http://user:PASSWORD@host`), up to the authority's last '@': a secret wherever it
# comes from (a flag, the environment, a config file, an error message), however short.
URL_USERINFO = re.compile(r"(://[^/\s:@\"'`]{0,256}:)[^/\s\"'`]{1,256}(?=@)")


def redact(text: str) -> str:
    """`text` with every known secret, and the password of every URL in it, replaced by ***."""
    for key in _known:
        if key in text:
            text = text.replace(key, MASK)
    if "://" in text and "@" in text:
        text = URL_USERINFO.sub(lambda m: m[1] + MASK, text)
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


# ------------------------------------------------------------------ secrets in text we did not write

KEY_FORMATS = re.compile(
    "|".join(
        (
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----",
            # AWS access key id
            r"\b(AKIA|ASIA)[0-9A-Z]{16}\b",
            r"\bgh[pousr]_[A-Za-z0-9]{36,}",
            r"\bgithub_pat_[A-Za-z0-9_]{22,}",
            r"\bglpat-[A-Za-z0-9_-]{20,}",
            # Slack
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
            r"hooks\.slack\.com/services/T[A-Za-z0-9_/]{20,}",
            # OpenAI, Anthropic, Stripe
            r"\bsk-(proj-|ant-|live-)?[A-Za-z0-9_-]{20,}",
            r"\b[rs]k_live_[A-Za-z0-9]{16,}",
            r"\bAIza[0-9A-Za-z_-]{35}",
            r"\bya29\.[0-9A-Za-z_-]{20,}",
            r"\bhf_[A-Za-z0-9]{30,}",
            r"\bSG\.[\w-]{16,}\.[\w-]{16,}",
            r"\bnpm_[A-Za-z0-9]{36}\b",
            r"\bpypi-AgEIcHlwaS5vcmc[\w-]{40,}",
            r"\bdop_v1_[a-f0-9]{64}\b",
            r"\bshp(at|ss|ca|pa)_[a-fA-F0-9]{32}\b",
            r"\bdapi[a-f0-9]{32}\b",
            # a JSON Web Token
            r"\beyJ[\w-]{10,}\.eyJ[\w-]{10,}\.[\w-]{10,}",
        )
    )
)
# https://user:PASSWORD@host
URL_PASSWORD = re.compile(r"://[^/\s:@\"'`]+:(?P<password>[^/\s:@\"'`]+)@")
# A name that holds a secret word, assigned a value: `DB_PASSWORD=...`, `client_secret = '...'`,
# `"X_API_KEY": "..."`, `x_api_key: ...`, `export AWS_SECRET_ACCESS_KEY=...`.
SECRET_WORD = (
    r"(?:passw(?:or)?d|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|auth[_-]?key|credential)"
)
# from the secret word on, so that a long run of letters cannot make it backtrack
ASSIGNED = re.compile(
    rf"""(?i){SECRET_WORD}[\w.-]{{0,60}}["']?[ \t]*(?P<op>:=|=>|[:=])[ \t]*"""
    r"""(?:(?P<q>["'`])(?P<quoted>[^"'`\s]*)(?P=q)|(?P<bare>[^\s"'`,;)\]}]+))"""
)
NAME_START = re.compile(r"[\w.-]{0,60}$")
REFERENCE = re.compile(r"[$<>{}()\[\]%*]|^\W|\.\.\.|^(?:[A-Za-z_][\w]*)(?:\.[A-Za-z_][\w]*)+$")
PLACEHOLDER = re.compile(
    r"(?i)^(?:(?:your|my|the)[_-].*|changeme|change[_-]me|placeholder|dummy|redacted|none|null"
    r"|undefined|true|false|(?P<c>.)(?P=c)+)$"
)
TOKEN = re.compile(r"(?<![\w+/=-])[A-Za-z0-9+/_-]{32,}={0,2}(?![\w+/=-])")
# an integrity hash (`sha512-...`), inline data
HASH_PREFIX = re.compile(r"(?i)(?:^sha\d+-|base64,$)")


def _secret_value(value: str, bare: bool) -> bool:
    """A literal that could be a secret: at least 6 characters, letters with digits (or 16+ characters in
    both cases), not a reference to one (`${X}`, `process.env.X`, `<your key>`) nor a placeholder."""
    if len(value) < 6 or REFERENCE.search(value) or PLACEHOLDER.search(value):
        return False
    if bare and value.isidentifier() and not any(c.isdigit() for c in value):
        # `token = token` style code, not a literal
        return False
    letters, digits = any(c.isalpha() for c in value), any(c.isdigit() for c in value)
    mixed_case = any(c.isupper() for c in value) and any(c.islower() for c in value)
    return (letters and digits) or (len(value) >= 16 and mixed_case)


def _entropy(text: str) -> float:
    counts = {c: text.count(c) for c in set(text)}
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _random_looking(token: str) -> bool:
    """Random letters and digits: an alphanumeric run of 16+ with upper and lower case and digits, 4.5 bits a
    character or more, and not base64 of text (`eyJ...`, a JSON blob), a hash (hex, `sha512-...`) or a path."""
    chunk = max(re.split(r"[^A-Za-z0-9]", token), key=len)
    if (
        len(chunk) < 16
        or HASH_PREFIX.search(token)
        or not all(re.search(p, chunk) for p in ("[a-z]", "[A-Z]", "[0-9]"))
        or _entropy(token.rstrip("=")) < 4.5
    ):
        return False
    try:
        raw = base64.b64decode(token.replace("-", "+").replace("_", "/") + "=" * (-len(token) % 4), validate=True)
    except ValueError:
        return True
    return sum(32 <= b < 127 or b in (9, 10, 13) for b in raw) < 0.9 * len(raw)


def secret_in(text: str) -> str | None:
    """What in `text` looks like a secret (a key format, a secret-named assignment, a random-looking token),
    or None. For text from elsewhere (a mined diff or message): whatever matches is never written."""
    if m := KEY_FORMATS.search(text):
        return "a key format"
    for m in URL_PASSWORD.finditer(text):
        if _secret_value(m["password"], bare=False):
            return "a password in a URL"
    for m in ASSIGNED.finditer(text):
        quoted = m["quoted"] is not None
        if _secret_value(m["quoted"] if quoted else m["bare"].rstrip(".:"), bare=not quoted):
            name = NAME_START.search(text, max(0, m.start() - 60), m.start())[0] + text[m.start() : m.start("op")]
            return f"a value assigned to {name.strip(chr(34) + chr(39) + ' ')[:60]}"
    for m in TOKEN.finditer(text):
        before = text[max(0, m.start() - 200) : m.start()].rsplit(None, 1)[-1] if m.start() else ""
        # not a URL's path
        if _random_looking(m[0]) and not HASH_PREFIX.search(before) and "://" not in before:
            return "a random-looking token"
    return None
