"""Read the audit trail: the compliance filters as one query, keyset cursors, pages, single records.

The trail's readers (`auditor.trail.reads`) wrap these with access logging; re-audit jobs select
their records with the same `filtered_query`, so "what a list shows" and "what a job covers" agree.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Sequence

from sqlalchemy import Select, String, and_, cast, func, select
from sqlalchemy.orm import Session

from auditor.trail.domain_source import source_condition
from auditor.trail.models import AuditRecord, Evaluation
from auditor.trail.schemas import AuditFilters

MAX_SEQ = 2**63 - 1   # seqs are BIGINT: a cursor beyond it names no record and must not reach the driver
_ID = re.compile(r"^[\x21-\x7e]{1,64}$")


def plausible_id(value: str) -> bool:
    """Ids are printable ASCII up to 64 characters; anything else (NUL, surrogates, megabytes) names nothing
    and is answered without a query."""
    return bool(_ID.match(value))


class AuditQueryError(ValueError):
    """A filter or cursor the trail cannot be queried with."""


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, number = raw.partition(":")
        if prefix != "seq" or not number.isdigit() or not 0 < int(number) <= MAX_SEQ:
            raise ValueError(prefix)
        return int(number)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise AuditQueryError(f"invalid cursor {cursor!r}") from exc


def filtered_query(filters: AuditFilters, *, tenant_scope: str | None) -> Select[tuple[AuditRecord]]:
    """Records matching `filters`, newest first. `tenant_scope` None means all tenants (admin)."""
    query = select(AuditRecord)
    conditions = []
    tenant = tenant_scope if tenant_scope is not None else filters.tenant
    if tenant is not None:
        conditions.append(AuditRecord.tenant == tenant)
    if filters.since is not None:
        conditions.append(AuditRecord.created_at >= filters.since)
    if filters.until is not None:
        conditions.append(AuditRecord.created_at < filters.until)
    for column, value in (
        (AuditRecord.domain, filters.domain), (AuditRecord.intent, filters.intent),
        (AuditRecord.model_id, filters.model), (AuditRecord.gate_action, filters.gate_action),
        (AuditRecord.status, filters.status), (AuditRecord.kind, filters.kind),
    ):
        if value is not None:
            conditions.append(column == value)
    if filters.domain_source is not None:
        conditions.append(source_condition(filters.domain_source))
    if filters.has_contradicted is not None:
        conditions.append(AuditRecord.n_contradicted > 0 if filters.has_contradicted else AuditRecord.n_contradicted == 0)
    if filters.fer_min is not None:
        conditions.append(AuditRecord.fer >= filters.fer_min)
    if filters.fer_max is not None:
        conditions.append(AuditRecord.fer <= filters.fer_max)
    if filters.rule_id is not None:
        conditions.append(AuditRecord.rule_ids.contains(f" {filters.rule_id} ", autoescape=True))
    if filters.q is not None:
        claims_text = func.lower(cast(AuditRecord.claims, String))
        conditions.append(claims_text.contains(filters.q.lower(), autoescape=True))
    if filters.cursor is not None:
        conditions.append(AuditRecord.seq < decode_cursor(filters.cursor))
    return query.where(and_(*conditions)).order_by(AuditRecord.seq.desc())


def list_records(
    session: Session, filters: AuditFilters, *, tenant_scope: str | None
) -> tuple[list[AuditRecord], str | None]:
    """One page of records and the cursor of the next page (None on the last page)."""
    rows = list(session.execute(filtered_query(filters, tenant_scope=tenant_scope).limit(filters.limit + 1)).scalars())
    next_cursor = encode_cursor(rows[filters.limit - 1].seq) if len(rows) > filters.limit else None
    return rows[: filters.limit], next_cursor


def iter_records(
    session: Session, filters: AuditFilters, *, tenant_scope: str | None, batch_size: int = 500
) -> Iterator[AuditRecord]:
    """Every matching record, newest first, fetched in keyset-paginated batches (for export)."""
    page_filters = filters.model_copy(update={"limit": batch_size})
    while True:
        rows, cursor = list_records(session, page_filters, tenant_scope=tenant_scope)
        yield from rows
        if cursor is None:
            return
        page_filters = page_filters.model_copy(update={"cursor": cursor})


def get_record(session: Session, record_id: str, *, tenant_scope: str | None) -> AuditRecord | None:
    """The record, or None if absent or owned by another tenant (callers answer 404 either way)."""
    if not plausible_id(record_id):
        return None
    query = select(AuditRecord).where(AuditRecord.id == record_id)
    if tenant_scope is not None:
        query = query.where(AuditRecord.tenant == tenant_scope)
    return session.execute(query).scalar()


def evaluations_for(session: Session, record_id: str) -> Sequence[Evaluation]:
    query = select(Evaluation).where(Evaluation.record_id == record_id).order_by(Evaluation.created_at)
    return session.execute(query).scalars().all()
