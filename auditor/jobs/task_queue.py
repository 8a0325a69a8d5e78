"""Where background work goes: Celery (when `AUDITOR_REDIS_URL` is set) or the in-process pool.

Both implementations take ids only; the work itself is done by the same service functions
(`auditor.jobs.scoring.score_record`, `auditor.jobs.reaudit_chunks.run_chunk`) below the wrapper.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol


class TaskQueue(Protocol):
    def enqueue_score(self, outbox_id: int, record_id: str) -> None:
        """Score one record for its outbox row; raises if the queue cannot take it."""

    def enqueue_chunk(self, job_id: str, chunk: int) -> None:
        """Run one chunk of a re-audit job; raises if the queue cannot take it."""


@lru_cache(maxsize=4)
def celery_queue(redis_url: str) -> TaskQueue:
    """A publisher to the workers behind `redis_url` (Celery is imported only when a broker is configured)."""
    from celery import Celery

    from auditor.jobs.settings import WorkerSettings
    from auditor.jobs.worker import CeleryTaskQueue, configure

    return CeleryTaskQueue(configure(Celery("auditor-api"), redis_url=redis_url, settings=WorkerSettings()))
