"""Fail closed, on SQLite and PostgreSQL: when the audit record cannot be committed the client gets 503
(or, mid-stream, an error event and no [DONE]) and nothing is half-written."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "What treats type 2 diabetes?"}]}


@pytest.fixture
def app_database_url(database_url: str) -> str:
    return database_url


@pytest.fixture
def break_store(client: TestClient):
    """Make statements matching a prefix fail the way a lost database connection does."""
    engine = client.app.state.services.database.engine
    installed = []

    def install(prefix: str) -> None:
        def fail(conn, cursor, statement, parameters, context, executemany):
            if statement.lstrip().upper().startswith(prefix):
                raise OperationalError(statement, parameters, Exception("database is unavailable"))
        event.listen(engine, "before_cursor_execute", fail)
        installed.append(fail)

    yield install
    for fail in installed:
        event.remove(engine, "before_cursor_execute", fail)


def _counts(client: TestClient) -> tuple[int, int, int]:
    with client.app.state.services.database.engine.connect() as conn:
        return (conn.execute(text("SELECT count(*) FROM audit_records")).scalar(),
                conn.execute(text("SELECT count(*) FROM outbox")).scalar(),
                conn.execute(text("SELECT seq FROM chain_head WHERE id = 1")).scalar())


def test_commit_failure_is_503_with_no_output_and_nothing_written(client: TestClient, break_store) -> None:
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
    before = _counts(client)
    break_store("INSERT INTO OUTBOX")   # fails after the record row was inserted in the same transaction
    response = client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "audit_store_unavailable"
    assert "Metformin" not in response.text
    assert _counts(client) == before


def test_store_down_before_streaming_is_503_before_any_byte(client: TestClient, break_store) -> None:
    break_store("INSERT INTO STREAM_SEGMENTS")   # the stream's opening row is a write: a read-only store fails it
    response = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert response.status_code == 503
    assert "Metformin" not in response.text


def test_commit_failure_mid_stream_sends_error_and_no_done(client: TestClient, break_store) -> None:
    before = _counts(client)
    break_store("INSERT INTO AUDIT_RECORDS")
    with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as response:
        body = response.read().decode()
    events = [line.removeprefix("data: ") for line in body.splitlines() if line.startswith("data: ")]
    assert "[DONE]" not in events
    assert json.loads(events[-1])["error"]["code"] == "audit_store_unavailable"
    assert not any('"finish_reason": "stop"' in e for e in events)
    assert _counts(client) == before


def test_store_down_at_auth_is_503(client: TestClient, break_store) -> None:
    break_store("SELECT")
    response = client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "service_unavailable"
