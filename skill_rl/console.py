"""Printing text that came from users, skills and models: literally.

Descriptions, problem lines, labels, model ids and server messages may hold `[bold]`, `[/]` or
`qwen[lora]`; rich would read them as markup (dropping them, restyling, or raising MarkupError).
They may also hold terminal control codes. `literal` makes a rich Text of them that rich prints as
is, with control characters shown as `\\xNN`; `clean` does the same for plain `print`.
"""

from __future__ import annotations

import re

from rich.text import Text

# all but tab and newline
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: object) -> str:
    """`text` as a string whose control characters (ESC, BEL, CR, ...) are shown, not obeyed."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", str(text))


def literal(text: object, style: str = "") -> Text:
    """`text` for a rich table cell, title or print: never interpreted as markup."""
    return Text(clean(text), style=style)


def chart_text(text: object) -> str:
    """A label or title as matplotlib draws it literally: `$` would start mathtext, a leading `_` hides it from the legend."""
    text = clean(text).replace("$", r"\$")
    return " " + text if text.startswith("_") else text
