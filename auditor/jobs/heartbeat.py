"""Worker heartbeats: each scoring worker rewrites its row in `worker_heartbeats` every few seconds, so any
API process can tell whether scoring has a live worker (`/ready`, `auditor_worker_heartbeat_age_seconds`).

A Celery worker beats from a thread of its main process (started on `worker_ready`); the embedded worker
from its dispatcher thread. A clean stop deletes the row; a killed worker's row simply goes stale.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from auditor.jobs.models import WorkerHeartbeat
from auditor.store.base import utcnow
from auditor.store.database import Database

logger = logging.getLogger("auditor.jobs.heartbeat")


_FORGET_AFTER = timedelta(days=1)   # a killed worker's row is kept this long (it tells when scoring stopped)


def worker_id(kind: str) -> str:
    """kind:host:pid:nonce (the nonce: several apps in one process, e.g. tests, each have their own row)."""
    return f"{kind}:{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def beat(database: Database, worker: str, kind: str) -> None:
    """Record that `worker` is alive now (an update, else an insert: one writer per row, so no race)."""
    now = utcnow()
    with database.session(write=True) as session:
        updated = session.execute(update(WorkerHeartbeat).where(WorkerHeartbeat.worker_id == worker)
                                  .values(beat_at=now)).rowcount
        if not updated:   # a new worker: also the moment to drop the rows of workers killed long ago
            session.execute(delete(WorkerHeartbeat).where(WorkerHeartbeat.beat_at < now - _FORGET_AFTER))
            session.add(WorkerHeartbeat(worker_id=worker, kind=kind, started_at=now, beat_at=now))


def forget(database: Database, worker: str) -> None:
    with database.session(write=True) as session:
        session.execute(delete(WorkerHeartbeat).where(WorkerHeartbeat.worker_id == worker))


def newest_beat_age_s(session: Session, kind: str | None = None) -> float | None:
    """Seconds since the newest heartbeat (of `kind`, when given); None when no worker has ever beaten."""
    query = select(func.max(WorkerHeartbeat.beat_at))
    if kind is not None:
        query = query.where(WorkerHeartbeat.kind == kind)
    newest = session.execute(query).scalar_one_or_none()
    return None if newest is None else age_s(newest)


def age_s(moment: datetime) -> float:
    """Seconds since `moment` (SQLite hands back naive datetimes: they are UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (utcnow() - moment).total_seconds())


class HeartbeatThread:
    """Beats every `interval_s` on a daemon thread until stopped; a failed beat (store briefly away) is logged
    and retried at the next interval, and shows as a growing heartbeat age meanwhile."""

    def __init__(self, database: Database, kind: str, *, interval_s: float) -> None:
        self.database, self.kind, self.interval_s = database, kind, interval_s
        self.worker_id = worker_id(kind)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"auditor-{kind}-heartbeat", daemon=True)

    def start(self) -> HeartbeatThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=10)
        try:
            forget(self.database, self.worker_id)
        except Exception:   # the store may be gone at shutdown: the row then goes stale instead
            logger.warning("could not remove the heartbeat of %s", self.worker_id, exc_info=True)

    def _loop(self) -> None:
        while True:
            try:
                beat(self.database, self.worker_id, self.kind)
            except Exception:
                logger.warning("worker heartbeat failed", exc_info=True)
            if self._stop.wait(self.interval_s):
                return
