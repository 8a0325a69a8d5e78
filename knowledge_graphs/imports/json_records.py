"""Reading a JSON import file whose records are the items of one top-level array (`{"data": [...]}`), each with
the line it starts on, and naming a bad item's field by its path (`data[12].ticker`): the SEC writes its
ticker file on one line, so the line alone would not say which record is wrong."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from knowledge_graphs.imports.errors import ErrorLog, FieldError

T = TypeVar("T")
_WHITESPACE = " \t\n\r"


@dataclass(slots=True)
class JsonItem:
    line: int
    index: int
    value: Any


@dataclass(slots=True)
class JsonDocument:
    top: dict[str, Any]          # the other top-level members ("fields", "meta")
    items: list[JsonItem]        # the array's items


def json_array(text: str, log: ErrorLog, key: str) -> JsonDocument | None:
    """The top-level object's members, the array `key` read item by item with each item's line; None (and
    the error logged with its line) when the text is not such a JSON object."""
    reader = _Reader(text)
    try:
        return reader.document(key)
    except _NotJson as exc:
        log.add(reader.line_of(exc.position), None, str(exc))
        return None


def checked_items(items: Iterable[JsonItem], log: ErrorLog, array: str,
                  read: Callable[[JsonItem], T]) -> Iterator[T]:
    """`read(item)` for each item; a `FieldError` is logged against the item's line with the field's path
    (`results[3].openfda.generic_name`) and the item skipped, so one pass reports every bad record."""
    for item in items:
        try:
            yield read(item)
        except FieldError as exc:
            where = f"{array}[{item.index}]"
            log.add(item.line, f"{where}.{exc.field}" if exc.field else where, str(exc))


class _NotJson(ValueError):
    def __init__(self, position: int, message: str) -> None:
        super().__init__(message)
        self.position = position


class _Reader:
    def __init__(self, text: str) -> None:
        self.text, self.position = text, 0
        self.decoder = json.JSONDecoder()
        self._counted, self._lines = 0, 1      # newlines counted up to `_counted`: positions only grow

    def line_of(self, position: int) -> int:
        if position < self._counted:
            return self.text.count("\n", 0, position) + 1
        self._lines += self.text.count("\n", self._counted, position)
        self._counted = position
        return self._lines

    def document(self, key: str) -> JsonDocument:
        top: dict[str, Any] = {}
        items: list[JsonItem] | None = None
        self._expect("{", "the file must be one JSON object")
        while self._peek() != "}":
            if top or items is not None:
                self._expect(",", "expected ',' or '}'")
            name = self._value()
            if not isinstance(name, str):
                raise _NotJson(self.position, "not valid JSON (a member name must be a string)")
            self._expect(":", "expected ':'")
            if name == key and self._peek() == "[":
                items = self._items()
            else:
                top[name] = self._value()
        self.position += 1
        if self._peek() != "":
            raise _NotJson(self.position, "not valid JSON (text after the closing '}')")
        if items is None:
            raise _NotJson(0, f"no {key!r} array in the file")
        return JsonDocument(top, items)

    def _items(self) -> list[JsonItem]:
        self.position += 1                     # the '['
        items: list[JsonItem] = []
        while self._peek() != "]":
            if items:
                self._expect(",", "expected ',' or ']'")
                self._peek()
            start = self.position
            items.append(JsonItem(self.line_of(start), len(items), self._value()))
        self.position += 1
        return items

    def _value(self) -> Any:
        self._peek()
        try:
            value, self.position = self.decoder.raw_decode(self.text, self.position)
        except json.JSONDecodeError as exc:
            raise _NotJson(exc.pos, f"not valid JSON ({exc.msg})") from None
        return value

    def _peek(self) -> str:
        """The next character that is not whitespace ('' at the end); the position moves onto it."""
        while self.position < len(self.text) and self.text[self.position] in _WHITESPACE:
            self.position += 1
        return self.text[self.position] if self.position < len(self.text) else ""

    def _expect(self, char: str, message: str) -> None:
        if self._peek() != char:
            raise _NotJson(self.position, f"not valid JSON ({message})")
        self.position += 1
