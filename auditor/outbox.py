"""The outbox dispatcher: publishes scoring work that `audit_log.append_record` wrote in the record's commit.

Safe to run in several processes at once: rows are claimed with SELECT ... FOR UPDATE SKIP LOCKED on
PostgreSQL (two dispatchers never publish the same row in the same pass) and under SQLite's single
writer lock (BEGIN IMMEDIATE) on SQLite. A published row moves to `outbox_inflight` until the scoring
task commits its evaluation and deletes it there (`acknowledge_hook`). Rows still in flight after
`redeliver_after_s` are published again: that is how a Redis restart, which drops queued messages,
loses nothing. Duplicate deliveries are harmless because scoring is idempotent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from auditor.audit_log import SCORING_TOPIC
from auditor.db import Database
from auditor.jobs_models import OutboxInflight
from auditor.models import Evaluation, OutboxMessage, utcnow
from auditor.scoring import Scored, write_session

# publish(outbox_id, record_id): hand one scoring task to the queue; raises if the broker is unreachable.
Publish = Callable[[int, str], None]


@dataclass(slots=True)
class DispatchResult:
    published: int = 0      # first deliveries
    redelivered: int = 0    # in flight too long: published again
    failed: bool = False    # the broker refused a publish; the rest waits for the next pass


def dispatch_once(database: Database, publish: Publish, *, batch_size: int = 500,
                  redeliver_after_s: float = 300.0) -> DispatchResult:
    """One pass: publish up to `batch_size` new rows, then re-publish up to `batch_size` stale in-flight rows."""
    result = DispatchResult()
    result.failed = not _publish_new(database, publish, batch_size, result)
    if not result.failed:
        result.failed = not _redeliver_stale(database, publish, batch_size, redeliver_after_s, result)
    return result


def _publish_new(database: Database, publish: Publish, batch_size: int, result: DispatchResult) -> bool:
    with write_session(database) as session:
        rows = session.execute(
            select(OutboxMessage.id, OutboxMessage.record_id)
            .where(OutboxMessage.dispatched_at.is_(None), OutboxMessage.topic == SCORING_TOPIC)
            .order_by(OutboxMessage.id).limit(batch_size)
            .with_for_update(skip_locked=True)
        ).all()
        for outbox_id, record_id in rows:
            try:
                publish(outbox_id, record_id)
            except Exception:   # broker down: keep what was published, stop this pass
                return False
            now = utcnow()
            session.execute(update(OutboxMessage).where(OutboxMessage.id == outbox_id)
                            .values(dispatched_at=now, attempts=OutboxMessage.attempts + 1))
            session.merge(OutboxInflight(outbox_id=outbox_id, dispatched_at=now, deliveries=1))
            session.flush()   # committed with the pass; a crash before commit only causes a re-publish
            result.published += 1
    return True


def _redeliver_stale(database: Database, publish: Publish, batch_size: int, redeliver_after_s: float,
                     result: DispatchResult) -> bool:
    cutoff = utcnow() - timedelta(seconds=redeliver_after_s)
    with write_session(database) as session:
        rows = session.execute(
            select(OutboxInflight.outbox_id, OutboxMessage.record_id)
            .join(OutboxMessage, OutboxMessage.id == OutboxInflight.outbox_id)
            .where(OutboxInflight.dispatched_at <= cutoff)
            .order_by(OutboxInflight.dispatched_at).limit(batch_size)
            .with_for_update(of=OutboxInflight, skip_locked=True)
        ).all()
        for outbox_id, record_id in rows:
            try:
                publish(outbox_id, record_id)
            except Exception:
                return False
            now = utcnow()
            session.execute(update(OutboxInflight).where(OutboxInflight.outbox_id == outbox_id)
                            .values(dispatched_at=now, deliveries=OutboxInflight.deliveries + 1))
            session.execute(update(OutboxMessage).where(OutboxMessage.id == outbox_id)
                            .values(attempts=OutboxMessage.attempts + 1))
            result.redelivered += 1
    return True


def acknowledge_hook(outbox_id: int | None) -> Callable[[Session, Evaluation, Scored | None], None]:
    """A scoring commit hook that takes the outbox row out of flight (in the evaluation's transaction)."""

    def acknowledge(session: Session, _evaluation: Evaluation, _scored: Scored | None) -> None:
        if outbox_id is not None:
            session.execute(delete(OutboxInflight).where(OutboxInflight.outbox_id == outbox_id))

    return acknowledge


def backlog(session: Session) -> dict[str, int]:
    """How much scoring work waits: not yet published, and published but not acknowledged."""
    from sqlalchemy import func

    undispatched = session.execute(select(func.count()).select_from(OutboxMessage)
                                   .where(OutboxMessage.dispatched_at.is_(None))).scalar_one()
    inflight = session.execute(select(func.count()).select_from(OutboxInflight)).scalar_one()
    return {"undispatched": undispatched, "in_flight": inflight}
