"""`/ready` tells the truth about what lags behind the answers (issue 42), and `/metrics` shows the same.

Two levels: 503 only where answering is impossible (store, engine: `test_operations`); 200 with
`status: "degraded"` and its reasons when scoring has no live worker, the outbox waits too long, or an
upstream keeps failing. Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from auditor.jobs.models import ReauditChunk, ReauditJob
from auditor.store.base import utcnow
from benchmarks.serve_process import free_port

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
# Celery mode: the API process neither dispatches nor scores; the workers (none here) would.
CELERY = {"redis_url": "redis://127.0.0.1:6379/15", "ready_max_heartbeat_age_s": 30.0}


@pytest.fixture
def app_database_url(database_url: str) -> str:
    return database_url


def samples(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(metrics.text) for s in family.samples}


def sample(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in found, f"{name}{labels} not exported"
    return found[key]


def put_heartbeat(client: TestClient, *, age_s: float, kind: str = "celery") -> None:
    from auditor.jobs.models import WorkerHeartbeat

    with client.app.state.services.database.session(write=True) as session:
        session.merge(WorkerHeartbeat(worker_id=f"{kind}:test-host:1", kind=kind, started_at=utcnow(),
                                      beat_at=utcnow() - timedelta(seconds=age_s)))


def ready(client: TestClient) -> dict[str, Any]:
    response = client.get("/ready")
    assert response.status_code == 200, response.text   # lagging scoring never takes the instance out
    body = response.json()
    assert body["ready"] is True
    assert body["status"] == ("degraded" if body["reasons"] else "ok")
    return body


def test_ready_is_ok_with_a_live_embedded_worker_that_beats(app_factory) -> None:
    client = app_factory()
    body = ready(client)
    assert body["status"] == "ok" and body["reasons"] == []
    assert body["scoring"]["mode"] == "embedded" and body["scoring"]["worker"] == "alive"
    assert body["scoring"]["heartbeat_age_s"] is not None and body["scoring"]["heartbeat_age_s"] < 30
    assert sample(samples(client), "auditor_worker_heartbeat_age_seconds", kind="embedded") < 30


def test_ready_is_degraded_when_the_embedded_worker_has_stopped(app_factory) -> None:
    client = app_factory()
    client.app.state.services.scoring_worker.stop()
    body = ready(client)
    assert body["status"] == "degraded"
    assert body["scoring"]["worker"] == "stopped"
    assert any("embedded worker is not running" in reason for reason in body["reasons"])


def test_ready_is_degraded_without_a_fresh_celery_heartbeat(app_factory) -> None:
    client = app_factory(overrides=CELERY)
    body = ready(client)
    assert body["scoring"] == {"mode": "celery", "heartbeat_age_s": None, "worker": "none"}
    assert any("no Celery worker" in reason for reason in body["reasons"])

    put_heartbeat(client, age_s=120)   # a worker that died two minutes ago
    body = ready(client)
    assert body["status"] == "degraded" and body["scoring"]["worker"] == "stale"
    assert any("heartbeat is 120s old" in reason for reason in body["reasons"]), body["reasons"]
    assert sample(samples(client), "auditor_worker_heartbeat_age_seconds", kind="celery") >= 120

    put_heartbeat(client, age_s=1)     # it beats again
    body = ready(client)
    assert body["scoring"]["worker"] == "alive"
    assert not any(reason.startswith("scoring") for reason in body["reasons"])


def test_ready_is_degraded_when_the_outbox_waits_past_its_limit(app_factory) -> None:
    client = app_factory(overrides={**CELERY, "ready_max_outbox_age_s": 300.0})
    put_heartbeat(client, age_s=1)
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200   # its scoring waits in the outbox
    body = ready(client)
    assert body["outbox"]["undispatched"] == 1 and body["outbox"]["oldest_age_s"] < 300
    assert not any(reason.startswith("outbox") for reason in body["reasons"])

    with client.app.state.services.database.engine.begin() as conn:   # ten minutes later, still unscored
        conn.execute(text("UPDATE outbox SET created_at = :then"), {"then": utcnow() - timedelta(seconds=600)})
    body = ready(client)
    assert body["status"] == "degraded"
    assert any(reason.startswith("outbox: oldest unscored record waits 600s") for reason in body["reasons"]), \
        body["reasons"]
    found = samples(client)
    assert sample(found, "auditor_outbox_depth", state="undispatched") == 1.0
    assert sample(found, "auditor_outbox_depth", state="in_flight") == 0.0
    assert 600 <= sample(found, "auditor_outbox_oldest_age_seconds") < 700


def test_the_embedded_worker_empties_the_outbox_and_the_gauges_say_so(app_factory) -> None:
    import time

    client = app_factory()
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
    deadline = time.monotonic() + 30
    while (found := samples(client)) and sample(found, "auditor_outbox_depth", state="undispatched") \
            + sample(found, "auditor_outbox_depth", state="in_flight") > 0:
        assert time.monotonic() < deadline, "the embedded worker never scored the record"
        time.sleep(0.2)
    assert sample(found, "auditor_outbox_oldest_age_seconds") == 0.0
    assert ready(client)["outbox"] == {"undispatched": 0, "in_flight": 0, "oldest_age_s": 0.0}


def test_reaudit_progress_gauges(app_factory) -> None:
    client = app_factory(overrides=CELERY)   # no sweeper in this process to touch the job
    found = samples(client)
    assert sample(found, "auditor_reaudit_jobs_running") == 0.0
    assert sample(found, "auditor_reaudit_chunks", state="total") == 0.0
    with client.app.state.services.database.session(write=True) as session:
        for status in ("running", "done"):
            job = ReauditJob(tenant="t", source="records", evaluator_version="v", chunk_size=2, status=status,
                             total=6)
            session.add(job)
            session.flush()
            for chunk in range(3):
                session.add(ReauditChunk(job_id=job.id, chunk=chunk, enqueued_at=utcnow(),
                                         finished_at=utcnow() if chunk == 0 or status == "done" else None))
    found = samples(client)
    assert sample(found, "auditor_reaudit_jobs_running") == 1.0
    assert sample(found, "auditor_reaudit_chunks", state="total") == 3.0   # the running job's only
    assert sample(found, "auditor_reaudit_chunks", state="done") == 1.0


def test_a_failing_upstream_degrades_ready_and_is_counted(app_factory) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"   # nothing listens: every request is upstream_unreachable
    client = app_factory(overrides={"models": {"up": {"upstream": {"base_url": closed, "model": "m",
                                                                  "connect_retries": 0}}}})
    request = {**CHAT, "model": "up"}
    for _ in range(2):
        assert client.post("/v1/chat/completions", json=request).status_code == 502
    body = ready(client)
    assert body["upstreams"]["up"] == {"status": "ok", "consecutive_failures": 2,
                                       "last_failure": "upstream_unreachable"}   # below the limit of 3
    assert client.post("/v1/chat/completions", json=request).status_code == 502
    body = ready(client)
    assert body["status"] == "degraded" and body["upstreams"]["up"]["status"] == "failing"
    assert any(reason.startswith("upstream up: last 3 requests failed") for reason in body["reasons"])
    found = samples(client)
    assert sample(found, "auditor_upstream_requests_total", upstream="up", status="upstream_unreachable") == 3.0
    assert sample(found, "auditor_upstream_request_seconds_count", upstream="up") == 3.0
    assert 0 < sample(found, "auditor_upstream_request_seconds_sum", upstream="up") < 30
