"""Re-audit jobs: re-score a frozen set of stored records (a filter, or one JSONL import) in chunks.

A job is created in one commit (job row, one item per record, one row per chunk) and only then are
its chunks enqueued; `auditor.jobs.reaudit_chunks` runs a chunk and finishes the job. Originals are never
modified: a job only adds evaluation rows (job_id = the job's id). This module creates and steers
jobs, reports their progress, and re-enqueues chunks whose worker died or whose message was lost.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.orm import Session

from auditor.jobs.models import ImportBatch, ImportedOutput, ReauditChunk, ReauditItem, ReauditJob
from auditor.jobs.reaudit_chunks import fail_pending_in_chunk, finalize_if_complete
from auditor.jobs.reaudit_summary import build_summary
from auditor.jobs.task_queue import TaskQueue
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.access_log import Reader, log_access
from auditor.trail.models import AuditRecord
from auditor.trail.queries import filtered_query, plausible_id
from auditor.trail.schemas import AuditFilters, RecordFilter

logger = logging.getLogger("auditor.jobs.reaudit")

DEFAULT_CHUNK_SIZE = 100
RATE_WINDOW_S = 30.0
_INSERT_BATCH = 5000


class ReauditError(ValueError):
    """A re-audit request or state change that cannot be carried out."""


class ReauditNotFound(ReauditError):
    pass


class ReauditConflict(ReauditError):
    """The job is in a state that forbids the change (e.g. cancelling a finished job)."""


class ReauditFilter(RecordFilter):
    """Which stored records to re-score: the compliance filters, without paging."""

    def to_audit_filters(self) -> AuditFilters:
        return AuditFilters(kind="record", **self.model_dump(exclude_none=True))


# -- creating and steering jobs --------------------------------------------------------------------


def create_job(
    database: Database, *, tenant: str, tenant_scope: str | None, evaluator_version: str,
    filters: ReauditFilter | None = None, import_id: str | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> str:
    """Freeze the matching records into a new running job (one commit); returns its id. Enqueue with `start_job`."""
    if (filters is None) == (import_id is None):
        raise ReauditError("give exactly one of a record filter or an import id")
    if not 1 <= chunk_size <= 10_000:
        raise ReauditError("chunk_size must be between 1 and 10000")
    with database.session(write=True) as session:
        record_ids = _select_records(session, tenant_scope=tenant_scope, filters=filters, import_id=import_id)
        job = ReauditJob(
            tenant=tenant, tenant_scope=tenant_scope, source="records" if filters is not None else "import",
            filters=filters.model_dump(mode="json", exclude_none=True) if filters is not None else None,
            import_id=import_id, evaluator_version=evaluator_version, chunk_size=chunk_size,
            status="running", total=len(record_ids), created_at=utcnow(), started_at=utcnow(),
        )
        session.add(job)
        session.flush()
        for first in range(0, len(record_ids), _INSERT_BATCH):   # bounded statements for very large jobs
            session.execute(insert(ReauditItem), [
                {"job_id": job.id, "record_id": record_id, "chunk": index // chunk_size, "status": "pending"}
                for index, record_id in enumerate(record_ids[first:first + _INSERT_BATCH], start=first)
            ])
        # Who may read the job's summary (it quotes claims and evidence) depends on whose records it covers.
        job.tenants_covered = sorted(session.execute(
            select(AuditRecord.tenant).join(ReauditItem, ReauditItem.record_id == AuditRecord.id)
            .where(ReauditItem.job_id == job.id).distinct()).scalars())
        if record_ids:
            chunks = (len(record_ids) + chunk_size - 1) // chunk_size
            session.execute(insert(ReauditChunk), [
                {"job_id": job.id, "chunk": chunk, "enqueued_at": job.created_at, "deliveries": 1}
                for chunk in range(chunks)
            ])
        else:   # nothing matched: an empty, finished job is still an answer worth keeping
            job.status, job.finished_at = "done", utcnow()
            job.summary = build_summary(session, job)
        return job.id


def _select_records(session: Session, *, tenant_scope: str | None, filters: ReauditFilter | None,
                    import_id: str | None) -> list[str]:
    if filters is not None:
        query = filtered_query(filters.to_audit_filters(), tenant_scope=tenant_scope)
        query = query.with_only_columns(AuditRecord.id).order_by(None).order_by(AuditRecord.seq)
        return list(session.execute(query).scalars())
    batch = session.get(ImportBatch, import_id) if plausible_id(import_id or "") else None
    if batch is None or (tenant_scope is not None and batch.tenant != tenant_scope):
        raise ReauditNotFound(f"no import {import_id!r}")
    query = (select(ImportedOutput.record_id).where(ImportedOutput.import_id == import_id)
             .order_by(ImportedOutput.line))
    return list(session.execute(query).scalars())


def start_job(database: Database, queue: TaskQueue, job_id: str) -> int:
    """Enqueue every chunk of the job that still has pending items; returns how many were enqueued.

    A broker that is down is not an error here: the job is committed and `requeue_stalled` sends its
    chunks once the broker is back."""
    with database.session() as session:
        chunks = _chunks_with_pending(session, job_id)
    sent = 0
    for chunk in chunks:
        try:
            queue.enqueue_chunk(job_id, chunk)
        except Exception as exc:   # broker unreachable: the sweeper retries later
            logger.warning("re-audit %s: could not enqueue chunk %d (%s); will retry", job_id, chunk, exc)
            break
        sent += 1
    return sent


def _chunks_with_pending(session: Session, job_id: str) -> list[int]:
    query = (select(ReauditItem.chunk).where(ReauditItem.job_id == job_id, ReauditItem.status == "pending")
             .group_by(ReauditItem.chunk).order_by(ReauditItem.chunk))
    return list(session.execute(query).scalars())


def get_job(session: Session, job_id: str, *, tenant_scope: str | None) -> ReauditJob:
    """The job, if the caller may see it: admins see every job; anyone else only jobs of their own tenant that
    covered no other tenant's records (an admin's job over tenants A and B is not A's to read)."""
    job = session.get(ReauditJob, job_id) if plausible_id(job_id) else None
    if job is None or not _visible(job, tenant_scope):
        raise ReauditNotFound(f"no re-audit job {job_id!r}")
    return job


