"""Integration: real Redis, real `celery worker` subprocesses, the real database.

- a worker killed with SIGKILL mid-job, another started: the job finishes, every record evaluated once;
- Redis loses its queued messages mid-run: re-running the dispatcher re-publishes what was not
  acknowledged and every record ends with exactly one evaluation;
- with no worker running the API keeps serving (inference and job creation); work waits, then runs.

Database: PostgreSQL (AUDITOR_TEST_POSTGRES_URL, one schema per test) when set, else a SQLite WAL file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from sqlalchemy import func, select, update

from auditor.jobs import outbox, reaudit
from auditor.jobs.models import OutboxInflight, ReauditChunk
from auditor.jobs.reaudit_plan import plan_job
from auditor.jobs.settings import WorkerSettings
from auditor.jobs.worker import CeleryTaskQueue, configure
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.models import Evaluation, OutboxMessage
from tests.auditor.conftest import POSTGRES_URL, TEST_HMAC_KEY, _fresh_postgres_schema, make_settings
from tests.auditor.scoring_doubles import append_output

REDIS_URL = os.environ.get("AUDITOR_TEST_REDIS_URL")
REPO = Path(__file__).resolve().parents[3]
CELERY = str(Path(sys.executable).with_name("celery"))

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not REDIS_URL, reason="AUDITOR_TEST_REDIS_URL is not set (e.g. redis://127.0.0.1:6379/15)"),
]


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    if POSTGRES_URL:
        yield from _fresh_postgres_schema()
    else:
        yield f"sqlite:///{tmp_path / 'audit.db'}"


@pytest.fixture
def queue_name() -> Iterator[str]:
    name = f"auditor-test-{uuid.uuid4().hex[:10]}"
    yield name
    redis.Redis.from_url(REDIS_URL).delete(name)


class Workers:
    """Starts `celery worker` subprocesses (solo pool: one process each) and always stops them."""

    def __init__(self, database_url: str, queue: str, log_dir: Path) -> None:
        self.database_url, self.queue, self.log_dir = database_url, queue, log_dir
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, **env: str) -> subprocess.Popen[bytes]:
        environment = {
            **os.environ, "AUDITOR_DATABASE_URL": self.database_url, "AUDITOR_REDIS_URL": REDIS_URL or "",
            "AUDITOR_ENVIRONMENT": "test", "AUDITOR_HMAC_KEY": TEST_HMAC_KEY, "AUDITOR_AUTO_MIGRATE": "false",
            "AUDITOR_WORKER_EVALUATOR": "tests.auditor.scoring_doubles:MarkerEvaluator",
            "AUDITOR_WORKER_QUEUE": self.queue, "PYTHONPATH": str(REPO), **env,
        }
        log = (self.log_dir / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [CELERY, "-A", "auditor.jobs.worker:celery_app", "worker", "--pool=solo", f"--queues={self.queue}",
             f"--hostname={name}-{self.queue}@%h", "--without-gossip", "--without-mingle", "--loglevel=warning"],
            cwd=REPO, env=environment, stdout=log, stderr=subprocess.STDOUT,
        )
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.log_dir.glob("*.log"))


@pytest.fixture
def workers(database_url: str, queue_name: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(database_url, queue_name, tmp_path)
    yield pool
    pool.stop_all()


def _queue(queue_name: str) -> CeleryTaskQueue:
    """A publisher with its own connection (a fresh one re-declares the queue after a Redis flush)."""
    app = configure(Celery("auditor-test"), redis_url=REDIS_URL, settings=WorkerSettings())
    return CeleryTaskQueue(app, queue=queue_name)


def _wait(condition: Callable[[], bool], what: str, workers: Workers, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{workers.logs()}")


def _scalar(database: Database, query) -> int:
    with database.session() as session:
        return session.execute(query).scalar_one()


def _job_state(database: Database, job_id: str) -> tuple[str, dict]:
    with database.session() as session:
        job = reaudit.get_job(session, job_id, tenant_scope=None)
        return job.status, reaudit.progress_of(session, job)


def _evaluations_per_record(database: Database, *, job_id: str | None) -> dict[str, int]:
    job_match = Evaluation.job_id.is_(None) if job_id is None else Evaluation.job_id == job_id
    with database.session() as session:
        rows = session.execute(select(Evaluation.record_id, func.count()).where(job_match)
                               .group_by(Evaluation.record_id)).all()
    return dict(rows)


def test_sigkilled_worker_mid_job_and_a_new_worker_evaluates_every_record_exactly_once(
        database: Database, workers: Workers, queue_name: str) -> None:
    records = [append_output(database, f"Statement {i}." + (" [false] Wrong." if i % 3 == 0 else ""))
               for i in range(40)]
    with database.session() as session:   # this test is about the job; keep live scoring out of the way
        session.execute(update(OutboxMessage).values(dispatched_at=utcnow()))
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="marker/1",
                                filters=reaudit.ReauditFilter(), chunk_size=10)
    plan_job(database, None, job_id)   # freeze its 40 records now, so the four chunks exist before the kill
    assert reaudit.start_job(database, _queue(queue_name), job_id) == 4
    recovery = {"AUDITOR_TEST_EVALUATOR_DELAY_S": "0.1", "AUDITOR_WORKER_DISPATCH_INTERVAL_S": "0.5",
                "AUDITOR_WORKER_CHUNK_STALL_AFTER_S": "2", "AUDITOR_WORKER_CHUNK_QUEUED_AFTER_S": "8"}

    first = workers.start("first", **recovery)
    _wait(lambda: _job_state(database, job_id)[1]["done"] >= 8, "the first worker to make progress", workers)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    done_at_kill = _job_state(database, job_id)[1]["done"]
    assert done_at_kill < 40, "the job finished before the kill; nothing was tested"

    workers.start("second", **recovery)
    _wait(lambda: _job_state(database, job_id)[0] == "done", "the second worker to finish the job", workers)

    status, progress = _job_state(database, job_id)
    assert (progress["done"], progress["failed"], progress["pending"]) == (40, 0, 0)
    assert _evaluations_per_record(database, job_id=job_id) == {r: 1 for r in records}
    redelivered = _scalar(database, select(func.max(ReauditChunk.deliveries)).where(ReauditChunk.job_id == job_id))
    assert redelivered >= 2, "no chunk was re-delivered: the kill did not interrupt work"


def test_redis_losing_its_messages_mid_run_loses_no_scoring_work(
        database: Database, workers: Workers, queue_name: str) -> None:
    records = [append_output(database, f"Statement {i}.") for i in range(40)]
    workers.start("scorer", AUDITOR_TEST_EVALUATOR_DELAY_S="0.05", AUDITOR_WORKER_DISPATCH_INTERVAL_S="0")
    assert outbox.dispatch_once(database, _queue(queue_name).enqueue_score).published == 40
    _wait(lambda: len(_evaluations_per_record(database, job_id=None)) >= 5, "some scoring", workers)

    redis.Redis.from_url(REDIS_URL).flushdb()   # a Redis restart without persistence: queued messages gone
    time.sleep(1.5)
    scored_before = len(_evaluations_per_record(database, job_id=None))
    assert scored_before < 40, "everything was scored before the flush; nothing was tested"
    assert _scalar(database, select(func.count()).select_from(OutboxInflight)) == 40 - scored_before

    result = outbox.dispatch_once(database, _queue(queue_name).enqueue_score, redeliver_after_s=0)
    assert result.redelivered == 40 - scored_before and not result.failed
    _wait(lambda: len(_evaluations_per_record(database, job_id=None)) == 40, "all records scored", workers)
    _wait(lambda: _scalar(database, select(func.count()).select_from(OutboxInflight)) == 0,
          "every outbox row acknowledged", workers)
    assert _evaluations_per_record(database, job_id=None) == {r: 1 for r in records}


def test_api_keeps_serving_while_workers_are_down_and_work_runs_when_one_starts(
        database: Database, database_url: str, workers: Workers, queue_name: str, app_factory, monkeypatch) -> None:
    from auditor.api import reaudits

    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:MarkerEvaluator")
    monkeypatch.setenv("AUDITOR_WORKER_QUEUE", queue_name)
    client = app_factory(settings=make_settings(database_url, redis_url=REDIS_URL, auto_migrate=False))
    client.app.include_router(reaudits.router)
    client.app.state.services.task_queue = _queue(queue_name)

    started = time.monotonic()
    chat = client.post("/v1/chat/completions", headers={"X-Domain": "finance"},
                       json={"model": "fake-model", "messages": [{"role": "user", "content": "Is gold a metal?"}]})
    assert chat.status_code == 200, chat.text
    audit_id = chat.headers["X-Audit-Id"]
    created = client.post("/v1/reaudits", json={"filter": {}, "chunk_size": 5})
    assert created.status_code == 202, created.text
    assert time.monotonic() - started < 10   # nothing waited for a worker
    job_id = created.json()["id"]
    time.sleep(0.5)
    waiting = client.get(f"/v1/reaudits/{job_id}").json()
    # Its records are frozen by a worker (planning is background work too): nothing yet, and nothing lost.
    assert waiting["status"] == "running" and waiting["planning"] and waiting["progress"]["total"] == 0
    assert client.get(f"/v1/audits/{audit_id}").json()["evaluations"] == []   # scoring lags

    workers.start("late", AUDITOR_WORKER_DISPATCH_INTERVAL_S="0.3")
    _wait(lambda: client.get(f"/v1/reaudits/{job_id}").json()["status"] == "done", "the job", workers)
    assert client.get(f"/v1/reaudits/{job_id}").json()["progress"]["done"] == 1
    _wait(lambda: len(client.get(f"/v1/audits/{audit_id}").json()["evaluations"]) == 2,
          "live scoring from the outbox", workers)
    kinds = sorted(e["job_id"] or "live" for e in client.get(f"/v1/audits/{audit_id}").json()["evaluations"])
    assert kinds == sorted([job_id, "live"])


def test_record_that_keeps_failing_ends_failed_with_its_reason_visible_through_the_api(
        database: Database, database_url: str, workers: Workers, queue_name: str, app_factory) -> None:
    good = append_output(database, "Rates rose in 2022.")
    bad = append_output(database, "This one [explode].")
    workers.start("retrying", AUDITOR_WORKER_DISPATCH_INTERVAL_S="0.3", AUDITOR_WORKER_MAX_RETRIES="2",
                  AUDITOR_WORKER_RETRY_BACKOFF_MAX_S="1")
    _wait(lambda: len(_evaluations_per_record(database, job_id=None)) == 2, "both records settled", workers)
    client = app_factory(settings=make_settings(database_url, auto_migrate=False))
    [failed] = client.get(f"/v1/audits/{bad}").json()["evaluations"]
    assert failed["status"] == "failed"
    assert failed["failure_reason"] == "gave up after 3 attempts: RuntimeError: evaluator crashed on this text"
    [scored] = client.get(f"/v1/audits/{good}").json()["evaluations"]
    assert scored["status"] == "done" and scored["fer"] == 0.0
    assert _scalar(database, select(func.count()).select_from(OutboxInflight)) == 0
