"""Audit records as JSONL or CSV lines (shared by the export endpoint and `auditor audits export`).

A line holds the stored record and its current verdicts (`current`). CSV keeps one row per record:
scalars as they are, the current verdicts flattened into `current_*` columns, structured fields (claims,
gate decisions, sampling parameters) as JSON text. The regulator bundle (`auditor.trail.bundle`) has flat
per-claim files instead.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

from auditor.trail.schemas import AuditRecordOut
from auditor.trail.verify_bundle import neutralise

_NOT_EXPORTED = {"evaluations", "reviews", "holds", "current"}
RECORD_COLUMNS = [name for name in AuditRecordOut.model_fields if name not in _NOT_EXPORTED]
CURRENT_COLUMNS = ["source", "evaluation_id", "evaluated_at", "evaluator_version", "rule_pack_version",
                   "rule_pack_hash", "rule_pack_active", "n_supported", "n_contradicted", "n_unverifiable", "n_fabrication", "fer",
                   "verdict_action", "max_severity", "had_gate", "reviewed", "disputed", "claims"]
CSV_COLUMNS = RECORD_COLUMNS + [f"current_{name}" for name in CURRENT_COLUMNS]


def record_dict(record: AuditRecordOut) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude={"evaluations", "reviews", "holds"})


def flat_row(values: dict[str, Any]) -> dict[str, Any]:
    """One CSV row: the record's columns, then its current verdicts as `current_*` columns."""
    row = {name: values.get(name) for name in RECORD_COLUMNS}
    current = values.get("current") or {}
    pack = current.get("rule_pack") or {}
    flat = {**current, "rule_pack_version": pack.get("version"), "rule_pack_hash": pack.get("hash"),
            "rule_pack_active": pack.get("active")}
    row.update({f"current_{name}": flat.get(name) for name in CURRENT_COLUMNS})
    return row


def neutralise_cell(value: Any) -> Any:
    """A CSV cell made safe to open in a spreadsheet (OWASP's CSV-injection guidance: a cell starting with
    = + - @, tab or CR is prefixed with ', numbers are left alone). Every cell is checked, since prompts,
    request ids, claims and evidence all carry text an attacker chose. The rule is the bundle checker's own,
    so exports and bundles neutralise alike."""
    return neutralise(value) if isinstance(value, str) else value


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell: structures as JSON text, then neutralised."""
    return neutralise_cell(json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value)


def export_lines(pages: Iterable[list[AuditRecordOut]], format: str) -> Iterator[str]:
    if format == "jsonl":
        for page in pages:
            yield "".join(json.dumps(record_dict(record), ensure_ascii=False) + "\n" for record in page)
        return
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    yield _drain(buffer)
    for page in pages:
        for record in page:
            writer.writerow({k: csv_cell(v) for k, v in flat_row(record_dict(record)).items()})
        yield _drain(buffer)


def _drain(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text
