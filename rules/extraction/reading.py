"""The text validators read: structured blocks (JSON, YAML, `snake_case_key: value` lines) said as sentences.

Chatbots put facts in fenced ```json / ```yaml blocks and config-style lines (`report_threshold_usd: 3000`,
`"max_daily_dose_mg": 4000`). Validators read prose, "Label: value" lines and tables; a key with its unit in a
suffix, nested under the object that names its subject, says nothing to them. `reading_view(text)` rewrites each
such block as one line per value ("ibuprofen max daily dose: 3200 mg."), the subject taken from the object's naming
field (`drug`, `name`, `regulation`...) or from the key it is nested under, and the unit from the key's suffix
(`_usd` -> "$", `_mg` -> " mg", `_pct` -> "%"). Every character of the view maps back to the original text, so
every validator sees the same sentences and every claim is reported on the original's span. Prose passes through
unchanged: a text without such blocks is its own view.

Characters the rewrite copies from elsewhere (the subject, a unit) are context: a claim's span maps back to the
characters of its own line only, never across the block.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

_FENCE = re.compile(r"^```[ \t]*(?P<lang>[A-Za-z0-9_-]*)[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
# config-style lines outside fences: a snake_case or dotted key (at least one "_" or "."), then a scalar
_KEY_LINE = re.compile(r"^(?P<indent>[ \t]*)(?:[-*][ \t]+)?\"?(?P<key>[A-Za-z][A-Za-z0-9]*(?:[_.][A-Za-z0-9]+)+)\"?"
                       r"[ \t]*[:=][ \t]*(?P<value>[^\n]*?)[ \t,]*$", re.M)
_NAMING_KEYS = ("name", "drug", "generic_name", "generic", "drug_name", "medication", "brand", "regulation", "rule",
                "statute", "section", "case", "case_name", "company", "issuer", "entity", "country", "currency",
                "form", "agency", "instrument", "act", "title", "subject")
# unit suffixes of keys: suffix -> (written before the value, written after it)
_UNIT_SUFFIXES = {
    "usd": ("$", ""), "dollars": ("$", ""), "eur": ("EUR ", ""), "euro": ("EUR ", ""), "gbp": ("GBP ", ""),
    "mg": ("", " mg"), "mcg": ("", " mcg"), "ug": ("", " mcg"), "g": ("", " g"), "ml": ("", " mL"),
    "pct": ("", "%"), "percent": ("", "%"), "days": ("", " days"), "years": ("", " years"), "hours": ("", " hours"),
    "months": ("", " months"), "units": ("", " units"),
}


@dataclass(frozen=True, slots=True)
class ReadingView:
    """`text` as validators read it, with each view character's original offset (-1: copied context)."""

    original: str
    text: str
    _origin: tuple[int, ...]

    @property
    def rewritten(self) -> bool:
        return bool(self._origin)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span of the view span [start, end): its own characters only when it has any."""
        if not self._origin:
            return start, end
        points = [self._origin[i] for i in range(max(start, 0), min(end, len(self._origin))) if self._origin[i] >= 0]
        if not points:
            return 0, 0
        return min(points), max(points) + 1


@lru_cache(maxsize=1024)
def reading_view(text: str) -> ReadingView:
    blocks = list(_structured_blocks(text))
    if not blocks:
        return ReadingView(text, text, ())
    pieces: list[str] = []
    origin: list[int] = []
    cursor = 0
    for start, end, lines in blocks:
        pieces.append(text[cursor:start])
        origin.extend(range(cursor, start))
        for line in lines:
            for chunk, at in line:
                pieces.append(chunk)
                origin.extend(range(at, at + len(chunk)) if at >= 0 else [-1] * len(chunk))
            pieces.append(".\n")
            origin.extend([-1, -1])
        cursor = end
    pieces.append(text[cursor:])
    origin.extend(range(cursor, len(text)))
    return ReadingView(text, "".join(pieces), tuple(origin))


# A line of the view: (chunk, original offset of its first character or -1) pieces.
Line = list[tuple[str, int]]


def _structured_blocks(text: str) -> Iterator[tuple[int, int, list[Line]]]:
    taken: list[tuple[int, int]] = []
    for match in _FENCE.finditer(text):
        body_start = match.start("body")
        data = _parse(match.group("body"), match.group("lang").casefold())
        if data is None:
            continue
        lines = list(_said(data, text, body_start, match.end("body")))
        if lines:
            taken.append(match.span())
            yield match.start(), match.end(), lines
    for match in _KEY_LINE.finditer(text):
        if any(s <= match.start() < e for s, e in taken) or not _scalar_text(match.group("value")):
            continue
        raw = match.group("value")
        value = raw.strip().strip('"\'')
        value_at = match.start("value") + raw.find(value)
        yield match.start(), match.end(), [_key_value_line(match.group("key"), match.start("key"), value, value_at, [])]


def _parse(body: str, lang: str) -> Any:
    if lang in ("", "json", "yaml", "yml", "jsonc"):
        try:
            return json.loads(body)
        except ValueError:
            pass
        try:
            data = yaml.safe_load(body)
        except yaml.YAMLError:
            return None
        return data if isinstance(data, dict | list) else None
    return None


def _said(data: Any, text: str, start: int, end: int) -> Iterator[Line]:
    """One line per scalar leaf, in document order, located in the original by a moving cursor."""
    cursor = [start]

    def locate(token: str) -> int:
        at = text.find(token, cursor[0], end)
        if at >= 0:
            cursor[0] = at + len(token)
        return at

    def walk(node: Any, context: list[str]) -> Iterator[Line]:
        if isinstance(node, dict):
            naming = next((k for k in node if str(k).casefold() in _NAMING_KEYS and _is_scalar(node[k])), None)
            own_context = context if naming is None else [*context, _literal(node[naming])]
            for key, value in node.items():
                key_at = locate(str(key))
                if _is_scalar(value):
                    value_at = locate(_literal(value))
                    yield _key_value_line(str(key), key_at, _literal(value), value_at,
                                          context if key == naming else own_context)
                else:
                    yield from walk(value, [*own_context, _words(str(key))])
        elif isinstance(node, list):
            for item in node:
                if _is_scalar(item):
                    at = locate(_literal(item))
                    yield [*_context_chunks(context), (_literal(item), at)]
                else:
                    yield from walk(item, context)

    yield from walk(data, [])


def _context_chunks(context: list[str]) -> Line:
    """The subject words a line is said under; copied (offset -1), so they never stretch a claim's own span."""
    return [piece for words in context for piece in ((words, -1), (" ", -1))]


