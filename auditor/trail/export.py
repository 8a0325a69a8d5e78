"""Audit records as JSONL or CSV lines (shared by the export endpoint and `auditor audits export`)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

from auditor.trail.models import AuditRecord
from auditor.trail.schemas import AuditRecordOut

# CSV columns: scalar fields as they are, structured fields (claims, decisions, ...) as JSON text.
CSV_COLUMNS = [name for name in AuditRecordOut.model_fields if name != "evaluations"]


def record_dict(row: AuditRecord) -> dict[str, Any]:
    return AuditRecordOut.model_validate(row).model_dump(mode="json", exclude={"evaluations"})


# OWASP CSV injection guidance: a cell a spreadsheet would read as a formula or a control starts with one of
# these; prefixing a single quote makes it text. Every cell is checked, since prompts, request ids, claims
# and evidence all carry text an attacker chose.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value: Any) -> Any:
    """A CSV cell made safe to open in a spreadsheet (numbers are left alone; "-0.5" stays a number)."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS) and not _is_number(value):
        return "'" + value
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def export_lines(rows: Iterable[AuditRecord], format: str) -> Iterator[str]:
    if format == "jsonl":
        for row in rows:
            yield json.dumps(record_dict(row), ensure_ascii=False) + "\n"
        return
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for row in rows:
        values = record_dict(row)
        writer.writerow({k: neutralise_cell(json.dumps(v, ensure_ascii=False) if isinstance(v, dict | list) else v)
                         for k, v in values.items()})
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    if buffer.tell():
        yield buffer.getvalue()
