"""Fixtures for the attacker's-eye tests: a store on SQLite or PostgreSQL, the app on it (fake engine), the
CLI run in-process against the same store, and raw SQL on the store as someone with database access.

Everything here goes through the public surface (HTTP, CLI, SQL), so the same tests ran against the code
before the hardening and showed each finding (see docs/security.md and the issue-11 closing note)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text

from auditor.app import create_app
from auditor.settings import Settings
from auditor.store.scratch import drop_schema
from tests.auditor.conftest import FakeEngine
from tests.cli_runner import run_cli

POSTGRES_URL = os.environ.get("AUDITOR_TEST_POSTGRES_URL")
HMAC_KEY = "security-test-hmac-key-0123456789abcdef"
MARKER_EVALUATOR = "tests.auditor.scoring_doubles:MarkerEvaluator"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'audit.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip("AUDITOR_TEST_POSTGRES_URL is not set")
    schema = f"security_{uuid.uuid4().hex[:12]}"
    # Apps on this schema are closed before it is dropped (fixture teardown order is not guaranteed).
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}options=-csearch_path%3D{schema}"
    finally:
        _close_open_clients()
        drop_schema(admin, schema)
        admin.dispose()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'audit.db'}"


def settings_for(url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"environment": "test", "database_url": url, "hmac_key": HMAC_KEY,
                              "checkpoint_interval": 3,
                              # no MiniLM in these tests: domain detection has its own (tests/auditor/serving)
                              "domain_detection": "off"}
    values.update(overrides)
    return Settings(**values)


_OPEN_CLIENTS: list[TestClient] = []


def _close_open_clients() -> None:
    while _OPEN_CLIENTS:
        _OPEN_CLIENTS.pop().__exit__(None, None, None)


@pytest.fixture
def app_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., TestClient]]:
    """`app_on(url, reply=..., **settings)`: the app on that store, lifespan entered, with a fake engine."""
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", MARKER_EVALUATOR)
    def build(url: str, *, reply: str | None = None, engine: Any = None, **overrides: Any) -> TestClient:
        engine = engine or (FakeEngine(reply) if reply is not None else FakeEngine())
        client = TestClient(create_app(settings_for(url, **overrides), engine=engine))
        client.__enter__()
        _OPEN_CLIENTS.append(client)
        return client

    yield build
    _close_open_clients()


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str, str]]:
    """`cli(url, *args, **env)`: run `auditor <args>` in-process on the store; (exit status, stdout, stderr)."""
    def run(url: str, *args: str, **env: str) -> tuple[int, str, str]:
        values = {"AUDITOR_DATABASE_URL": url, "AUDITOR_ENVIRONMENT": "test", "AUDITOR_HMAC_KEY": HMAC_KEY,
                  "AUDITOR_WORKER_EVALUATOR": MARKER_EVALUATOR, **env}
        return run_cli(monkeypatch, values, *args)

    return run


@pytest.fixture
def sql() -> Iterator[Callable[[str], Engine]]:
    """`sql(url)`: a plain engine on the store, as someone with database access would use."""
    engines: list[Engine] = []

    def connect(url: str) -> Engine:
        engine = create_engine(url)
        engines.append(engine)
        return engine

    yield connect
    for engine in engines:
        engine.dispose()


CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "What treats type 2 diabetes?"}]}


def chat(client: TestClient, n: int = 1, **headers: str) -> list[str]:
    """Send `n` chat requests; their audit ids."""
    ids = []
    for _ in range(n):
        response = client.post("/v1/chat/completions", json=CHAT, headers=headers)
        assert response.status_code == 200, response.text
        ids.append(response.headers["x-audit-id"])
    return ids
