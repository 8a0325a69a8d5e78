"""Append to the audit trail. Plain typed functions; the inference path, imports and retention call them.

Appends are one transaction: the record, its outbox row, the chain head and (every N records) a
signed checkpoint commit together or not at all. Writers serialise on the chain head (a row lock
on PostgreSQL, BEGIN IMMEDIATE on SQLite), so seqs are gap-free across processes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Connection, insert

from auditor.store.base import new_id, utcnow
from auditor.store.database import ChainKey, Database
from auditor.trail.chain import chain_entries
from auditor.trail.ledgers import EVALUATIONS, RECORDS
from auditor.trail.models import AuditRecord, Evaluation, OutboxMessage

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


def append_record(database: Database, record: NewRecord) -> AppendedRecord:
    """Chain (with the store's chain key) and commit one record plus its outbox row. Raises on any database failure."""
    with database.write_connection() as conn:
        return append_in_transaction(conn, record, key=database.chain_key)


def append_in_transaction(conn: Connection, record: NewRecord, *, key: ChainKey) -> AppendedRecord:
    """Append inside the caller's write transaction (opened with `Database.write_connection`)."""
    values = _row_values(record)
    values["created_at"] = utcnow()
    (link,) = chain_entries(conn, RECORDS, [values], hmac_key=key.hmac_key, checkpoint_interval=key.checkpoint_interval)
    conn.execute(insert(AuditRecord), values)
    if record.kind == "record" and record.status == "completed" and record.output is not None:  # embeddings: no text
        conn.execute(insert(OutboxMessage), {
            "record_id": record.id, "topic": SCORING_TOPIC, "payload": {"record_id": record.id},
            "created_at": values["created_at"], "attempts": 0,
        })
    return AppendedRecord(record.id, link.seq, link.record_hash)


def _row_values(record: NewRecord) -> dict[str, Any]:
    values = asdict(record)
    RECORDS.fill_sensitive_digests(values)
    if record.content_mode == "hash":
        for text_field in RECORDS.sensitive_fields:
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


def seal_evaluations(conn: Connection, evaluations: list[Evaluation], key: ChainKey) -> None:
    """Chain new evaluation rows (before they are flushed, in the caller's write transaction): each gets
    its seq and hashes in the evaluations ledger, whose head and checkpoints move with them."""
    for evaluation in evaluations:
        evaluation.id = evaluation.id or new_id()
    values = [{column: getattr(evaluation, column) for column in (*EVALUATIONS.hashed_fields, *EVALUATIONS.optional_fields, "claims")}
              for evaluation in evaluations]
    chain_entries(conn, EVALUATIONS, values, hmac_key=key.hmac_key, checkpoint_interval=key.checkpoint_interval)
    for evaluation, chained in zip(evaluations, values, strict=True):
        for column in ("seq", "prev_hash", "content_digest", "record_hash", "claims_sha256"):
            setattr(evaluation, column, chained[column])
