"""Reading the trail on someone's behalf: list, show, export, verify. Each read is checked against the
reader's tenant and written to the access log in the same transaction, whoever calls it (API, CLI)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from auditor.store.database import Database
from auditor.trail.access_log import Reader, log_access, log_denied
from auditor.trail.chain import ChainReport
from auditor.trail.export import export_lines
from auditor.trail.ledgers import verify_trail
from auditor.trail.queries import (
    decode_cursor,
    evaluations_for,
    get_record,
    iter_records,
    list_records,
)
from auditor.trail.schemas import AuditFilters, AuditRecordOut, EvaluationOut, ExportFilters, RecordFilter
from auditor.trail.witness import Witness, check_against_witness


class TenantNotAllowed(PermissionError):
    """A non-admin reader asked for another tenant's records."""


class RecordNotFound(LookupError):
    """No such record, or one owned by another tenant (the two look alike on purpose)."""


def check_tenant_filter(database: Database, reader: Reader, filters: RecordFilter, action: str) -> None:
    if filters.tenant is not None and reader.tenant_scope is not None and filters.tenant != reader.tenant_scope:
        reason = "only admins may read other tenants' records"
        log_denied(database, reader, target=f"{action}:tenant={filters.tenant}", reason=reason)
        raise TenantNotAllowed(reason)


def logged_filters(filters: RecordFilter) -> dict[str, Any]:
    return filters.model_dump(mode="json", exclude_none=True)


def list_page(database: Database, reader: Reader, filters: AuditFilters) -> tuple[list[AuditRecordOut], str | None]:
    """One page of matching records (newest first) and the next page's cursor."""
    check_tenant_filter(database, reader, filters, "list")
    with database.session(write=True) as session:
        rows, cursor = list_records(session, filters, tenant_scope=reader.tenant_scope)
        log_access(session, reader, key=database.chain_key, action="list", filters=logged_filters(filters),
                   result_count=len(rows), record_ids=[row.id for row in rows])
        return [AuditRecordOut.model_validate(row) for row in rows], cursor


def show_record(database: Database, reader: Reader, record_id: str) -> AuditRecordOut:
    """One record with its evaluations; a failed read is logged too."""
    with database.session(write=True) as session:
        row = get_record(session, record_id, tenant_scope=reader.tenant_scope)
        log_access(session, reader, key=database.chain_key, action="show", target=record_id[:64],
                   result_count=0 if row is None else 1)
        if row is not None:
            evaluations = [EvaluationOut.model_validate(e) for e in evaluations_for(session, record_id)]
            return AuditRecordOut.model_validate(row).model_copy(update={"evaluations": evaluations})
    # Raised outside the session block so the failed read's log entry is committed.
    raise RecordNotFound(f"no audit record {record_id!r}")


def export(database: Database, reader: Reader, filters: ExportFilters) -> Iterator[str]:
    """Check and log the export now (an export is a read even if cut short), then stream its lines lazily."""
    check_tenant_filter(database, reader, filters, "export")
    if filters.cursor is not None:
        decode_cursor(filters.cursor)   # a bad cursor fails before the first byte
    with database.session(write=True) as session:
        log_access(session, reader, key=database.chain_key, action="export", filters=logged_filters(filters))

    def lines() -> Iterator[str]:
        with database.session() as session:   # keyset pages, one line at a time
            rows = iter_records(session, filters, tenant_scope=reader.tenant_scope, batch_size=filters.limit)
            yield from export_lines(rows, filters.format)

    return lines()


def verify(database: Database, reader: Reader, *, hmac_key: bytes, witness: Witness | None = None) -> ChainReport:
    """Verify every ledger in one snapshot (and, given a witness, that the store still holds what the witness
    saw), and log that the reader did."""
    with database.snapshot() as conn:
        report = verify_trail(conn, hmac_key)
        if witness is not None:
            problem, read = check_against_witness(conn, witness, hmac_key)
            report.extra["witness_entries"] = read
            if problem is not None:
                report.ok, report.problem = False, report.problem or problem
    with database.session(write=True) as session:
        log_access(session, reader, key=database.chain_key, action="verify", result_count=report.records_checked)
    return report


def scoped_report(database: Database, reader: Reader, report: ChainReport) -> dict[str, Any]:
    """What a reader may see of a verification: everything for admins; for a tenant's reader, whether the trail
    verifies and which kind of problem, but no counts (the trail's volume is every tenant's) and no record id
    unless the record is the reader's own."""
    if reader.tenant_scope is None:
        return report.to_dict()
    problem = None
    if report.problem is not None:
        own = report.problem.record_id if report.problem.ledger == "records" else None
        if own is not None:
            with database.session() as session:
                own = own if get_record(session, own, tenant_scope=reader.tenant_scope) is not None else None
        problem = {"kind": report.problem.kind, "ledger": report.problem.ledger, "seq": None, "record_id": own,
                   "detail": report.problem.detail if own else "the trail failed verification; an admin can see where"}
    return {"ok": report.ok, "records_checked": None, "checkpoints_checked": None, "last_seq": None,
            "problem": problem}
