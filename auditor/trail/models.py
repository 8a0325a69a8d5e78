"""The audit schema (SQLAlchemy 2, `Mapped[...]`). Alembic revisions in `migrations/versions/` mirror it.

`audit_records` is append-only and hash-chained (see `auditor.trail.chain`). Everything derived later
(evaluations, purges, reads) lives in its own tables so no record is ever updated, with one exception:
a retention purge drops the sensitive text of an expired record and stamps `purged_at`; the chain
still verifies because the record hash covers only digests of that text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from auditor.store.base import Base, new_id, utcnow


class AuditRecord(Base):
    __tablename__ = "audit_records"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)   # the audit id
    seq: Mapped[int] = mapped_column(BigInteger, unique=True)                         # gap-free, from 1
    kind: Mapped[str] = mapped_column(String(16))             # record | purge
    prev_hash: Mapped[str] = mapped_column(String(64))
    content_digest: Mapped[str] = mapped_column(String(64))   # sha256 of the canonical content
    record_hash: Mapped[str] = mapped_column(String(64))      # sha256(seq:prev_hash:content_digest)
    created_at: Mapped[datetime]

    tenant: Mapped[str] = mapped_column(String(128), index=True)
    key_id: Mapped[str | None] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(128), index=True)
    endpoint: Mapped[str | None] = mapped_column(String(32))
    intent: Mapped[str | None] = mapped_column(String(64), index=True)
    domain: Mapped[str | None] = mapped_column(String(64), index=True)
    model_id: Mapped[str | None] = mapped_column(String(256), index=True)
    checkpoint_hash: Mapped[str | None] = mapped_column(String(128))
    sampling_params: Mapped[dict[str, Any] | None]
    kg_version: Mapped[str | None] = mapped_column(String(64))
    rule_pack_hash: Mapped[str | None] = mapped_column(String(64))
    content_mode: Mapped[str] = mapped_column(String(16))     # raw | redacted | hash

    # Sensitive content: nullable (hash-only mode, purge); each has a digest that the chain covers.
    prompt: Mapped[str | None] = mapped_column(Text)
    prompt_sha256: Mapped[str | None] = mapped_column(String(64))
    output: Mapped[str | None] = mapped_column(Text)                  # what the model generated
    output_sha256: Mapped[str | None] = mapped_column(String(64))
    delivered_output: Mapped[str | None] = mapped_column(Text)        # what the client received
    delivered_sha256: Mapped[str | None] = mapped_column(String(64))
    claims: Mapped[list[Any] | None]                                  # inline validator claims + evidence
    claims_sha256: Mapped[str | None] = mapped_column(String(64))

    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    timings: Mapped[dict[str, Any] | None]
    logprob_summary: Mapped[dict[str, Any] | None]
    kg_events: Mapped[list[Any] | None]
    gate_decisions: Mapped[list[Any] | None]
    gate_action: Mapped[str | None] = mapped_column(String(16), index=True)  # allow|annotate|redact|block|refuse
    rule_ids: Mapped[str | None] = mapped_column(Text)        # " id1 id2 " for rule-id filters
    n_supported: Mapped[int] = mapped_column(Integer, default=0)
    n_contradicted: Mapped[int] = mapped_column(Integer, default=0)
    n_unverifiable: Mapped[int] = mapped_column(Integer, default=0)
    fer: Mapped[float | None] = mapped_column(Float)
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), index=True)   # completed | refused | blocked | error
    error: Mapped[str | None] = mapped_column(Text)
    details: Mapped[dict[str, Any] | None]                    # kind-specific payload (e.g. a purge's ids)

    # Not covered by the hash: set only by a retention purge, which is itself a chained record.
    purged_at: Mapped[datetime | None]

    __table_args__ = (Index("ix_audit_records_created_at", "created_at"),)


class ChainHead(Base):
    """One row per ledger (`id` is the ledger's number, see `auditor.trail.ledgers`): its last seq and hash.
    Row-locked by writers on PostgreSQL.

    Signed on every append over (ledger, seq, hash, last checkpoint seq), so cutting entries off the end,
    rewinding the head or dropping the newest checkpoints needs the HMAC key."""

    __tablename__ = "chain_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, default=0)
    record_hash: Mapped[str] = mapped_column(String(64))
    signature: Mapped[str | None] = mapped_column(String(64))
    last_checkpoint_seq: Mapped[int | None] = mapped_column(BigInteger)


class Checkpoint(Base):
    """A signed (seq, hash) every N entries of a ledger. Each signature also covers the previous
    checkpoint's seq, so the checkpoints form a signed list: deleting one breaks the next."""

    __tablename__ = "checkpoints"

    ledger: Mapped[int] = mapped_column(Integer, primary_key=True, default=1)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    record_hash: Mapped[str] = mapped_column(String(64))
    signature: Mapped[str] = mapped_column(String(64))
    prev_seq: Mapped[int | None] = mapped_column(BigInteger)   # None: a checkpoint signed before 0.2 (legacy form)
    created_at: Mapped[datetime]


class Evaluation(Base):
    """One (re-)scoring of a record under named versions; never updated in place by the service.

    Hash-chained in its own ledger: for imported outputs the evaluations are the only verdicts there are.
    A purge drops `claims` (they quote the output) and keeps `claims_sha256`, as for records."""

    __tablename__ = "evaluations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    seq: Mapped[int | None] = mapped_column(BigInteger, unique=True)
    prev_hash: Mapped[str | None] = mapped_column(String(64))
    content_digest: Mapped[str | None] = mapped_column(String(64))
    record_hash: Mapped[str | None] = mapped_column(String(64))
    record_id: Mapped[str] = mapped_column(ForeignKey("audit_records.id"), index=True)
    job_id: Mapped[str | None] = mapped_column(String(64))
    evaluator_version: Mapped[str] = mapped_column(String(64))
    kg_version: Mapped[str | None] = mapped_column(String(64))
    rule_pack_hash: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))   # done | failed | not_applicable (text of no domain)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    claims: Mapped[list[Any] | None]
    fer: Mapped[float | None] = mapped_column(Float)
    citation_confidence: Mapped[float | None] = mapped_column(Float)
    joint_score: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    claims_sha256: Mapped[str | None] = mapped_column(String(64))
    purged_at: Mapped[datetime | None]   # set only by a chained purge, like a record's
    # The domains scored under and how they were found ({"domain_resolution": ...}, `auditor.trail.domain_source`);
    # hashed when set (revision 0004 added it: older rows have none and keep their digests).
    details: Mapped[dict[str, Any] | None]

    __table_args__ = (
        UniqueConstraint("record_id", "evaluator_version", "job_id"),
        # NULL job ids are distinct in the constraint above; this partial index (revision 0002) makes
        # live, job-less scoring idempotent too.
        Index("uq_evaluations_live_record_version", "record_id", "evaluator_version", unique=True,
              sqlite_where=text("job_id IS NULL"), postgresql_where=text("job_id IS NULL")),
        Index("ix_evaluations_rule_pack_hash", "rule_pack_hash"),
    )


