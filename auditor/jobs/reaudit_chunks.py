"""Running one chunk of a re-audit job, and finishing the job when nothing is pending.

A chunk task scores its pending items in batches; each batch's evaluations and item statuses commit
together, so a worker killed at any point loses only the batch in progress, and whoever runs the
chunk next skips what is done. The job is summarised and marked done by exactly one finisher
(a conditional UPDATE), whichever chunk ends last.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from auditor.jobs.models import ReauditChunk, ReauditItem, ReauditJob
from auditor.jobs.reaudit_summary import build_summary
from auditor.jobs.scoring import (
    CommitHook,
    Evaluator,
    Scored,
    ScoreRequest,
    record_failure,
    score_batch,
    score_record,
)
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.models import Evaluation

logger = logging.getLogger("auditor.jobs.reaudit")

_CANCEL_CHECK_INTERVAL_S = 0.5


@dataclass(slots=True)
class ChunkProgress:
    """Filled in while a chunk runs, so a wrapper interrupted mid-record knows which record it was."""

    current_record_id: str | None = None
    done: int = 0
    failed: int = 0
    not_applicable: int = 0     # text of no domain: scored, with nothing to verify
    already: int = 0
    cancelled: bool = False


@dataclass(slots=True)
class RecordRetry:
    """How often a record that raises (database hiccup, evaluator bug) is retried inside the chunk."""

    delays_s: Sequence[float] = (0.1, 0.5, 2.0)
    fatal: tuple[type[BaseException], ...] = field(default_factory=tuple)   # re-raised at once (soft time limit)
    # Records are committed in batches sized so one commit covers about `commit_every_s` of scoring
    # (at most `max_batch`): fewer commits, and a killed worker still loses well under a second of work.
    commit_every_s: float = 0.25
    max_batch: int = 50


def run_chunk(database: Database, evaluator: Evaluator, *, job_id: str, chunk: int,
              retry: RecordRetry | None = None, progress: ChunkProgress | None = None) -> ChunkProgress:
    """Score the chunk's pending items, committing each batch with its evaluations; then finish the job if complete."""
    retry = retry or RecordRetry()
    progress = progress or ChunkProgress()
    with database.session(write=True) as session:
        job = session.get(ReauditJob, job_id)
        if job is None or job.status != "running":
            progress.cancelled = job is not None and job.status == "cancelled"
            return progress
        job_created = job.created_at
        _heartbeat(session, job_id, chunk)
    with database.session() as session:
        items = session.execute(
            select(ReauditItem.id, ReauditItem.record_id)
            .where(ReauditItem.job_id == job_id, ReauditItem.chunk == chunk, ReauditItem.status == "pending")
            .order_by(ReauditItem.id)
        ).all()
        before = _previous_evaluations(session, [record_id for _, record_id in items], job_id, job_created)
    batch_size, position, last_check = 1, 0, time.monotonic()
    while position < len(items):
        if time.monotonic() - last_check > _CANCEL_CHECK_INTERVAL_S:
            last_check = time.monotonic()
            if _job_status(database, job_id) != "running":
                progress.cancelled = True
                return progress
        batch = items[position:position + batch_size]
        requests = [ScoreRequest(record_id, job_id, [_item_hook(item_id, before.get(record_id))])
                    for item_id, record_id in batch]
        started = time.monotonic()
        result = score_batch(database, evaluator, requests, fatal=retry.fatal,
                             before_each=lambda record_id: setattr(progress, "current_record_id", record_id),
                             on_batch_commit=lambda session: _heartbeat(session, job_id, chunk))
        outcomes = result.outcomes + [_score_with_retries(database, evaluator, request, retry)
                                      for request, _ in result.errors]
        for outcome in outcomes:
            if not outcome.created:
                progress.already += 1
            elif outcome.status == "done":
                progress.done += 1
            elif outcome.status == "not_applicable":
                progress.not_applicable += 1
            else:
                progress.failed += 1
        position += len(batch)
        per_record_s = max((time.monotonic() - started) / len(batch), 1e-4)
        batch_size = max(1, min(retry.max_batch, int(retry.commit_every_s / per_record_s)))
    progress.current_record_id = None
    with database.session(write=True) as session:
        session.execute(update(ReauditChunk).where(ReauditChunk.job_id == job_id, ReauditChunk.chunk == chunk)
                        .values(finished_at=utcnow()))
    finalize_if_complete(database, job_id)
    return progress


