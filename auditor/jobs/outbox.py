"""The outbox dispatcher: publishes scoring work that `trail.records.append_record` wrote in the record's commit.

Safe to run in several processes at once: rows are claimed with SELECT ... FOR UPDATE SKIP LOCKED on
PostgreSQL (two dispatchers never publish the same row in the same pass) and under SQLite's single
writer lock (BEGIN IMMEDIATE) on SQLite. A published row moves to `outbox_inflight` until the scoring
task commits its evaluation and deletes it there (`acknowledge_hook`). Rows still in flight after
`redeliver_after_s` are published again: that is how a Redis restart, which drops queued messages,
loses nothing. Duplicate deliveries are harmless because scoring is idempotent. Rows are claimed
(committed as in flight) before they are published, so a fast task always finds its row to
acknowledge; rows whose publish fails are handed back at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from auditor.jobs.models import OutboxInflight
from auditor.jobs.scoring import Scored
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.models import Evaluation, OutboxMessage
from auditor.trail.records import SCORING_TOPIC

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
    # Claim first (commit the in-flight rows), publish after: a fast task must find its in-flight row
    # to acknowledge it, and other dispatchers must not claim the same rows meanwhile.
    now = utcnow()
    with database.session(write=True) as session:
        rows = session.execute(
            select(OutboxMessage.id, OutboxMessage.record_id)
            .where(OutboxMessage.dispatched_at.is_(None), OutboxMessage.topic == SCORING_TOPIC)
            .order_by(OutboxMessage.id).limit(batch_size)
            .with_for_update(skip_locked=True)
        ).all()
        ids = [outbox_id for outbox_id, _ in rows]
        if ids:
            session.execute(update(OutboxMessage).where(OutboxMessage.id.in_(ids))
                            .values(dispatched_at=now, attempts=OutboxMessage.attempts + 1))
            session.execute(insert(OutboxInflight), [{"outbox_id": i, "dispatched_at": now, "deliveries": 1}
                                                     for i in ids])
    for position, (outbox_id, record_id) in enumerate(rows):
        try:
            publish(outbox_id, record_id)
        except Exception:   # broker down: hand the unpublished rest back for the next pass
            _unclaim(database, ids[position:])
            return False
        result.published += 1
    return True


def _unclaim(database: Database, ids: list[int]) -> None:
    with database.session(write=True) as session:
        session.execute(delete(OutboxInflight).where(OutboxInflight.outbox_id.in_(ids)))
        # `attempts` keeps counting the failed publish: it tells how often delivery was tried.
        session.execute(update(OutboxMessage).where(OutboxMessage.id.in_(ids)).values(dispatched_at=None))


def _redeliver_stale(database: Database, publish: Publish, batch_size: int, redeliver_after_s: float,
                     result: DispatchResult) -> bool:
    now = utcnow()
    cutoff = now - timedelta(seconds=redeliver_after_s)
    with database.session(write=True) as session:
        rows = session.execute(
            select(OutboxInflight.outbox_id, OutboxMessage.record_id, OutboxInflight.dispatched_at)
            .join(OutboxMessage, OutboxMessage.id == OutboxInflight.outbox_id)
            .where(OutboxInflight.dispatched_at <= cutoff)
            .order_by(OutboxInflight.dispatched_at).limit(batch_size)
            .with_for_update(of=OutboxInflight, skip_locked=True)
        ).all()
        ids = [row.outbox_id for row in rows]
        if ids:
            session.execute(update(OutboxInflight).where(OutboxInflight.outbox_id.in_(ids))
                            .values(dispatched_at=now, deliveries=OutboxInflight.deliveries + 1))
            session.execute(update(OutboxMessage).where(OutboxMessage.id.in_(ids))
                            .values(attempts=OutboxMessage.attempts + 1))
    for row in rows:
        try:
            publish(row.outbox_id, row.record_id)
        except Exception:
            # Still stale: put the old dispatch time back so the next pass tries again at once.
            with database.session(write=True) as session:
                for stale in rows[rows.index(row):]:
                    session.execute(update(OutboxInflight).where(OutboxInflight.outbox_id == stale.outbox_id)
                                    .values(dispatched_at=stale.dispatched_at))
            return False
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
    undispatched = session.execute(select(func.count()).select_from(OutboxMessage)
                                   .where(OutboxMessage.dispatched_at.is_(None))).scalar_one()
    inflight = session.execute(select(func.count()).select_from(OutboxInflight)).scalar_one()
    return {"undispatched": undispatched, "in_flight": inflight}


def oldest_pending_age_s(session: Session) -> float:
    """Seconds the oldest unacknowledged row (not yet published, or published and not yet scored) has waited
    since its record was committed; 0 when nothing waits. `/ready` degrades past AUDITOR_READY_MAX_OUTBOX_AGE_S."""
    from auditor.jobs.heartbeat import age_s

    undispatched = session.execute(select(OutboxMessage.created_at).where(OutboxMessage.dispatched_at.is_(None))
                                   .order_by(OutboxMessage.id).limit(1)).scalar_one_or_none()
    inflight = session.execute(select(func.min(OutboxMessage.created_at))
                               .join(OutboxInflight, OutboxInflight.outbox_id == OutboxMessage.id)).scalar_one_or_none()
    waiting = [age_s(moment) for moment in (undispatched, inflight) if moment is not None]
    return max(waiting, default=0.0)