class OutboxMessage(Base):
    """Transactional outbox: written in the same commit as its record, dispatched afterwards."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    record_id: Mapped[str] = mapped_column(ForeignKey("audit_records.id"), index=True)
    topic: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    dispatched_at: Mapped[datetime | None] = mapped_column(index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)


class AccessLogEntry(Base):
    """Who read what of the trail, and when (denied reads included). Hash-chained in its own ledger, so
    deleting or editing an entry is detected like a record's."""

    __tablename__ = "access_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    seq: Mapped[int | None] = mapped_column(BigInteger, unique=True)
    prev_hash: Mapped[str | None] = mapped_column(String(64))
    content_digest: Mapped[str | None] = mapped_column(String(64))
    record_hash: Mapped[str | None] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    key_id: Mapped[str | None] = mapped_column(String(64))
    tenant: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    action: Mapped[str] = mapped_column(String(32))      # list | show | export | verify
    target: Mapped[str | None] = mapped_column(String(64))
    filters: Mapped[dict[str, Any] | None]
    result_count: Mapped[int | None] = mapped_column(Integer)
    record_ids: Mapped[list[Any] | None]                  # the ids a list read showed


class StreamSegment(Base):
    """A streamed piece of output, committed before it is flushed to the client: no delivered byte is without
    a committed row. The request's chained record takes them over (and deletes them, in its commit); a stream
    that never got its record is recovered into an "error" record by `auditor.trail.segments`."""

    __tablename__ = "stream_segments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    audit_id: Mapped[str] = mapped_column(String(36), index=True)
    idx: Mapped[int] = mapped_column(Integer)               # 0: the stream's opening row, no text
    tenant: Mapped[str] = mapped_column(String(128))
    content_mode: Mapped[str] = mapped_column(String(16))
    text: Mapped[str | None] = mapped_column(Text)          # as the content mode stores it (None for "hash")
    text_sha256: Mapped[str | None] = mapped_column(String(64))
    details: Mapped[dict[str, Any] | None]                  # the opening row: endpoint, intent, domain, model
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)

    __table_args__ = (UniqueConstraint("audit_id", "idx"),)


