"""Reading an import file into (line, record) pairs, and the field checks the formats share.

Line numbers are physical lines of the file, counted from 1, where the record starts (a quoted CSV field
may span lines). Text is UTF-8 (a BOM is fine); a byte that is not names its line.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from knowledge_graphs.imports.control_chars import control_in
from knowledge_graphs.imports.errors import ErrorLog, FieldError

R = TypeVar("R")
T = TypeVar("T")
MAX_FIELD_CHARS = 2000
_US_DATE = "%m/%d/%Y"


def decode(data: bytes, log: ErrorLog) -> str | None:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        log.add(data[:exc.start].count(b"\n") + 1, None, f"not UTF-8 text (byte 0x{data[exc.start]:02x})")
        return None


def csv_records(text: str, log: ErrorLog, *, columns: Sequence[str] | None = None,
                required: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows as {column: value}. With `columns` the file has no header and every row has exactly those
    columns; without, the first row is the header and must hold `required`."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = list(columns) if columns is not None else None
    end = 0
    while True:
        start = end + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            log.add(reader.line_num, None, f"not valid CSV ({exc})")
            return
        end = reader.line_num
        if not row or all(not cell.strip() for cell in row) or row == ["\x1a"]:   # blank, or a DOS EOF marker
            continue
        if header is None:
            header = [cell.strip() for cell in row]
            missing = [name for name in required if name not in header]
            for name in missing:
                log.add(start, name, "missing column in the header")
            if missing:
                return
            continue
        if columns is not None and len(row) != len(header):
            log.add(start, None, f"expected {len(header)} columns, found {len(row)}")
            continue
        yield start, {name: (row[i] if i < len(row) else "") for i, name in enumerate(header)}


def jsonl_records(text: str, log: ErrorLog) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            log.add(number, None, f"not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(value, dict):
            log.add(number, None, "each line must be a JSON object")
            continue
        yield number, value


def checked(records: Iterable[tuple[int, R]], log: ErrorLog, read: Callable[[int, R], T]) -> Iterator[T]:
    """`read(line, record)` for each record; a `FieldError` is logged against the record's line and the
    record skipped, so one pass reports every bad row."""
    for line, record in records:
        try:
            yield read(line, record)
        except FieldError as exc:
            log.add(line, exc.field, str(exc))


# -- field checks (raise FieldError) -------------------------------------------------------------------


def text(record: dict[str, Any], name: str, *, required: bool = True, null: str | None = None) -> str | None:
    value = record.get(name)
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise FieldError(name, f"must be text, got {type(value).__name__}")
    value = value.strip()
    if null is not None and value == null:
        value = ""
    if not value:
        if required:
            raise FieldError(name, "is empty")
        return None
    if len(value) > MAX_FIELD_CHARS:
        raise FieldError(name, f"longer than {MAX_FIELD_CHARS} characters")
    if (bad := control_in(value)) is not None:
        raise FieldError(name, bad)
    return value


def positive_number(record: dict[str, Any], name: str) -> float:
    raw = record.get(name)
    try:
        value = float(raw.strip().replace(",", "")) if isinstance(raw, str) else float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise FieldError(name, f"must be a number, got {raw!r}") from None
    if isinstance(raw, bool) or not math.isfinite(value) or value <= 0:
        raise FieldError(name, f"must be a positive number, got {raw!r}")
    return int(value) if value.is_integer() else value


def iso_date(record: dict[str, Any], name: str, *, required: bool = True, us_format: bool = False) -> str | None:
    """YYYY-MM-DD (or, with `us_format`, M/D/YYYY as the Supreme Court Database writes it)."""
    raw = text(record, name, required=required)
    if raw is None:
        return None
    for parse in (dt.date.fromisoformat, *((lambda v: dt.datetime.strptime(v, _US_DATE).date(),) if us_format else ())):
        try:
            return parse(raw).isoformat()
        except ValueError:
            continue
    raise FieldError(name, f"must be a date YYYY-MM-DD{' or M/D/YYYY' if us_format else ''}, got {raw!r}")


def one_of(record: dict[str, Any], name: str, allowed: dict[str, str], *, default: str | None = None) -> str:
    """The canonical value for a field whose spellings `allowed` maps (case-insensitive)."""
    raw = text(record, name, required=default is None)
    if raw is None:
        assert default is not None
        return default
    canonical = allowed.get(raw.casefold())
    if canonical is None:
        choices = ", ".join(sorted(set(allowed.values())))
        raise FieldError(name, f"{raw!r} is not one of {choices}")
    return canonical
