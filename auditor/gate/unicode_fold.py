"""A view of text for pattern matching in which disguised letters read as the ASCII letters they imitate.

`fold_for_matching(text)` returns two views, one with invisible characters removed ("i\\u200bgnore") and one
with them read as spaces ("ignore\\u200ball"). Each view is:

1. NFKC: full-width, mathematical and other compatibility letters and digits become plain ones, and
   no-break, thin and ideographic spaces become spaces;
2. without default-ignorable characters (Unicode category Cf: zero-width space and joiners, word joiner,
   BOM, soft hyphen, bidi controls, tag characters; and the other Default_Ignorable_Code_Point ranges:
   variation selectors, Hangul fillers, the combining grapheme joiner);
3. without combining marks (NFD, then category Mn removed): "i\\u0301gnore" reads "ignore";
4. with confusables folded to their ASCII prototype per Unicode TR39 (confusables.txt, as shipped by the
   `confusable-homoglyphs` package): Cyrillic "о" and Greek "ο" read "o"; before and after casefolding, so
   capitals fold too;
5. with "i", "l", "1" and "|" read as one letter, and "0" as "o": TR39 folds "I" and "1" to "l", and
   a capital I cannot be told from a small L anyway.

A pattern that runs on a view is passed through `fold_pattern` first, which does step 5 to its letters.
The views are for matching only; nothing downstream ever sees them.
"""

from __future__ import annotations

import importlib.resources
import json
import unicodedata
from functools import lru_cache

# DerivedCoreProperties.txt, Default_Ignorable_Code_Point, beyond category Cf (which `_table` adds whole)
_IGNORABLE_RANGES = ((0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x3164, 0x3164),
                     (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
# past this, every Cf and Mn character is in the tag and variation-selector range E0000-E0FFF above
_LAST_MARK_OR_FORMAT_OUTSIDE_THE_RANGES = 0x3FFFF
_MERGED = str.maketrans({"i": "l", "1": "l", "|": "l", "0": "o"})


def fold_for_matching(text: str) -> tuple[str, ...]:
    """The folded view with invisible characters removed, and the one with them read as spaces (one view
    when the text has none)."""
    removed, spaced = _fold(text, _table(None)), _fold(text, _table(" "))
    return (removed,) if removed == spaced else (removed, spaced)


def fold_pattern(source: str) -> str:
    """A regular expression's source with its letters i and l merged as the views merge them ("ignore" reads
    "lgnore"), and a literal "\\|" as the "l" a view makes of "|"; other escapes (\\b, \\s) are left alone."""
    out, index = [], 0
    while index < len(source):
        char = source[index]
        if char == "\\" and index + 1 < len(source):
            escaped = source[index + 1]
            out.append("l" if escaped == "|" else char + escaped)
            index += 2
            continue
        out.append("l" if char in "iIlL" else char)
        index += 1
    return "".join(out)


def _fold(text: str, table: dict[int, str | None]) -> str:
    decomposed = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    folded = decomposed.translate(table).casefold()
    return unicodedata.normalize("NFD", folded).translate(table).translate(_MERGED)


@lru_cache(maxsize=2)
def _table(invisible: str | None) -> dict[int, str | None]:
    """One `str.translate` table: invisible characters to `invisible` (None: removed), combining marks
    removed, confusables to their ASCII prototype."""
    table: dict[int, str | None] = dict(_ascii_prototypes())
    for code in range(_LAST_MARK_OR_FORMAT_OUTSIDE_THE_RANGES + 1):
        category = unicodedata.category(chr(code))
        if category == "Mn":
            table[code] = None
        elif category == "Cf":
            table[code] = invisible
    for first, last in _IGNORABLE_RANGES:
        for code in range(first, last + 1):
            table[code] = invisible
    return table


@lru_cache(maxsize=1)
def _ascii_prototypes() -> dict[int, str]:
    """TR39 confusables whose prototype is ASCII: each non-ASCII character to that prototype.

    The package's data holds each pair of confusables.txt in both directions; for a non-ASCII character its
    one ASCII entry is its prototype (checked against confusables.txt 13.0: 1,733 characters, no conflicts)."""
    data = importlib.resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8")
    prototypes = {}
    for char, entries in json.loads(data).items():
        if len(char) != 1 or char.isascii():
            continue
        ascii_entries = {entry["c"] for entry in entries if entry["c"].isascii()}
        if len(ascii_entries) == 1:
            prototypes[ord(char)] = ascii_entries.pop()
    return prototypes