class LegalHold(Base):
    """Exempts matching records from retention purges until released. Placing and releasing are chained
    events (`auditor.trail.holds`); this row is their current state.

    A hold names a matter (the legal case it serves) and one scope: listed records (`legal_hold_records`),
    a record filter, or a whole tenant. Holds from before matters existed keep their tenant/domain/record
    columns and read as matter "legacy-<id>"."""

    __tablename__ = "legal_holds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    matter_id: Mapped[str | None] = mapped_column(String(128), index=True)
    tenant: Mapped[str | None] = mapped_column(String(128))
    domain: Mapped[str | None] = mapped_column(String(64))
    record_id: Mapped[str | None] = mapped_column(String(36))
    scope: Mapped[dict[str, Any] | None]                        # {"records": n} | {"filter": {...}} | {"tenant": t}
    reason: Mapped[str] = mapped_column(Text)
    placed_by: Mapped[dict[str, Any] | None]                    # key_id, tenant, role of whoever placed it
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    released_at: Mapped[datetime | None]
    released_by: Mapped[dict[str, Any] | None]
    release_reason: Mapped[str | None] = mapped_column(Text)


class LegalHoldRecord(Base):
    """The records a records-scoped hold names (one row each, so purges match them with an index)."""

    __tablename__ = "legal_hold_records"

    hold_id: Mapped[int] = mapped_column(ForeignKey("legal_holds.id"), primary_key=True)
    record_id: Mapped[str] = mapped_column(String(36), primary_key=True, index=True)


class TrailEvent(Base):
    """What people and the service did to the trail besides reading it: reviews, legal holds placed and
    released, rule packs activated, alerts fired, bundles issued. Hash-chained in its own ledger ("events"),
    never updated (a purge drops `note` and keeps `note_sha256`, as for records)."""

    __tablename__ = "trail_events"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    seq: Mapped[int] = mapped_column(BigInteger, unique=True)
    prev_hash: Mapped[str] = mapped_column(String(64))
    content_digest: Mapped[str] = mapped_column(String(64))
    record_hash: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(index=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)   # review | hold_placed | hold_released | ...
    key_id: Mapped[str | None] = mapped_column(String(64))
    tenant: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    record_id: Mapped[str | None] = mapped_column(String(36), index=True)
    subject: Mapped[str | None] = mapped_column(String(128), index=True)   # hold id, matter, domain, rule id
    payload: Mapped[dict[str, Any] | None]
    note: Mapped[str | None] = mapped_column(Text)              # free text a person wrote (may quote records)
    note_sha256: Mapped[str | None] = mapped_column(String(64))
    purged_at: Mapped[datetime | None]


