"""Freezing a re-audit job's records, in the background, one seq range at a time.

A job covers the records matching its filter (or its import) up to `max_seq`, the last record when it
was created. Planning walks (0, max_seq] in ranges of `RANGE_SEQS`: each range's matching record ids
become items and chunks in one commit (`planned_through` moves with them), and the new chunks are
enqueued at once, so scoring starts after the first range rather than after the last. Planning runs as
the job's chunk -1 (`PLAN_CHUNK`), so the chunk machinery redelivers it when its worker dies, and a
second delivery resumes from `planned_through`. Memory is bounded by one range's ids.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import func, select, update

from auditor.jobs.models import ImportedOutput, ReauditChunk, ReauditItem, ReauditJob
from auditor.jobs.task_queue import TaskQueue
from auditor.store.base import utcnow
from auditor.store.bulk import bulk_insert
from auditor.store.database import Database
from auditor.trail.models import AuditRecord, RecordVerdict
from auditor.trail.queries import filtered_query
from auditor.trail.schemas import AuditFilters

logger = logging.getLogger("auditor.jobs.reaudit")

RANGE_SEQS = 50_000


def plan_job(database: Database, queue: TaskQueue | None, job_id: str, *, range_seqs: int = RANGE_SEQS) -> int:
    """Freeze the job's remaining ranges; returns how many items were added. Stops early if the job is
    cancelled (resuming plans the rest)."""
    from auditor.jobs.reaudit_chunks import PLAN_CHUNK, finalize_if_complete

    added = 0
    while True:
        with database.session(write=True) as session:
            job = session.get(ReauditJob, job_id)
            if job is None or job.status != "running" or job.planned_at is not None:
                return added
            low = job.planned_through or 0
            high = min(low + range_seqs, job.max_seq or 0)
            chunks: list[int] = []
            if high > low:
                rows = session.execute(_range_query(job, low, high)).all()
                chunks = _freeze(session, job, rows)
                added += len(rows)
            done = high >= (job.max_seq or 0)
            session.execute(update(ReauditChunk).where(ReauditChunk.job_id == job_id, ReauditChunk.chunk == PLAN_CHUNK)
                            .values(heartbeat_at=utcnow(), finished_at=utcnow() if done else None))
            job.planned_through = high
            if done:
                job.planned_at = utcnow()
        for chunk in chunks:
            _enqueue(queue, job_id, chunk)
        if done:
            finalize_if_complete(database, job_id)   # an empty job ends here
            return added


def _range_query(job: ReauditJob, low: int, high: int) -> Any:
    if job.source == "import":
        return (select(AuditRecord.id, AuditRecord.tenant)
                .join(ImportedOutput, ImportedOutput.record_id == AuditRecord.id)
                .where(ImportedOutput.import_id == job.import_id, AuditRecord.seq > low, AuditRecord.seq <= high)
                .order_by(AuditRecord.seq))
    filters = AuditFilters(kind="record", **(job.filters or {}))
    return (filtered_query(filters, tenant_scope=job.tenant_scope)
            .where(RecordVerdict.seq > low, RecordVerdict.seq <= high)
            .with_only_columns(RecordVerdict.record_id, RecordVerdict.tenant)
            .order_by(None).order_by(RecordVerdict.seq))


def _freeze(session: Any, job: ReauditJob, rows: list[Any]) -> list[int]:
    """Items and chunk rows for one range (in the caller's transaction); returns the new chunk numbers."""
    if not rows:
        return []
    first_chunk = (session.execute(select(func.max(ReauditChunk.chunk)).where(ReauditChunk.job_id == job.id))
                   .scalar() or -1) + 1
    first_chunk = max(first_chunk, 0)
    conn = session.connection()
    bulk_insert(conn, ReauditItem.__table__, [
        {"job_id": job.id, "record_id": row[0], "chunk": first_chunk + index // job.chunk_size, "status": "pending"}
        for index, row in enumerate(rows)])
    chunks = list(range(first_chunk, first_chunk + (len(rows) + job.chunk_size - 1) // job.chunk_size))
    now = utcnow()
    bulk_insert(conn, ReauditChunk.__table__, [{"job_id": job.id, "chunk": c, "enqueued_at": now, "deliveries": 1}
                                               for c in chunks])
    job.total = (job.total or 0) + len(rows)
    # Who may read the job's summary (it quotes claims and evidence) depends on whose records it covers.
    job.tenants_covered = sorted(set(job.tenants_covered or []) | {row[1] for row in rows})
    return chunks


def _enqueue(queue: TaskQueue | None, job_id: str, chunk: int) -> None:
    if queue is None:
        return   # the sweeper sends chunks nobody enqueued (`requeue_stalled`)
    try:
        queue.enqueue_chunk(job_id, chunk)
    except Exception as exc:   # broker unreachable: the sweeper retries later
        logger.warning("re-audit %s: could not enqueue chunk %d (%s); will retry", job_id, chunk, exc)