def _heartbeat(session: Session, job_id: str, chunk: int) -> None:
    session.execute(update(ReauditChunk).where(ReauditChunk.job_id == job_id, ReauditChunk.chunk == chunk)
                    .values(heartbeat_at=utcnow()))


def _score_with_retries(database: Database, evaluator: Evaluator, request: ScoreRequest, retry: RecordRetry) -> Any:
    for attempt in range(len(retry.delays_s) + 1):
        try:
            return score_record(database, evaluator, request)
        except retry.fatal:
            raise
        except Exception as exc:
            if attempt == len(retry.delays_s):
                reason = f"gave up after {attempt + 1} attempts: {type(exc).__name__}: {exc}"
                return record_failure(database, request, evaluator_version=evaluator.version, reason=reason)
            logger.warning("re-audit record %s attempt %d failed: %s", request.record_id, attempt + 1, exc)
            time.sleep(retry.delays_s[attempt])
    raise AssertionError("unreachable")


def fail_record(database: Database, evaluator_version: str, *, job_id: str, record_id: str, reason: str) -> None:
    """End one item as failed (e.g. it ran past the task's soft time limit) so the chunk can move on."""
    with database.session() as session:
        row = session.execute(select(ReauditItem.id, ReauditItem.chunk).where(
            ReauditItem.job_id == job_id, ReauditItem.record_id == record_id)).one_or_none()
    if row is None:
        return
    request = ScoreRequest(record_id, job_id, [_item_hook(row.id, None)])
    record_failure(database, request, evaluator_version=evaluator_version, reason=reason)


def fail_pending_in_chunk(database: Database, evaluator_version: str, *, job_id: str, chunk: int, reason: str) -> int:
    """Give up on a chunk that keeps failing: its pending items end as failed with the reason."""
    with database.session() as session:
        record_ids = list(session.execute(select(ReauditItem.record_id).where(
            ReauditItem.job_id == job_id, ReauditItem.chunk == chunk, ReauditItem.status == "pending")).scalars())
    for record_id in record_ids:
        fail_record(database, evaluator_version, job_id=job_id, record_id=record_id, reason=reason)
    finalize_if_complete(database, job_id)
    return len(record_ids)


def _item_hook(item_id: int, before_evaluation_id: str | None) -> CommitHook:
    def mark_item(session: Session, evaluation: Evaluation, scored: Scored | None) -> None:
        values: dict[str, Any] = {
            "status": evaluation.status, "evaluation_id": evaluation.id, "failure_reason": evaluation.failure_reason,
            "before_evaluation_id": before_evaluation_id, "finished_at": utcnow(),
        }
        if scored is not None:
            values["gate_action_after"] = scored.gate_action
        # Guarded on "pending": a second delivery must not overwrite the first one's bookkeeping.
        session.execute(update(ReauditItem).where(ReauditItem.id == item_id, ReauditItem.status == "pending")
                        .values(**values))

    return mark_item


def _previous_evaluations(session: Session, record_ids: list[str], job_id: str, before: datetime) -> dict[str, str]:
    """The latest successful evaluation of each record made before the job (its "before" state)."""
    if not record_ids:
        return {}
    rows = session.execute(
        select(Evaluation.record_id, Evaluation.id, Evaluation.created_at)
        .where(Evaluation.record_id.in_(record_ids), Evaluation.status == "done", Evaluation.created_at <= before,
               or_(Evaluation.job_id.is_(None), Evaluation.job_id != job_id))
        .order_by(Evaluation.created_at)
    ).all()
    return {record_id: evaluation_id for record_id, evaluation_id, _ in rows}   # later rows win


def _job_status(database: Database, job_id: str) -> str | None:
    with database.session() as session:
        return session.execute(select(ReauditJob.status).where(ReauditJob.id == job_id)).scalar()


def finalize_if_complete(database: Database, job_id: str) -> bool:
    """Summarise and mark done a running job with nothing pending. Only one concurrent caller wins."""
    with database.session() as session:
        job = session.get(ReauditJob, job_id)
        if job is None or job.status != "running" or _count(session, job_id, "pending") > 0:
            return False
        summary = build_summary(session, job)
    with database.session(write=True) as session:
        won = session.execute(
            update(ReauditJob).where(ReauditJob.id == job_id, ReauditJob.status == "running")
            .values(status="done", summary=summary, finished_at=utcnow())
        ).rowcount
    return bool(won)


def _count(session: Session, job_id: str, status: str) -> int:
    return session.execute(select(func.count()).select_from(ReauditItem)
                           .where(ReauditItem.job_id == job_id, ReauditItem.status == status)).scalar_one()
