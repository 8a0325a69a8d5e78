"""Findings 12-15 and 17: verification under concurrent writes, grammar compilation off the event loop,
no broker call inside a write transaction, bounded caches, the first-writer race, no leaked threads on a
failed startup, and purges that leave no copy of the content behind."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, text
from sqlalchemy.exc import OperationalError

from auditor.app import create_app
from tests.auditor.conftest import FakeEngine
from tests.security.conftest import HMAC_KEY, chat, settings_for

pytestmark = pytest.mark.timeout(120)


def test_finding_12_a_purge_landing_during_verify_raises_no_false_alarm(app_on, cli, store_url: str) -> None:
    from auditor.store.database import Database
    from auditor.trail.retention import purge_expired

    client = app_on(store_url)
    chat(client, 4, **{"X-Domain": "medical"})
    settings = settings_for(store_url, retention_days={"medical": 0})
    landed = threading.Event()

    def purge_between_statements(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # Right after verification has read which ids purges name, a purge commits on another connection.
        if not landed.is_set() and "kind" in statement and "details" in statement.lower():
            landed.set()
            purge_expired(Database.from_settings(settings), settings)

    event.listen(Engine, "after_cursor_execute", purge_between_statements)
    try:
        status, out, err = cli(store_url, "audit", "verify-chain")
    finally:
        event.remove(Engine, "after_cursor_execute", purge_between_statements)
    assert landed.is_set()
    assert status == 0, out + err
    assert cli(store_url, "audit", "verify-chain")[0] == 0   # and the purge itself verifies afterwards


def test_finding_13_request_preparation_runs_off_the_event_loop_under_the_engine_lock() -> None:
    from engine.async_engine import AsyncLLMEngine
    from engine.sampling_params import SamplingParams

    seen: dict[str, Any] = {}

    class RecordingEngine:
        def prepare_request(self, request_id: str, prompt: Any, params: Any, **_: Any) -> Any:
            seen["thread"] = threading.get_ident()
            seen["locked"] = front._engine_lock.locked()
            raise ValueError("stop here")   # preparation is all this test looks at

    front = AsyncLLMEngine(RecordingEngine())   # type: ignore[arg-type]

    async def run() -> None:
        front._loop_task = asyncio.get_running_loop().create_future()   # no step loop needed
        seen["loop_thread"] = threading.get_ident()
        with pytest.raises(ValueError):
            async for _ in front.generate("hi", SamplingParams(), request_id="r1"):
                pass

    asyncio.run(run())
    assert seen["thread"] != seen["loop_thread"] and seen["locked"] is True


def test_finding_14_the_sweeper_publishes_with_no_write_transaction_open(app_on, sql, sqlite_store: str) -> None:
    from auditor.jobs.reaudit import requeue_stalled
    from auditor.jobs.reaudit_plan import plan_job

    client = app_on(sqlite_store)
    chat(client, 3)
    services = client.app.state.services
    held: list[tuple[str, int]] = []

    class HoldingQueue:
        def enqueue_score(self, outbox_id: int, record_id: str) -> None:
            pass

        def enqueue_chunk(self, job_id: str, chunk: int) -> None:
            held.append((job_id, chunk))

    services.task_queue = HoldingQueue()
    job = client.post("/v1/reaudits", json={"filter": {}, "chunk_size": 1}).json()
    plan_job(services.database, None, job["id"])   # freeze its records (the held queue kept the planning task)
    with sql(sqlite_store).begin() as conn:   # every chunk looks lost: enqueued long ago, never started
        conn.execute(text("UPDATE reaudit_chunks SET enqueued_at = '2000-01-01 00:00:00.000000', heartbeat_at = NULL"))
    path = sqlite_store.removeprefix("sqlite:///")
    lock_free: list[bool] = []

    class ProbingQueue(HoldingQueue):
        def enqueue_chunk(self, job_id: str, chunk: int) -> None:
            probe = sqlite3.connect(path, timeout=0, isolation_level=None)
            try:
                probe.execute("BEGIN IMMEDIATE")   # fails at once if the sweeper still holds the write lock
                probe.execute("ROLLBACK")
                lock_free.append(True)
            except sqlite3.OperationalError:
                lock_free.append(False)
            finally:
                probe.close()

    assert requeue_stalled(services.database, ProbingQueue(), queued_after_s=60) == 3
    assert lock_free == [True, True, True]
    assert client.get(f"/v1/reaudits/{job['id']}").json()["progress"]["total"] == 3


def test_finding_15_the_medical_validators_cache_is_bounded() -> None:
    from rules.validators.medical import icd10, unknown_drug

    # every cache keyed by text a model wrote is bounded
    assert unknown_drug._in_drug_dictionary.cache_info().maxsize is not None
    cached = icd10.content_words
    assert cached.cache_info().maxsize is not None
    for i in range(cached.cache_info().maxsize + 500):
        cached(f"unique sentence number {i} about metformin")
    assert cached.cache_info().currsize <= cached.cache_info().maxsize


def test_finding_15_two_first_writers_on_a_store_without_a_head_row_both_succeed(store_url: str) -> None:
    from auditor.store.database import ChainKey, Database
    from auditor.store.schema import metadata
    from auditor.trail.ledgers import verify_trail
    from auditor.trail.records import NewRecord, append_record

    database = Database(store_url, chain_key=ChainKey(HMAC_KEY.encode(), 100))
    metadata.create_all(database.engine)   # a store created outside the migrations: no chain_head rows
    barrier = threading.Barrier(6)

    def append(i: int) -> int:
        barrier.wait()
        return append_record(database, NewRecord(tenant="acme", status="completed", output=f"o{i}")).seq

    with ThreadPoolExecutor(6) as pool:
        seqs = sorted(pool.map(append, range(6)))
    assert seqs == [1, 2, 3, 4, 5, 6]
    with database.snapshot() as conn:
        assert verify_trail(conn, HMAC_KEY.encode()).ok
    database.dispose()


def test_finding_15_a_startup_that_fails_leaks_no_worker_threads(sql, sqlite_store: str, monkeypatch) -> None:
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:MarkerEvaluator")
    with TestClient(create_app(settings_for(sqlite_store), engine=FakeEngine())):
        pass   # migrate the store
    with sql(sqlite_store).begin() as conn:
        conn.execute(text("DROP TABLE api_keys"))   # the startup's authentication check will fail
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(OperationalError), TestClient(create_app(settings_for(sqlite_store), engine=FakeEngine())):
        pass
    time.sleep(0.2)
    leaked = [t.name for t in threading.enumerate() if t.name not in before and t.name.startswith("auditor")]
    assert leaked == []


def test_finding_17_a_purge_removes_the_output_from_evaluations_too(app_on, cli, sql, store_url: str) -> None:
    client = app_on(store_url)
    ids = chat(client, 2, **{"X-Domain": "medical"})
    engine = sql(store_url)
    deadline = time.monotonic() + 20
    while True:
        with engine.connect() as conn:
            scored = conn.execute(text("SELECT count(*) FROM evaluations WHERE claims IS NOT NULL")).scalar()
        if scored >= 2:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    status, out, err = cli(store_url, "audit", "purge", AUDITOR_RETENTION_DAYS='{"medical": 0}')
    assert status == 0 and "purged 2" in out, out + err
    with engine.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM evaluations WHERE claims IS NOT NULL")).scalar()
        outputs = conn.execute(text("SELECT count(*) FROM audit_records WHERE output IS NOT NULL AND id IN (:a, :b)"),
                               {"a": ids[0], "b": ids[1]}).scalar()
    assert (left, outputs) == (0, 0)
    assert cli(store_url, "audit", "verify-chain")[0] == 0
