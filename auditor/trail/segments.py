"""Streamed output, committed before it is flushed: no byte reaches a client without a committed row.

A stream opens with a row of its own (a write, so a store that takes no writes fails the request with
503 before the first byte), then commits each released sentence but the last as a segment before the sentence is
sent. The request's chained record covers everything delivered (the last sentence leaves after it) and
deletes the segments in its own commit. If that record cannot be written (the store died mid-stream, the process was killed), the
segments stay, and `recover_interrupted_streams` turns them into a chained "error" record that says
what was delivered.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select

from auditor.store.base import utcnow
from auditor.store.database import ChainKey, Database
from auditor.trail.chain import sha256_text
from auditor.trail.models import AuditRecord, StreamSegment
from auditor.trail.records import AppendedRecord, NewRecord, append_batch, append_in_transaction


@dataclass(frozen=True, slots=True)
class StreamOpening:
    audit_id: str
    tenant: str
    content_mode: str                 # raw | redacted | hash: how segment text is stored
    details: dict[str, Any]           # what a recovered record needs: endpoint, intent, domain, model, key id, KV cache


def open_stream(database: Database, opening: StreamOpening, *, timeout_s: float) -> None:
    """Commit the stream's opening row (raises on a store that takes no writes)."""
    with database.write_connection(timeout_s=timeout_s) as conn:
        insert_opening(conn, opening)


def commit_segment(database: Database, opening: StreamOpening, index: int, text: str, *, timeout_s: float) -> None:
    """Commit one released piece (text in the form the content mode stores) before it is flushed."""
    with database.write_connection(timeout_s=timeout_s) as conn:
        insert_segment(conn, opening, index, text)


def insert_opening(conn: Connection, opening: StreamOpening) -> None:
    """The opening row, inside the caller's write transaction."""
    _insert(conn, opening.audit_id, 0, opening.tenant, opening.content_mode, None, opening.details)


def insert_segment(conn: Connection, opening: StreamOpening, index: int, text: str) -> None:
    """One released piece, inside the caller's write transaction."""
    _insert(conn, opening.audit_id, index, opening.tenant, opening.content_mode, text, None)


def _insert(conn: Connection, audit_id: str, index: int, tenant: str, mode: str, text: str | None,
            details: dict[str, Any] | None) -> None:
    stored = None if mode == "hash" else text
    conn.execute(insert(StreamSegment), {
        "audit_id": audit_id, "idx": index, "tenant": tenant, "content_mode": mode, "text": stored,
        "text_sha256": sha256_text(text) if text is not None else None, "details": details,
        "created_at": utcnow(),
    })


@dataclass(frozen=True, slots=True)
class ChainedRecordWrite:
    """A group-commit write (`auditor.trail.group_commit`): chain a request's record and drop the stream
    segments it now covers, in one transaction. Several ready together share one head lock and one insert."""

    record: NewRecord
    key: ChainKey

    def __call__(self, conn: Connection) -> AppendedRecord:
        appended = append_in_transaction(conn, self.record, key=self.key)
        release_segments(conn, self.record.id)
        return appended

    @staticmethod
    def combine(conn: Connection, writes: list[ChainedRecordWrite]) -> list[AppendedRecord]:
        if any(write.key != writes[0].key for write in writes):   # never with one store; kept exact regardless
            return [write(conn) for write in writes]
        appended = append_batch(conn, [write.record for write in writes], key=writes[0].key)
        conn.execute(delete(StreamSegment).where(StreamSegment.audit_id.in_([write.record.id for write in writes])))
        return appended


def release_segments(conn: Connection, audit_id: str) -> None:
    """Drop a stream's segments in the transaction that appends its record (the record now covers them)."""
    conn.execute(delete(StreamSegment).where(StreamSegment.audit_id == audit_id))


def recover_interrupted_streams(database: Database, *, idle_for_s: float = 300.0, limit: int = 100) -> list[str]:
    """Chain an "error" record for each stream whose segments have been idle for `idle_for_s` and that has
    no record: the delivered text comes from its committed segments. Returns the recovered audit ids."""
    cutoff = utcnow() - timedelta(seconds=idle_for_s)
    with database.engine.connect() as conn:
        idle = list(conn.execute(
            select(StreamSegment.audit_id).group_by(StreamSegment.audit_id)
            .having(func.max(StreamSegment.created_at) <= cutoff).limit(limit)).scalars())
    recovered = []
    for audit_id in idle:
        with database.write_connection() as conn:
            if conn.execute(select(AuditRecord.id).where(AuditRecord.id == audit_id)).first() is None:
                segments = conn.execute(select(StreamSegment.__table__).where(StreamSegment.audit_id == audit_id)
                                        .order_by(StreamSegment.idx)).all()
                if segments:
                    append_in_transaction(conn, _recovered_record(audit_id, segments), key=database.chain_key)
                    recovered.append(audit_id)
            release_segments(conn, audit_id)
    return recovered


def _recovered_record(audit_id: str, segments: list[Any]) -> NewRecord:
    opening = next((s for s in segments if s.idx == 0), segments[0])
    details = opening.details or {}
    pieces = [s for s in segments if s.idx > 0]
    delivered = None if opening.content_mode == "hash" else "".join(s.text or "" for s in pieces)
    return NewRecord(
        id=audit_id, tenant=opening.tenant, status="error", key_id=details.get("key_id"),
        request_id=details.get("request_id"), endpoint=details.get("endpoint"), intent=details.get("intent"),
        domain=details.get("domain"), model_id=details.get("model_id"), content_mode=opening.content_mode,
        delivered_output=delivered, finish_reason="abort",
        error=f"stream interrupted before its record was written; {len(pieces)} committed segment(s) recovered",
        details={"recovered_segments": [{"idx": s.idx, "sha256": s.text_sha256} for s in pieces],
                 "kv_cache": details.get("kv_cache"), "model_dtype": details.get("model_dtype")},
    )
