"""Operations: health/ready/metrics, development mode, `auditor serve` binding, migrations vs models."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi.testclient import TestClient

from auditor.app import create_app
from auditor.store.database import Database
from auditor.store.schema import include_object_for, metadata
from tests.auditor.conftest import FakeEngine, make_settings

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


def test_health_ready_and_metrics(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/ready").json()["audit_store"] == "ok"
    client.post("/v1/chat/completions", json=CHAT, headers={"X-Intent": "medical-diagnosis"})
    metrics = client.get("/metrics").text
    assert 'auditor_requests_total{endpoint="chat",status="completed"} 1.0' in metrics
    assert 'auditor_gate_decisions_total{action="annotate",stage="input"} 1.0' in metrics
    assert 'auditor_e2e_request_latency_seconds_count{intent="medical-diagnosis"} 1.0' in metrics
    assert 'auditor_time_to_first_token_seconds_count{intent="medical-diagnosis"} 1.0' in metrics
    assert "auditor_audit_write_seconds_count 1.0" in metrics
    assert "auditor_engine_requests_total 1.0" in metrics     # engine.stats() as gauges


def test_two_apps_have_separate_registries(app_factory) -> None:
    first, second = app_factory(), app_factory()
    first.post("/v1/chat/completions", json=CHAT)
    assert "auditor_requests_total{" not in second.get("/metrics").text


def test_health_is_503_before_startup(sqlite_url: str) -> None:
    client = TestClient(create_app(make_settings(sqlite_url), engine=FakeEngine()))  # lifespan not entered
    assert client.get("/health").status_code == 503


def test_development_mode_ignores_bearer_tokens_and_warns(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="auditor"), \
            TestClient(create_app(make_settings(sqlite_url), engine=FakeEngine())) as client:
        response = client.post("/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer anything"})
    assert response.status_code == 200
    assert any("development mode" in r.message for r in caplog.records)


def test_serve_binds_loopback_without_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uvicorn

    from auditor.cli import main
    from auditor.serving import engine_loading
    from auditor.settings import get_settings

    calls = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.update(kwargs))
    monkeypatch.setattr(engine_loading, "start_engine_core", lambda settings: None)   # no model to load here
    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.setenv("AUDITOR_MODEL_PATH", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert main(["serve", "--host", "0.0.0.0", "--port", "8123"]) == 0
    finally:
        get_settings.cache_clear()
    assert calls["host"] == "127.0.0.1" and calls["port"] == 8123


def test_serve_yields_the_cpu_to_the_core_it_launched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uvicorn

    from auditor.cli import main
    from auditor.serving import engine_loading
    from auditor.settings import get_settings

    class LaunchedCore:   # what start_engine_core returns: launched, not yet ready
        yielded: list[int] = []
        cpus = None           # AUDITOR_ENGINE_CPUS off

        def yield_cpu(self, steps: int) -> int:
            self.yielded.append(steps)
            return 1

        async def shutdown(self) -> None:
            pass

    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: None)
    monkeypatch.setattr(engine_loading, "start_engine_core", lambda settings: LaunchedCore())
    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.setenv("AUDITOR_MODEL_PATH", str(tmp_path))
    monkeypatch.setenv("AUDITOR_API_NICE", "7")
    get_settings.cache_clear()
    try:
        assert main(["serve", "--port", "8123"]) == 0
    finally:
        get_settings.cache_clear()
    assert LaunchedCore.yielded == [7]


def test_migrations_match_the_models(database: Database) -> None:
    with database.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": include_object_for(conn.dialect.name)})
        diffs = compare_metadata(context, metadata)
    assert diffs == []


def test_completions_stream(client: TestClient) -> None:
    with client.stream("POST", "/v1/completions", json={"model": "fake-model", "prompt": "Hi", "stream": True,
                                                         "max_tokens": 4}) as response:
        body = response.read().decode()
    assert body.rstrip().endswith("data: [DONE]")
    assert '"object": "text_completion"' in body and "Metformin" in body


def test_serve_without_a_model_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from auditor.cli import main
    from auditor.settings import get_settings

    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.setenv("AUDITOR_MODEL_PATH", str(tmp_path / "missing"))
    get_settings.cache_clear()
    try:
        assert main(["serve"]) == 2
    finally:
        get_settings.cache_clear()
    assert capsys.readouterr().err.startswith("auditor serve: error: no model at")


def test_serve_with_a_folder_that_is_no_checkpoint_is_a_one_line_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from auditor.cli import main
    from auditor.settings import get_settings

    (tmp_path / "model").mkdir()   # a folder, but no config.json or tokenizer.json: refused before a core starts
    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.setenv("AUDITOR_MODEL_PATH", str(tmp_path / "model"))
    get_settings.cache_clear()
    try:
        assert main(["serve"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert err.startswith("auditor serve: error: cannot load the model at") and "config.json" in err
    assert len(err.strip().splitlines()) == 1


def test_ready_says_warm_once_what_loads_after_ready_is_in(app_factory) -> None:
    import threading
    import time

    from auditor.api.deps import Services

    client = app_factory()
    services: Services = client.app.state.services
    release = threading.Event()
    services.warming = threading.Thread(target=release.wait, daemon=True)   # a slow registry build
    services.warming.start()
    body = client.get("/ready").json()
    assert body["ready"] is True and body["warm"] is False   # serving already; a request needing it would wait
    release.set()
    services.warming.join(5)
    deadline = time.monotonic() + 5
    while not client.get("/ready").json()["warm"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_the_pii_screens_phone_metadata_is_read_after_ready(app_factory) -> None:
    """Its first read takes every region's metadata (~30 ms): the service does it after ready, not a request."""
    from auditor.gate.pii import min_phone_digits

    min_phone_digits.cache_clear()
    client = app_factory()
    client.app.state.services.warming.join(30)
    assert min_phone_digits.cache_info().currsize == 1