class RecordVerdict(Base):
    """The current-verdict view: one row per record, derived from the record and its evaluations, never part
    of the chain (`auditor.trail.verdicts` writes it in the transactions that append records and evaluations,
    and can rebuild it from the chained rows). Lists, filters, exports, trends and review queues read it.

    The current verdicts are the record's latest evaluation under the active rule pack of its domain, else
    its latest evaluation under any pack, else the verdicts the output gate recorded inline."""

    __tablename__ = "record_verdicts"

    # No foreign key: the view is derived state, rebuilt from the chain; it must never stand in the way of
    # reading (or verifying) a store whose records someone tampered with.
    record_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    tenant: Mapped[str] = mapped_column(String(128))
    domain: Mapped[str | None] = mapped_column(String(64))
    intent: Mapped[str | None] = mapped_column(String(64))
    model_id: Mapped[str | None] = mapped_column(String(256))
    endpoint: Mapped[str | None] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    occurred_at: Mapped[datetime]                                # an import's own timestamp; else recorded_at
    recorded_at: Mapped[datetime]
    gate_action: Mapped[str | None] = mapped_column(String(16))  # what the gate did; None: never had a gate
    source: Mapped[str] = mapped_column(String(16))              # evaluation | inline | none
    evaluation_id: Mapped[str | None] = mapped_column(String(36))
    evaluated_at: Mapped[datetime | None]
    evaluator_version: Mapped[str | None] = mapped_column(String(64))
    rule_pack_hash: Mapped[str | None] = mapped_column(String(64))
    kg_version: Mapped[str | None] = mapped_column(String(64))
    n_supported: Mapped[int] = mapped_column(Integer, default=0)
    n_contradicted: Mapped[int] = mapped_column(Integer, default=0)
    n_unverifiable: Mapped[int] = mapped_column(Integer, default=0)
    fer: Mapped[float | None] = mapped_column(Float)
    citation_confidence: Mapped[float | None] = mapped_column(Float)
    joint_score: Mapped[float | None] = mapped_column(Float)
    implied_action: Mapped[str | None] = mapped_column(String(16))   # what the verdicts ask the gate to do
    max_severity: Mapped[str | None] = mapped_column(String(16))     # of the rules contradicted claims broke
    min_confidence: Mapped[float | None] = mapped_column(Float)
    rule_ids: Mapped[str | None] = mapped_column(Text)               # " id1 id2 ": gate decisions + claims
    search_text: Mapped[str | None] = mapped_column(Text)            # casefolded claim texts (purged with them)
    # server-side default only: a migration rebuilding the view as an older revision made it leaves it out
    n_fabrication: Mapped[int] = mapped_column(Integer, server_default="0")   # verdicts.is_fabrication
    reviewed_ref: Mapped[str | None] = mapped_column(String(36))     # the verdict set last reviewed
    disputed: Mapped[int] = mapped_column(Integer, default=0)        # claims disputed in that review

    __table_args__ = (
        Index("ix_record_verdicts_occurred", "occurred_at", "seq"),
        Index("ix_record_verdicts_domain_occurred", "domain", "occurred_at", "seq"),
        Index("ix_record_verdicts_tenant_occurred", "tenant", "occurred_at", "seq"),
        # PostgreSQL only (pg_trgm, revision 0005): the free-text filter as an index lookup.
        Index("ix_record_verdicts_search", "search_text", postgresql_using="gin",
              postgresql_ops={"search_text": "public.gin_trgm_ops"}).ddl_if(dialect="postgresql"),
    )


class AccessRead(Base):
    """Which records each access-log entry showed, one row each: "who read record X" is an index lookup.
    Derived from the chained entry's `record_ids` (or its `target` for a single-record read)."""

    __tablename__ = "access_reads"

    access_id: Mapped[int] = mapped_column(Integer, primary_key=True)   # no FK: derived, like the view
    record_id: Mapped[str] = mapped_column(String(36), primary_key=True, index=True)


class ChainVerification(Base):
    """Where the last successful verification of each ledger ended: the signed checkpoint an incremental
    verify starts from. Signed (HMAC), so someone without the key cannot move it forward past a forgery."""

    __tablename__ = "chain_verifications"

    ledger: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    record_hash: Mapped[str] = mapped_column(String(64))
    verified_at: Mapped[datetime]
    mode: Mapped[str] = mapped_column(String(16))          # full | incremental
    signature: Mapped[str] = mapped_column(String(64))


class Purge(Base):
    __tablename__ = "purges"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    purge_record_id: Mapped[str] = mapped_column(ForeignKey("audit_records.id"))
    records_purged: Mapped[int] = mapped_column(Integer)
    records_held: Mapped[int] = mapped_column(Integer)
    policy: Mapped[dict[str, Any]]
