"""Append to the audit trail. Plain typed functions; the inference path, imports and retention call them.

Appends are one transaction: the record, its outbox row, the chain head and (every N records) a
signed checkpoint commit together or not at all. Writers serialise on the chain head (a row lock
on PostgreSQL, BEGIN IMMEDIATE on SQLite), so seqs are gap-free across processes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Connection, insert, select, update

from auditor.store.base import new_id, utcnow
from auditor.store.database import Database
from auditor.trail import chain
from auditor.trail.models import AuditRecord, ChainHead, Checkpoint, OutboxMessage

SCORING_TOPIC = "score"


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
