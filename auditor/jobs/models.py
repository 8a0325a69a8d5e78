"""Tables of the scoring and re-audit machinery (issue 6), on the audit schema's `Base`.

- `outbox_inflight`: outbox rows published to the broker but not yet acknowledged by a finished
  scoring task. A Redis restart loses the published message; the dispatcher re-publishes what is
  still here after `redeliver_after_s`, so nothing is lost (the task is idempotent).
- `reaudit_jobs` / `reaudit_items` / `reaudit_chunks`: a job's frozen list of records, split into
  chunks that are the unit of fan-out; item status is updated in the same commit as its evaluation.
- `imports` / `imported_outputs`: JSONL imports of external LLM outputs, appended to the audit trail
  as ordinary records (endpoint "import") so they can be scored and re-audited like our own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from auditor.store.base import Base, new_id, utcnow


class OutboxInflight(Base):
    __tablename__ = "outbox_inflight"

    outbox_id: Mapped[int] = mapped_column(ForeignKey("outbox.id"), primary_key=True)
    dispatched_at: Mapped[datetime] = mapped_column(index=True)
    deliveries: Mapped[int] = mapped_column(Integer, default=1)


class ReauditJob(Base):
    __tablename__ = "reaudit_jobs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant: Mapped[str] = mapped_column(String(128), index=True)          # who created it
    tenant_scope: Mapped[str | None] = mapped_column(String(128))         # None: all tenants (admin)
    tenants_covered: Mapped[list[Any] | None]                             # tenants whose records the job read
    source: Mapped[str] = mapped_column(String(16))                       # records | import
    rule_packs: Mapped[dict[str, Any] | None]                             # domain -> {version, hash} pinned at creation
    max_seq: Mapped[int | None] = mapped_column(BigInteger)               # records appended later are not covered
    planned_through: Mapped[int | None] = mapped_column(BigInteger)       # items frozen up to this seq so far
    planned_at: Mapped[datetime | None]                                   # every item frozen (None: still planning)
    filters: Mapped[dict[str, Any] | None]
    import_id: Mapped[str | None] = mapped_column(String(36))
    evaluator_version: Mapped[str] = mapped_column(String(64))
    chunk_size: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), index=True)           # running | cancelled | done
    total: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)          # reset on resume (rate window)
    cancelled_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    summary: Mapped[dict[str, Any] | None]


class ReauditItem(Base):
    __tablename__ = "reaudit_items"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("reaudit_jobs.id"))
    record_id: Mapped[str] = mapped_column(ForeignKey("audit_records.id"))
    chunk: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))                       # pending | done | failed
    evaluation_id: Mapped[str | None] = mapped_column(String(36))
    before_evaluation_id: Mapped[str | None] = mapped_column(String(36))  # None: the record's inline claims
    gate_action_after: Mapped[str | None] = mapped_column(String(16))
    failure_reason: Mapped[str | None] = mapped_column(Text)
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        UniqueConstraint("job_id", "record_id"),
        Index("ix_reaudit_items_job_chunk_status", "job_id", "chunk", "status"),
        Index("ix_reaudit_items_job_status_finished", "job_id", "status", "finished_at"),
    )


class ReauditChunk(Base):
    __tablename__ = "reaudit_chunks"

    job_id: Mapped[str] = mapped_column(ForeignKey("reaudit_jobs.id"), primary_key=True)
    chunk: Mapped[int] = mapped_column(Integer, primary_key=True)
    enqueued_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime | None]     # last record finished by whoever runs the chunk
    deliveries: Mapped[int] = mapped_column(Integer, default=1)
    finished_at: Mapped[datetime | None]


class ImportBatch(Base):
    __tablename__ = "imports"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    filename: Mapped[str] = mapped_column(String(512))
    sha256: Mapped[str] = mapped_column(String(64))
    strict: Mapped[bool] = mapped_column(Boolean)
    lines: Mapped[int] = mapped_column(Integer)
    imported: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[list[Any]]                   # [{"line": n, "message": ...}]
    status: Mapped[str] = mapped_column(String(16))   # importing | complete
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]


class ImportedOutput(Base):
    __tablename__ = "imported_outputs"

    import_id: Mapped[str] = mapped_column(ForeignKey("imports.id"), primary_key=True)
    line: Mapped[int] = mapped_column(Integer, primary_key=True)
    record_id: Mapped[str] = mapped_column(ForeignKey("audit_records.id"), unique=True)


class WorkerHeartbeat(Base):
    """One row per live scoring worker (a Celery worker's main process, or an API process's embedded worker),
    rewritten every `AUDITOR_WORKER_HEARTBEAT_INTERVAL_S` and deleted on a clean stop: `/ready` and the
    `auditor_worker_heartbeat_age_seconds` gauge read the newest (see `auditor.jobs.heartbeat`)."""

    __tablename__ = "worker_heartbeats"

    worker_id: Mapped[str] = mapped_column(String(128), primary_key=True)   # kind:host:pid
    kind: Mapped[str] = mapped_column(String(16))                            # celery | embedded
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    beat_at: Mapped[datetime] = mapped_column(index=True)