def _visible(job: ReauditJob, tenant_scope: str | None) -> bool:
    if tenant_scope is None:
        return True
    if job.tenant != tenant_scope:
        return False
    if job.tenants_covered is None:   # a job from before coverage was recorded: only if it was tenant-scoped
        return job.tenant_scope == tenant_scope
    return set(job.tenants_covered) <= {tenant_scope}


def cancel_job(database: Database, job_id: str, *, tenant_scope: str | None) -> None:
    """Stop handing out work; records already scored keep their evaluations. Idempotent."""
    with database.session(write=True) as session:
        job = get_job(session, job_id, tenant_scope=tenant_scope)
        if job.status == "done":
            raise ReauditConflict(f"re-audit job {job_id} has already finished")
        if job.status == "running":
            job.status, job.cancelled_at = "cancelled", utcnow()


def resume_job(database: Database, queue: TaskQueue, job_id: str, *, tenant_scope: str | None) -> int:
    """Continue a cancelled (or stalled) job from its pending items; returns the chunks enqueued."""
    with database.session(write=True) as session:
        job = get_job(session, job_id, tenant_scope=tenant_scope)
        if job.status == "done":
            raise ReauditConflict(f"re-audit job {job_id} has already finished")
        job.status, job.cancelled_at, job.started_at = "running", None, utcnow()
        session.execute(update(ReauditChunk)
                        .where(ReauditChunk.job_id == job_id, ReauditChunk.finished_at.is_(None))
                        .values(enqueued_at=utcnow(), heartbeat_at=None, deliveries=ReauditChunk.deliveries + 1))
    sent = start_job(database, queue, job_id)
    finalize_if_complete(database, job_id)
    return sent


def job_view(database: Database, reader: Reader, job_id: str, *, action: str | None = None) -> dict[str, Any]:
    """The job with its progress, as the reader may see it. Changes (`action`) and reads of a finished job's
    summary (it quotes records' claims) go to the access log; polls of a running job do not, so watching
    a job cannot flood the log."""
    with database.session() as session:
        job = session.get(ReauditJob, job_id) if plausible_id(job_id) else None
        if job is None or not _visible(job, reader.tenant_scope):
            with database.session(write=True) as log_session:   # a failed read is logged like a record's
                log_access(log_session, reader, key=database.chain_key, action=action or "reaudit_show",
                           target=job_id[:64], result_count=0)
            raise ReauditNotFound(f"no re-audit job {job_id!r}")
        view = {
            "id": job.id, "status": job.status, "source": job.source, "filter": job.filters,
            "import_id": job.import_id, "evaluator_version": job.evaluator_version, "created_at": job.created_at,
            "started_at": job.started_at, "cancelled_at": job.cancelled_at, "finished_at": job.finished_at,
            "progress": progress_of(session, job), "summary": job.summary,
        }
    if action is not None or view["summary"] is not None:
        # A write transaction of its own: on SQLite, upgrading the read above to a writer could hit
        # SQLITE_BUSY while workers commit evaluations.
        with database.session(write=True) as session:
            log_access(session, reader, key=database.chain_key, action=action or "reaudit_show", target=job_id, filters=view["filter"],
                       result_count=view["progress"]["total"])
    return view


# -- progress and recovery --------------------------------------------------------------------------


