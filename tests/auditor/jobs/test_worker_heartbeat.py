"""Integration: a real `celery worker` beats, and `/ready` of an API process in Celery mode follows it: alive while
it runs, degraded once it is killed (its row goes stale), and a clean stop removes its row.

Real Redis (AUDITOR_TEST_REDIS_URL) and the database of `test_worker_celery` (PostgreSQL when set, else SQLite)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from auditor.jobs.models import WorkerHeartbeat
from tests.auditor.conftest import make_settings
from tests.auditor.jobs.test_worker_celery import REDIS_URL, Workers, database_url, queue_name, workers  # noqa: F401

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not REDIS_URL, reason="AUDITOR_TEST_REDIS_URL is not set (e.g. redis://127.0.0.1:6379/15)"),
]


def _wait_for(condition: Callable[[], bool], what: str, pool: Workers, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{pool.logs()}")
        time.sleep(0.1)


def test_ready_follows_a_real_celery_workers_heartbeat(database_url: str, workers: Workers,  # noqa: F811
                                                       app_factory) -> None:
    client = app_factory(settings=make_settings(database_url, redis_url=REDIS_URL, ready_max_heartbeat_age_s=3.0))

    def scoring() -> dict[str, Any]:
        response = client.get("/ready")
        assert response.status_code == 200, response.text
        return response.json()["scoring"]

    def rows() -> int:
        with client.app.state.services.database.session() as session:
            return session.execute(select(func.count()).select_from(WorkerHeartbeat)).scalar_one()

    assert scoring()["worker"] == "none"
    killed = workers.start("killed", AUDITOR_WORKER_HEARTBEAT_INTERVAL_S="0.5")
    _wait_for(lambda: scoring()["worker"] == "alive", "the worker's first heartbeat", workers)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=15)
    _wait_for(lambda: scoring()["worker"] == "stale", "the killed worker's heartbeat to go stale", workers)
    body = client.get("/ready").json()
    assert body["ready"] is True and body["status"] == "degraded"
    assert any("Celery worker heartbeat" in reason for reason in body["reasons"])
    assert rows() == 1   # a killed worker leaves its row behind, stale

    stopped = workers.start("stopped", AUDITOR_WORKER_HEARTBEAT_INTERVAL_S="0.5")
    _wait_for(lambda: scoring()["worker"] == "alive", "the second worker's heartbeat", workers)
    assert rows() == 2
    stopped.terminate()   # warm shutdown: the worker removes its own row
    stopped.wait(timeout=30)
    assert rows() == 1
