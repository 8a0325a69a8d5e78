"""Text from the store, made safe for an operator's terminal.

Names in the KGs come from imported files; one with ESC, BEL or a bidi override would set the terminal's
title, clear its screen or make a name read as another when printed. Every such character is shown as its
escape (`\\x1b`, `\\u202e`) instead, and Rich markup in the text is shown, not applied.
"""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text

# C0 and C1 controls, DEL, and the invisible formatting characters that move or reorder text.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def safe(value: Any) -> str:
    """`value` as a string with every control and bidi character escaped."""
    return _UNSAFE.sub(_escape, str(value))


def cell(value: Any) -> Text:
    """A Rich table cell: escaped, and not read as markup."""
    return Text(safe(value))