def progress_of(session: Session, job: ReauditJob, *, now: datetime | None = None) -> dict[str, Any]:
    """total / done / failed / not_applicable / pending, the recent rate (records per second) and the ETA in seconds."""
    now = now or utcnow()
    counts = dict(session.execute(select(ReauditItem.status, func.count()).where(ReauditItem.job_id == job.id)
                                  .group_by(ReauditItem.status)).all())
    pending = counts.get("pending", 0)
    started = _aware(job.started_at)
    window_start = max(started, now - timedelta(seconds=RATE_WINDOW_S))
    recent = session.execute(select(func.count()).select_from(ReauditItem).where(
        ReauditItem.job_id == job.id, ReauditItem.status != "pending", ReauditItem.finished_at >= window_start,
    )).scalar_one()
    elapsed = (now - window_start).total_seconds()
    rate = recent / elapsed if elapsed > 0 and job.status == "running" else 0.0
    return {
        "total": job.total, "done": counts.get("done", 0), "failed": counts.get("failed", 0),
        "not_applicable": counts.get("not_applicable", 0), "pending": pending,
        "rate_per_s": round(rate, 2), "eta_s": round(pending / rate, 1) if rate > 0 else None,
    }


def requeue_stalled(database: Database, queue: TaskQueue, *, stall_after_s: float = 300.0,
                    queued_after_s: float = 3600.0, max_deliveries: int = 10) -> int:
    """Re-enqueue chunks whose worker died (no heartbeat for `stall_after_s`) or whose message was lost
    (never started within `queued_after_s`); finish jobs whose last finisher died. Returns chunks sent.

    Chunks are claimed in one commit and published after it, as the outbox does: a broker call inside the
    transaction would hold SQLite's global write lock during network I/O. A chunk whose publish fails gets
    its previous state back, so the next sweep tries again at once."""
    now = utcnow()
    stalled = and_(ReauditChunk.heartbeat_at.is_not(None),
                   ReauditChunk.heartbeat_at <= now - timedelta(seconds=stall_after_s))
    lost = and_(ReauditChunk.heartbeat_at.is_(None), ReauditChunk.enqueued_at <= now - timedelta(seconds=queued_after_s))
    with database.session(write=True) as session:
        rows = session.execute(
            select(ReauditChunk.job_id, ReauditChunk.chunk, ReauditChunk.deliveries, ReauditChunk.enqueued_at,
                   ReauditChunk.heartbeat_at)
            .join(ReauditJob, ReauditJob.id == ReauditChunk.job_id)
            .where(ReauditJob.status == "running", ReauditChunk.finished_at.is_(None), or_(stalled, lost))
            .limit(500).with_for_update(of=ReauditChunk, skip_locked=True)
        ).all()
        claimed = [row for row in rows if row.deliveries < max_deliveries]
        for row in claimed:
            session.execute(update(ReauditChunk).where(ReauditChunk.job_id == row.job_id, ReauditChunk.chunk == row.chunk)
                            .values(enqueued_at=now, heartbeat_at=None, deliveries=row.deliveries + 1))
    sent = _publish_claimed(database, queue, claimed)
    for job_id, chunk, deliveries, _, _ in rows:
        if deliveries >= max_deliveries:
            evaluator_version = _evaluator_version(database, job_id)
            fail_pending_in_chunk(database, evaluator_version, job_id=job_id, chunk=chunk,
                                  reason=f"chunk {chunk} was delivered {deliveries} times without finishing")
    with database.session() as session:
        running = list(session.execute(select(ReauditJob.id).where(ReauditJob.status == "running")).scalars())
    for job_id in running:
        finalize_if_complete(database, job_id)
    return sent


def _publish_claimed(database: Database, queue: TaskQueue, claimed: list[Any]) -> int:
    for position, row in enumerate(claimed):
        try:
            queue.enqueue_chunk(row.job_id, row.chunk)
        except Exception as exc:
            logger.warning("re-audit %s: could not re-enqueue chunk %d (%s)", row.job_id, row.chunk, exc)
            with database.session(write=True) as session:
                for unsent in claimed[position:]:
                    session.execute(update(ReauditChunk)
                                    .where(ReauditChunk.job_id == unsent.job_id, ReauditChunk.chunk == unsent.chunk)
                                    .values(enqueued_at=unsent.enqueued_at, heartbeat_at=unsent.heartbeat_at,
                                            deliveries=unsent.deliveries))
            return position
    return len(claimed)


def _evaluator_version(database: Database, job_id: str) -> str:
    with database.session() as session:
        return session.execute(select(ReauditJob.evaluator_version).where(ReauditJob.id == job_id)).scalar_one()


def _aware(moment: datetime) -> datetime:
    """SQLite returns naive datetimes for timezone-aware columns; they were stored as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
