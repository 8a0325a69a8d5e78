"""JSONL import of external LLM outputs (prompt, output, domain, model, timestamp), for re-audit.

`domain` may be left out: the line's domain is then detected when it is scored (`auditor.jobs.domains`), unless
the importing tenant's domain-detection mode is `require` (such a line is malformed) or `off` (it is imported
and scored "not_applicable").

Each valid line becomes an ordinary audit record (endpoint "import", hash-chained, scored through the
outbox like our own outputs) and is linked to its import batch by line number. The line's own timestamp is
kept (`details.timestamp`) and is the record's `occurred_at` in lists, filters and trends; the import time
is its `created_at`. Imported outputs never passed our gate, so they carry no gate action. Records are appended in
transactions of `APPEND_BATCH`; a part that fails marks the batch "failed" (the parts before it stay, and
`imported` says how far it got); a batch a killed process left "importing" is failed by an admin (`auditor imports
fail ID`). Bad lines are never imported silently: every malformed line is reported with its line number, and
either skipped (default) or, with `strict`, the whole file is rejected before anything is written. A line is
malformed if any field, nested metadata included, holds text the store cannot keep (NUL, lone surrogates).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy import insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from auditor.gate.pii import redact_pii
from auditor.jobs.models import ImportBatch, ImportedOutput
from auditor.settings import Settings
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.tenants.service import detection_mode
from auditor.trail.domain_source import resolution_details
from auditor.trail.queries import plausible_id
from auditor.trail.records import NewRecord, append_batch
from auditor.trail.storable import refuse_non_finite, unstorable_at

logger = logging.getLogger("auditor.jobs.imports")

APPEND_BATCH = 200
MAX_LINE_BYTES = 1_000_000


class ImportFailed(ValueError):
    """An import that cannot be carried out at all (unreadable file, no valid line)."""


class ImportRejected(ImportFailed):
    """`strict` import with malformed lines: nothing was written."""

    def __init__(self, errors: list[LineError]) -> None:
        self.errors = errors
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"import rejected, nothing written: line {first.line}: {first.message}{more}")


@dataclass(frozen=True, slots=True)
class LineError:
    line: int
    message: str


class ImportedLine(BaseModel):
    """One line of the JSONL file."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    prompt: str | None = Field(default=None, max_length=1_000_000)
    output: str = Field(min_length=1, max_length=1_000_000)
    domain: str | None = Field(default=None, min_length=1, max_length=64)
    model: str = Field(min_length=1, max_length=256)
    timestamp: datetime
    id: str | None = Field(default=None, max_length=256, description="The producer's own id for this output")
    metadata: dict[str, Any] | None = None

    @field_validator("timestamp")
    @classmethod
    def _timezone_required(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("timestamp needs a timezone (e.g. 2026-11-02T09:30:00Z)")
        return value


@dataclass(slots=True)
class ImportResult:
    import_id: str | None
    lines: int
    imported: int
    errors: list[LineError] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return len(self.errors)


def parse_lines(lines: Iterable[str], *, domains: Iterable[str],
                domain_required: bool = False) -> tuple[list[tuple[int, ImportedLine]], list[LineError], int]:
    """Validate every line: (valid (line number, parsed) pairs, errors, lines seen). Blank lines are ignored."""
    known = set(domains)
    valid: list[tuple[int, ImportedLine]] = []
    errors: list[LineError] = []
    number = 0
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        error = None
        if len(raw.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
            error = f"line longer than {MAX_LINE_BYTES} bytes"
        else:
            try:
                # NaN and Infinity are not JSON, and PostgreSQL refuses them in a JSON column
                data = json.loads(raw, parse_constant=refuse_non_finite)
            except json.JSONDecodeError as exc:
                error = f"not valid JSON ({exc.msg} at column {exc.colno})"
            except ValueError as exc:
                error = f"not valid JSON ({exc})"
            except RecursionError:
                error = "not valid JSON (nested too deeply)"
            else:
                error, parsed = _validate(data, known, domain_required)
                if parsed is not None:
                    valid.append((number, parsed))
        if error is not None:
            errors.append(LineError(number, error))
    return valid, errors, number


def _validate(data: Any, known_domains: set[str], domain_required: bool) -> tuple[str | None, ImportedLine | None]:
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}", None
    # every field, metadata's nested keys and values included: PostgreSQL cannot keep NUL, and no encoding
    # (so no record, no chain digest) exists for a lone surrogate
    unstorable = unstorable_at(data)
    if unstorable is not None:
        return f"field {unstorable[0]!r}: {unstorable[1]}", None
    try:
        parsed = ImportedLine.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "line"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"field {where!r}: {first['msg']}{more}", None
    if parsed.domain is None:
        if domain_required:
            return "field 'domain': required (this tenant's domain-detection mode is 'require')", None
        return None, parsed
    if parsed.domain not in known_domains:
        return f"field 'domain': unknown domain {parsed.domain!r} (known: {', '.join(sorted(known_domains))})", None
    return None, parsed


def import_file(database: Database, path: Path, *, settings: Settings, tenant: str, strict: bool = False) -> ImportResult:
    """Import a JSONL file; see the module docstring for what happens to malformed lines."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise ImportFailed(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportFailed(f"{path} is not UTF-8 (byte {exc.start})") from exc
    return import_lines(database, text.splitlines(), settings=settings, tenant=tenant, strict=strict,
                        filename=path.name, sha256=hashlib.sha256(content).hexdigest())


def import_lines(database: Database, lines: list[str], *, settings: Settings, tenant: str, strict: bool,
                 filename: str, sha256: str) -> ImportResult:
    with database.session() as session:
        mode = detection_mode(session, tenant, default=settings.domain_detection)
    valid, errors, line_count = parse_lines(lines, domains=settings.domains, domain_required=mode == "require")
    if strict and errors:
        raise ImportRejected(errors)
    if not valid:
        detail = f"; first problem: line {errors[0].line}: {errors[0].message}" if errors else ""
        raise ImportFailed(f"{filename}: no valid line to import{detail}")
    with database.session(write=True) as session:
        batch = ImportBatch(tenant=tenant, filename=filename[:512], sha256=sha256, strict=strict, lines=line_count,
                            imported=0, skipped=len(errors), status="importing", created_at=utcnow(),
                            errors=[{"line": e.line, "message": e.message} for e in errors])
        session.add(batch)
    for start in range(0, len(valid), APPEND_BATCH):
        part = valid[start:start + APPEND_BATCH]
        last = start + APPEND_BATCH >= len(valid)
        try:
            _append_part(database, part, batch.id, last=last, tenant=tenant, settings=settings, detection=mode)
        except Exception as exc:
            # the batch must not stay "importing" as if still under way: the parts before this one are in the
            # trail (chained, never taken back), and the batch says where it stopped
            _record_failure(database, batch.id, reason=f"stopped at line {part[0][0]}: {type(exc).__name__}")
            raise
    return ImportResult(batch.id, line_count, len(valid), errors)


def _append_part(database: Database, part: list[tuple[int, ImportedLine]], import_id: str, *, last: bool,
                 tenant: str, settings: Settings, detection: str) -> None:
    # One transaction per part: records, their outbox rows and links commit together, and the
    # chain lock is released between parts so live inference is not held up by a long import.
    with database.write_connection() as conn:
        records = [_new_record(line, number, import_id, tenant=tenant, settings=settings, detection=detection)
                   for number, line in part]
        append_batch(conn, records, key=database.chain_key)
        conn.execute(insert(ImportedOutput), [{"import_id": import_id, "line": number, "record_id": record.id}
                                              for (number, _), record in zip(part, records, strict=True)])
        done = {"status": "complete", "finished_at": utcnow()} if last else {}
        conn.execute(update(ImportBatch).where(ImportBatch.id == import_id)
                     .values(imported=ImportBatch.imported + len(part), **done))


class ImportNotImporting(ValueError):
    """`mark_failed` on a batch that is unknown or no longer importing."""


def mark_failed(database: Database, import_id: str, *, reason: str) -> None:
    """Mark an "importing" batch failed, keeping `reason` with its errors: from the import itself when a part
    fails, and from `auditor imports fail` for a batch a killed process left behind."""
    with database.session(write=True) as session:
        batch = session.get(ImportBatch, import_id) if plausible_id(import_id) else None
        if batch is None or batch.status != "importing":
            state = f"it is {batch.status}" if batch is not None else "no such import"
            raise ImportNotImporting(f"import {import_id!r} is not importing ({state})")
        batch.status, batch.finished_at = "failed", utcnow()
        batch.errors = [*(batch.errors or []), {"line": None, "message": f"import failed: {reason}"}]


def _record_failure(database: Database, import_id: str, *, reason: str) -> None:
    try:
        mark_failed(database, import_id, reason=reason)
    except (SQLAlchemyError, ImportNotImporting):   # the store is gone too: the caller reports the first error
        logger.exception("import %s: could not mark it failed", import_id)


def list_batches(database: Database, *, status: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Import batches, newest first (`status`: importing | complete | failed)."""
    with database.session() as session:
        query = select(ImportBatch).order_by(ImportBatch.created_at.desc()).limit(limit)
        if status is not None:
            query = query.where(ImportBatch.status == status)
        return [{"id": b.id, "tenant": b.tenant, "filename": b.filename, "status": b.status, "lines": b.lines,
                 "imported": b.imported, "skipped": b.skipped, "created_at": b.created_at, "finished_at": b.finished_at}
                for b in session.execute(query).scalars()]


def _new_record(line: ImportedLine, number: int, import_id: str, *, tenant: str, settings: Settings,
                detection: str) -> NewRecord:
    """`detection`: the tenant's domain-detection mode, kept with a line that names no domain."""
    mode = settings.content_mode_for(line.domain)
    redact = mode == "redacted"
    output = redact_pii(line.output)[0] if redact else line.output
    prompt = redact_pii(line.prompt)[0] if redact and line.prompt is not None else line.prompt
    return NewRecord(
        tenant=tenant, status="completed", endpoint="import", domain=line.domain, model_id=line.model,
        content_mode=mode, prompt=prompt, output=output, delivered_output=output,
        details={"import_id": import_id, "line": number, "timestamp": line.timestamp.isoformat(),
                 "external_id": line.id, "metadata": line.metadata,
                 # A line without a domain is detected when scored; the tenant's mode now decides whether it may be.
                 **(resolution_details(source="none", mode=detection) if line.domain is None else {})},
    )
