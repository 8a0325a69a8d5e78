"""Reading the trail on someone's behalf: list, show, export, verify. Each read is checked against the
reader's tenant and written to the access log in the same transaction, whoever calls it (API, CLI)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from auditor.store.database import Database
from auditor.trail import chain
from auditor.trail.access_log import Reader, log_access
from auditor.trail.export import export_lines
from auditor.trail.queries import (
    decode_cursor,
    evaluations_for,
    get_record,
    iter_records,
    list_records,
)
from auditor.trail.schemas import AuditFilters, AuditRecordOut, EvaluationOut, ExportFilters


class TenantNotAllowed(PermissionError):
    """A non-admin reader asked for another tenant's records."""


class RecordNotFound(LookupError):
    """No such record, or one owned by another tenant (the two look alike on purpose)."""


def _check_tenant_filter(reader: Reader, filters: AuditFilters) -> None:
    if filters.tenant is not None and reader.tenant_scope is not None and filters.tenant != reader.tenant_scope:
        raise TenantNotAllowed("only admins may read other tenants' records")


def _logged_filters(filters: AuditFilters) -> dict[str, Any]:
    return filters.model_dump(mode="json", exclude_none=True)


def list_page(database: Database, reader: Reader, filters: AuditFilters) -> tuple[list[AuditRecordOut], str | None]:
    """One page of matching records (newest first) and the next page's cursor."""
    _check_tenant_filter(reader, filters)
    with database.session(write=True) as session:
        rows, cursor = list_records(session, filters, tenant_scope=reader.tenant_scope)
        log_access(session, reader, action="list", filters=_logged_filters(filters), result_count=len(rows))
        return [AuditRecordOut.model_validate(row) for row in rows], cursor


def show_record(database: Database, reader: Reader, record_id: str) -> AuditRecordOut:
    """One record with its evaluations; a failed read is logged too."""
    with database.session(write=True) as session:
        row = get_record(session, record_id, tenant_scope=reader.tenant_scope)
        log_access(session, reader, action="show", target=record_id[:64], result_count=0 if row is None else 1)
        if row is not None:
            evaluations = [EvaluationOut.model_validate(e) for e in evaluations_for(session, record_id)]
            return AuditRecordOut.model_validate(row).model_copy(update={"evaluations": evaluations})
    # Raised outside the session block so the failed read's log entry is committed.
    raise RecordNotFound(f"no audit record {record_id!r}")


def export(database: Database, reader: Reader, filters: ExportFilters) -> Iterator[str]:
    """Check and log the export now (an export is a read even if cut short), then stream its lines lazily."""
    _check_tenant_filter(reader, filters)
    if filters.cursor is not None:
        decode_cursor(filters.cursor)   # a bad cursor fails before the first byte
    with database.session(write=True) as session:
        log_access(session, reader, action="export", filters=_logged_filters(filters))

    def lines() -> Iterator[str]:
        with database.session() as session:   # keyset pages, one line at a time
            rows = iter_records(session, filters, tenant_scope=reader.tenant_scope, batch_size=filters.limit)
            yield from export_lines(rows, filters.format)

    return lines()


def verify(database: Database, reader: Reader, *, hmac_key: bytes) -> chain.ChainReport:
    """Verify the whole chain and log that the reader did."""
    with database.engine.connect() as conn:
        report = chain.verify_chain(conn, hmac_key)
    with database.session(write=True) as session:
        log_access(session, reader, action="verify", result_count=report.records_checked)
    return report


