"""Reading the trail on someone's behalf: list, show, export, verify. Each read is checked against the
reader's tenant and written to the access log in the same transaction, whoever calls it (API, CLI), with
the ids of the records it showed. (`TenantNotAllowed` and `RecordNotFound` are re-exported for callers.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from auditor.packs.registry import versions_by_hash
from auditor.store.base import new_id
from auditor.store.database import Database
from auditor.trail.access_log import Reader, TenantNotAllowed, check_tenant_filter, log_access, logged_filters
from auditor.trail.chain import ChainReport
from auditor.trail.export import export_lines
from auditor.trail.holds import holds_covering
from auditor.trail.queries import (
    RecordNotFound,
    decode_cursor,
    evaluations_for,
    get_record,
    get_shown,
    iter_records,
    list_records,
    record_views,
)
from auditor.trail.reviews import reviews_of
from auditor.trail.schemas import AuditFilters, AuditRecordOut, EvaluationOut, ExportFilters
from auditor.trail.verification import VerifyMode, verify_store
from auditor.trail.witness import Witness


def list_page(database: Database, reader: Reader, filters: AuditFilters) -> tuple[list[AuditRecordOut], str | None]:
    """One page of matching records (newest first) with their current verdicts, and the next page's cursor."""
    check_tenant_filter(database, reader, filters, "list")
    with database.session(write=True) as session:
        rows, cursor = list_records(session, filters, tenant_scope=reader.tenant_scope)
        log_access(session, reader, key=database.chain_key, action="list", filters=logged_filters(filters),
                   result_count=len(rows), record_ids=[row.record.id for row in rows])
        return record_views(session.connection(), rows), cursor


def show_record(database: Database, reader: Reader, record_id: str) -> AuditRecordOut:
    """One record with its current verdicts, every evaluation (with the pack version each used), its reviews
    and the legal holds that keep it; a failed read is logged too."""
    with database.session(write=True) as session:
        shown = get_shown(session, record_id, tenant_scope=reader.tenant_scope)
        log_access(session, reader, key=database.chain_key, action="show", target=record_id[:64],
                   result_count=0 if shown is None else 1, record_ids=[shown.record.id] if shown else None)
        if shown is not None:
            conn = session.connection()
            (out,) = record_views(conn, [shown])
            evaluations = evaluation_views(conn, evaluations_for(session, record_id))
            return out.model_copy(update={"evaluations": evaluations, "reviews": reviews_of(conn, record_id),
                                          "holds": holds_covering(conn, record_id)})
    # Raised outside the session block so the failed read's log entry is committed.
    raise RecordNotFound(f"no audit record {record_id!r}")


def evaluation_views(conn: Any, evaluations: Any) -> list[EvaluationOut]:
    versions = versions_by_hash(conn, {e.rule_pack_hash for e in evaluations if e.rule_pack_hash})
    return [EvaluationOut.model_validate(e).model_copy(update={"rule_pack_version": versions.get(e.rule_pack_hash)})
            for e in evaluations]


def export(database: Database, reader: Reader, filters: ExportFilters) -> Iterator[str]:
    """Check and log the export now (an export is a read even if cut short), then stream its lines lazily.
    Each page is logged with the ids it holds before its lines are yielded, so no exported record goes
    unlogged however early the reader stops."""
    check_tenant_filter(database, reader, filters, "export")
    if filters.cursor is not None:
        decode_cursor(filters.cursor)   # a bad cursor fails before the first byte
    export_id = new_id()
    logged = logged_filters(filters)
    with database.session(write=True) as session:
        log_access(session, reader, key=database.chain_key, action="export", target=export_id, filters=logged)

    def pages() -> Iterator[list[AuditRecordOut]]:
        with database.session() as session:   # keyset pages
            for rows in iter_records(session, filters, tenant_scope=reader.tenant_scope, batch_size=filters.limit):
                with database.session(write=True) as log_session:
                    log_access(log_session, reader, key=database.chain_key, action="export", target=export_id,
                               result_count=len(rows), record_ids=[row.record.id for row in rows])
                yield record_views(session.connection(), rows)

    return export_lines(pages(), filters.format)


def verify(database: Database, reader: Reader, *, hmac_key: bytes, witness: Witness | None = None,
           mode: VerifyMode = "full") -> ChainReport:
    """Verify every ledger in one snapshot (and, given a witness, that the store still holds what the witness
    saw), and log that the reader did. `incremental` starts each ledger at its last verified checkpoint."""
    report = verify_store(database, hmac_key=hmac_key, witness=witness, mode=mode)
    with database.session(write=True) as session:
        log_access(session, reader, key=database.chain_key, action="verify", result_count=report.records_checked,
                   filters={"mode": mode})
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


__all__ = ["RecordNotFound", "TenantNotAllowed", "export", "list_page", "scoped_report", "show_record", "verify"]
