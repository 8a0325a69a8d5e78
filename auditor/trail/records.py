"""Append to the audit trail. Plain typed functions; the inference path, imports and retention call them.

Appends are one transaction: the record, its outbox row, its row in the current-verdict view, the chain
head and (every N records) a signed checkpoint commit together or not at all. Writers serialise on the
chain head (a row lock on PostgreSQL, BEGIN IMMEDIATE on SQLite), so seqs are gap-free across processes.
Batches (`append_batch`: imports, bulk loads) chain many records under one head lock and, on PostgreSQL,
write them with COPY.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from auditor.store.base import new_id, utcnow
from auditor.store.bulk import bulk_insert
from auditor.store.database import ChainKey, Database
from auditor.trail import verdicts
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
    (appended,) = append_batch(conn, [record], key=key)
    return appended


def append_batch(conn: Connection, records: Sequence[NewRecord], *, key: ChainKey,
                 now: datetime | None = None) -> list[AppendedRecord]:
    """Chain and write records in the caller's write transaction, in order, under one head lock.

    `now` stamps `created_at` (default: the current time, one stamp per batch). Only bulk loaders that
    replay a trail's history pass it, in increasing order; the service never does."""
    stamp = now or utcnow()
    rows = []
    for record in records:
        values = _row_values(record)
        values["created_at"] = stamp
        rows.append(values)
    links = chain_entries(conn, RECORDS, rows, hmac_key=key.hmac_key, checkpoint_interval=key.checkpoint_interval)
    bulk_insert(conn, AuditRecord.__table__, rows)
    outbox = [{"record_id": r.id, "topic": SCORING_TOPIC, "payload": {"record_id": r.id}, "created_at": stamp,
               "attempts": 0} for r in records if r.kind == "record" and r.status == "completed"
              and r.output is not None]   # embeddings: no text to score
    if outbox:
        bulk_insert(conn, OutboxMessage.__table__, outbox)
    verdicts.add_records(conn, rows)
    return [AppendedRecord(r.id, link.seq, link.record_hash) for r, link in zip(records, links, strict=True)]


def _row_values(record: NewRecord) -> dict[str, Any]:
    # A shallow copy: `asdict` would deep-copy every claim and decision, the bulk of a bulk load's time.
    values = {f.name: getattr(record, f.name) for f in fields(record)}
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


def append_evaluations(conn: Connection, rows: Sequence[dict[str, Any]], *, key: ChainKey) -> None:
    """Chain and write evaluation rows (plain values, e.g. from a bulk load) in the caller's write
    transaction: the same ledger step as `seal_evaluations`, written with COPY on PostgreSQL. The caller
    moves the current-verdict view (`auditor.trail.verdicts.apply_evaluations`) in the same transaction."""
    for row in rows:
        row["id"] = row.get("id") or new_id()
    chain_entries(conn, EVALUATIONS, list(rows), hmac_key=key.hmac_key, checkpoint_interval=key.checkpoint_interval)
    bulk_insert(conn, Evaluation.__table__, rows)