def _key_value_line(key: str, key_at: int, value: str, value_at: int, context: list[str]) -> Line:
    words, (before, after) = _unit_of(key)
    line = _context_chunks(context)
    line.append((words, -1 if key_at < 0 else key_at))
    line.append((": ", -1))
    if before:
        line.append((before, -1))
    line.append((value, value_at))
    if after:
        line.append((after, -1))
    return line


def _unit_of(key: str) -> tuple[str, tuple[str, str]]:
    parts = _parts(key)
    if len(parts) > 1 and parts[-1].casefold() in _UNIT_SUFFIXES:
        return " ".join(parts[:-1]), _UNIT_SUFFIXES[parts[-1].casefold()]
    return " ".join(parts), ("", "")


def _words(key: str) -> str:
    return " ".join(_parts(key))


def _parts(key: str) -> list[str]:
    """A key's words; a short part that is no common word is an acronym in keys (`ctr`, `otc`, `fbar`), and the
    KG's linker matches acronyms by case, so it is said in capitals."""
    return [_acronym(p) for p in re.split(r"[_.]", key) if p]


@lru_cache(maxsize=4096)
def _acronym(part: str) -> str:
    if not (2 <= len(part) <= 5 and part.isalpha() and part.islower()):
        return part
    from wordfreq import zipf_frequency

    return part.upper() if zipf_frequency(part, "en") < 3.5 else part


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) and not (isinstance(value, str) and "\n" in value)


def _literal(value: Any) -> str:
    """A scalar as JSON and YAML write it (the form found again in the block's text)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _scalar_text(value: str) -> bool:
    stripped = value.strip().strip('"\'')
    return bool(stripped) and not stripped.startswith(("{", "["))
