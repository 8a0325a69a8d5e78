"""Append to and read from the audit trail. Plain typed functions; routers and the CLI call them.

Appends are one transaction: the record, its outbox row, the chain head and (every N records) a
signed checkpoint commit together or not at all. Writers serialise on the chain head (a row lock
on PostgreSQL, BEGIN IMMEDIATE on SQLite), so seqs are gap-free across processes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Connection, Select, String, and_, cast, func, insert, or_, select, update
from sqlalchemy.orm import Session

from auditor.store.database import Database
from auditor.trail import chain
from auditor.trail.models import (
    AccessLogEntry,
    AuditRecord,
    ChainHead,
    Checkpoint,
    Evaluation,
    OutboxMessage,
    new_id,
    utcnow,
)
from auditor.trail.schemas import AuditFilters

SCORING_TOPIC = "score"


class AuditQueryError(ValueError):
    """A filter or cursor the trail cannot be queried with."""


@dataclass(slots=True)
class NewRecord:
    """Everything a record holds before the chain assigns seq and hashes.

    Pass the text in the form the content mode stores (PII-redacted for "redacted"); with
    content_mode "hash" the text is hashed and dropped.
    """

    tenant: str
    status: str                      # completed | refused | blocked | error
    kind: str = "record"
    id: str = field(default_factory=new_id)
    key_id: str | None = None
    request_id: str | None = None
    endpoint: str | None = None
    intent: str | None = None
    domain: str | None = None
    model_id: str | None = None
    checkpoint_hash: str | None = None
    sampling_params: dict[str, Any] | None = None
    kg_version: str | None = None
    rule_pack_hash: str | None = None
    content_mode: str = "redacted"
    prompt: str | None = None
    output: str | None = None
    delivered_output: str | None = None
    claims: list[Any] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    timings: dict[str, Any] | None = None
    logprob_summary: dict[str, Any] | None = None
    kg_events: list[Any] | None = None
    gate_decisions: list[Any] = field(default_factory=list)
    gate_action: str | None = None
    n_supported: int = 0
    n_contradicted: int = 0
    n_unverifiable: int = 0
    fer: float | None = None
    finish_reason: str | None = None
    error: str | None = None
    details: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AppendedRecord:
    id: str
    seq: int
    record_hash: str


def append_record(
    database: Database, record: NewRecord, *, hmac_key: bytes, checkpoint_interval: int
) -> AppendedRecord:
    """Chain and commit one record (plus its outbox row). Raises on any database failure."""
    with database.write_connection() as conn:
        return append_in_transaction(conn, record, hmac_key=hmac_key, checkpoint_interval=checkpoint_interval)


def append_in_transaction(
    conn: Connection, record: NewRecord, *, hmac_key: bytes, checkpoint_interval: int
) -> AppendedRecord:
    """Append inside the caller's write transaction (opened with `Database.write_connection`)."""
    values = _row_values(record)
    head = conn.execute(
        select(ChainHead.seq, ChainHead.record_hash).where(ChainHead.id == 1).with_for_update()
    ).one_or_none()
    if head is None:  # a database created outside the migrations: start the chain here
        conn.execute(insert(ChainHead).values(id=1, seq=0, record_hash=chain.GENESIS_HASH))
        seq, prev = 1, chain.GENESIS_HASH
    else:
        seq, prev = head.seq + 1, head.record_hash
    values["created_at"] = utcnow()
    digest = chain.content_digest(values)
    hash_ = chain.record_hash(seq, prev, digest)
    conn.execute(
        insert(AuditRecord),
        {**values, "seq": seq, "prev_hash": prev, "content_digest": digest, "record_hash": hash_},
    )
    if record.kind == "record" and record.status == "completed":
        conn.execute(insert(OutboxMessage), {
            "record_id": record.id, "topic": SCORING_TOPIC, "payload": {"record_id": record.id},
            "created_at": values["created_at"], "attempts": 0,
        })
    conn.execute(update(ChainHead).where(ChainHead.id == 1).values(
        seq=seq, record_hash=hash_, signature=chain.sign_checkpoint(hmac_key, seq, hash_)))
    if seq % checkpoint_interval == 0:
        conn.execute(insert(Checkpoint), {
            "seq": seq, "record_hash": hash_, "signature": chain.sign_checkpoint(hmac_key, seq, hash_),
            "created_at": values["created_at"],
        })
    return AppendedRecord(record.id, seq, hash_)


def _row_values(record: NewRecord) -> dict[str, Any]:
    values = asdict(record)
    for text_field, digest_field in chain.SENSITIVE_FIELDS.items():
        values[digest_field] = chain.sensitive_digest(text_field, values[text_field])
        if record.content_mode == "hash":
            values[text_field] = None
    values["rule_ids"] = _rule_ids(record)
    return values


def _rule_ids(record: NewRecord) -> str | None:
    ids = [d.get("rule_id") for d in record.gate_decisions or []]
    for claim in record.claims or []:
        if isinstance(claim, dict):
            ids.append(claim.get("rule_id"))
            ids.extend(claim.get("rule_ids") or [])
    unique = sorted({i for i in ids if i})
    return f" {' '.join(unique)} " if unique else None


# -- reading ---------------------------------------------------------------------------------------
def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, number = raw.partition(":")
        if prefix != "seq":
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
    query = select(AuditRecord).where(AuditRecord.id == record_id)
    if tenant_scope is not None:
        query = query.where(AuditRecord.tenant == tenant_scope)
    return session.execute(query).scalar()


def evaluations_for(session: Session, record_id: str) -> Sequence[Evaluation]:
    query = select(Evaluation).where(Evaluation.record_id == record_id).order_by(Evaluation.created_at)
    return session.execute(query).scalars().all()


def log_access(
    session: Session, *, key_id: str | None, tenant: str, role: str, action: str,
    target: str | None = None, filters: dict[str, Any] | None = None, result_count: int | None = None,
) -> None:
    """Record a read of the trail (in the caller's transaction)."""
    session.add(AccessLogEntry(
        key_id=key_id, tenant=tenant, role=role, action=action, target=target,
        filters=filters, result_count=result_count,
    ))


def access_log_query(*, tenant_scope: str | None) -> Select[tuple[AccessLogEntry]]:
    query = select(AccessLogEntry).order_by(AccessLogEntry.id.desc())
    return query if tenant_scope is None else query.where(or_(AccessLogEntry.tenant == tenant_scope))
