"""Characters no imported text may hold: terminal controls and bidi controls.

An ESC or BEL in a sanctioned party's name reaches an operator's terminal through `auditor kg diff` (setting
its title, clearing its screen); a right-to-left override makes a name read as another. C0 controls (but
tab, newline and carriage return, which multi-line fields carry), DEL, C1 controls and the bidi marks,
embeddings, overrides and isolates are refused at import, naming the row and field.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any

CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_ABBREVIATIONS = {0x00: "NUL", 0x07: "BEL", 0x08: "BS", 0x1B: "ESC", 0x7F: "DEL", 0x9B: "CSI", 0x9D: "OSC"}


def describe(char: str) -> str:
    """'U+001B (ESC)', 'U+202E (RIGHT-TO-LEFT OVERRIDE)': a character named without printing it."""
    code = ord(char)
    name = _ABBREVIATIONS.get(code) or unicodedata.name(char, "")
    return f"U+{code:04X}" + (f" ({name})" if name else "")


def control_in(text: str) -> str | None:
    """Why `text` may not be imported (its first control character, described), or None."""
    found = CONTROL.search(text)
    return None if found is None else f"holds the control character {describe(found.group())}"


def strings_in(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, text) for every string in a JSON-like value, keys included."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key, path)
            yield from strings_in(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_in(item, path)
