"""Finding 3 (and 15, the early disconnect): no streamed byte without a committed record, and a stuck store
fails within a bound instead of hanging."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import create_engine, text

from auditor.app import create_app
from tests.auditor.conftest import FakeEngine
from tests.security.conftest import CHAT, settings_for

pytestmark = pytest.mark.timeout(120)
STREAM = {**CHAT, "stream": True}
LONG_REPLY = " ".join(f"Sentence number {i} says metformin lowers glucose." for i in range(12))


def _events(body: str) -> list[str]:
    return [line.removeprefix("data: ") for line in body.splitlines() if line.startswith("data: ")]


def _delivered(events: list[str]) -> str:
    text_ = ""
    for event in events:
        if event == "[DONE]":
            continue
        payload = json.loads(event)
        for choice in payload.get("choices", []):
            text_ += choice.get("delta", {}).get("content") or ""
    return text_


def test_sqlite_write_lock_held_elsewhere_fails_the_stream_before_any_byte(app_on, sqlite_store: str) -> None:
    client = app_on(sqlite_store, store_timeout_s=1.0)
    blocker = sqlite3.connect(sqlite_store.removeprefix("sqlite:///"), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")   # another process holds the write lock; reads still work
    try:
        started = time.monotonic()
        with client.stream("POST", "/v1/chat/completions", json=STREAM) as response:
            body = response.read().decode()
        elapsed = time.monotonic() - started
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert response.status_code == 503, body
    assert json.loads(body)["error"]["code"] == "audit_store_unavailable"
    assert "metformin" not in body.lower()
    assert elapsed < 4.0


def test_postgres_chain_head_locked_mid_stream_ends_in_bounded_time_and_is_recovered(app_on, store_url: str,
                                                                                     monkeypatch) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("the chain-head row lock is PostgreSQL's; SQLite is covered by the write-lock test")
    monkeypatch.setenv("AUDITOR_WORKER_STREAM_RECOVERY_AFTER_S", "0.5")
    client = app_on(store_url, reply=LONG_REPLY, store_timeout_s=1.0)
    engine = create_engine(store_url)
    holder = engine.connect()
    transaction = holder.begin()
    holder.execute(text("SELECT seq FROM chain_head WHERE id = 1 FOR UPDATE"))   # a stuck writer
    try:
        started = time.monotonic()
        with client.stream("POST", "/v1/chat/completions", json=STREAM) as response:
            body = response.read().decode()
            audit_id = response.headers["x-audit-id"]
        elapsed = time.monotonic() - started
    finally:
        transaction.rollback()
        holder.close()
    events = _events(body)
    assert "[DONE]" not in events and json.loads(events[-1])["error"]["code"] == "audit_store_unavailable"
    assert elapsed < 6.0
    delivered = _delivered(events)
    assert "Sentence number 0" in delivered
    record = _wait_for_record(engine, audit_id)
    assert record.status == "error" and record.delivered_output == delivered
    engine.dispose()


def test_a_failed_final_commit_leaves_committed_segments_that_become_a_record(app_on, store_url: str,
                                                                              monkeypatch) -> None:
    from sqlalchemy import event
    from sqlalchemy.exc import OperationalError

    monkeypatch.setenv("AUDITOR_WORKER_STREAM_RECOVERY_AFTER_S", "0.5")
    client = app_on(store_url, reply=LONG_REPLY)
    store = client.app.state.services.database.engine

    def refuse_records(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("INSERT INTO AUDIT_RECORDS"):
            raise OperationalError(statement, parameters, Exception("disk full"))

    event.listen(store, "before_cursor_execute", refuse_records)
    try:
        with client.stream("POST", "/v1/chat/completions", json=STREAM) as response:
            body = response.read().decode()
            audit_id = response.headers["x-audit-id"]
    finally:
        event.remove(store, "before_cursor_execute", refuse_records)
    delivered = _delivered(_events(body))
    # Each sentence but the last left after its own segment commit; the last one's commit is the record's,
    # which failed, so it never left.
    assert delivered.count("Sentence number") == 11 and "Sentence number 11" not in delivered
    engine = create_engine(store_url)
    record = _wait_for_record(engine, audit_id)
    assert record.status == "error" and record.delivered_output == delivered and "recovered" in record.error
    details = json.loads(record.details) if isinstance(record.details, str) else record.details
    assert details["model_dtype"] == "bfloat16"   # the dtype the stream was generated in, kept by the opening row
    engine.dispose()


def _wait_for_record(engine: Any, audit_id: str, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            row = conn.execute(text("SELECT status, delivered_output, error, details FROM audit_records WHERE id = :id"),
                               {"id": audit_id}).first()
        if row is not None:
            return row
        time.sleep(0.1)
    raise AssertionError(f"no record for {audit_id} after {timeout_s}s")


class SlowEngine(FakeEngine):
    """Streams a long answer slowly, so a client can leave in the middle."""

    async def generate(self, prompt: Any, params: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for output in super().generate(prompt, params, **kwargs):
            await asyncio.sleep(0.05)
            yield output


@pytest.fixture
def live_server(sqlite_store: str, monkeypatch) -> Iterator[tuple[str, str]]:
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:MarkerEvaluator")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = create_app(settings_for(sqlite_store), engine=SlowEngine(LONG_REPLY))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", sqlite_store
    server.should_exit = True
    thread.join(timeout=10)


def test_finding_15_a_client_leaving_mid_stream_is_recorded_at_once(live_server: tuple[str, str]) -> None:
    base, store = live_server
    with httpx.Client(timeout=10) as http, http.stream("POST", f"{base}/v1/chat/completions", json=STREAM) as response:
        audit_id = response.headers["x-audit-id"]
        lines = response.iter_lines()
        for line in lines:
            if "Sentence number 1" in line:
                break
    # The connection is closed: the record must land now, not when a garbage collection runs.
    engine = create_engine(store)
    record = _wait_for_record(engine, audit_id, timeout_s=5.0)
    assert record.status == "error" and "Sentence number 0" in (record.delivered_output or "")
    engine.dispose()


def test_segments_hold_only_the_stored_form_of_the_text(app_on, sql, sqlite_store: str, monkeypatch) -> None:
    """A stream in the default content mode commits PII-redacted segments, never the raw text."""
    from sqlalchemy import event
    from sqlalchemy.exc import OperationalError

    client = app_on(sqlite_store, reply="Write to jane.doe@example.com for help. It lowers glucose.",
                    default_output_pii_action="allow")
    store = client.app.state.services.database.engine

    def refuse_records(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("INSERT INTO AUDIT_RECORDS"):
            raise OperationalError(statement, parameters, Exception("disk full"))

    event.listen(store, "before_cursor_execute", refuse_records)
    try:
        with client.stream("POST", "/v1/chat/completions", json=STREAM) as response:
            response.read()
    finally:
        event.remove(store, "before_cursor_execute", refuse_records)
    with sql(sqlite_store).connect() as conn:
        stored = " ".join(t or "" for t in conn.execute(text("SELECT text FROM stream_segments")).scalars())
    assert "[EMAIL]" in stored and "jane.doe" not in stored


def test_the_last_sentence_leaves_under_the_records_commit_not_a_segment_of_its_own(app_on, sqlite_store: str) -> None:
    """Every sentence but the last is committed as a segment before it is sent; the last is covered by the
    record's commit (one commit fewer per stream), and the client still receives all of it."""
    from sqlalchemy import event

    client = app_on(sqlite_store, reply="Metformin lowers glucose. It is taken with meals. Doses vary.")
    store = client.app.state.services.database.engine
    segment_rows: list[str] = []

    def watch(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("INSERT INTO STREAM_SEGMENTS"):
            segment_rows.extend(map(repr, parameters if executemany else [parameters]))

    event.listen(store, "before_cursor_execute", watch)
    try:
        with client.stream("POST", "/v1/chat/completions", json=STREAM) as response:
            body = response.read().decode()
    finally:
        event.remove(store, "before_cursor_execute", watch)
    delivered = _delivered(_events(body))
    assert "Doses vary." in delivered and "[DONE]" in body
    assert len(segment_rows) == 3                        # the opening row and the first two sentences
    assert any("Metformin lowers" in row for row in segment_rows)
    assert not any("Doses vary" in row for row in segment_rows)
