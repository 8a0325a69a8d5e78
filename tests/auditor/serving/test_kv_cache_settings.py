"""The KV cache settings reach the operator and the trail: /health, engine stats, every record (inside
its hashed details), and `auditor serve` refuses combinations that cannot work, in one line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from auditor.app import create_app
from auditor.serving import runtime
from tests.auditor.conftest import make_settings
from tests.auditor.real_engine import tiny_medical_kg

CHAT = {"model": "auditor-medical", "max_tokens": 40, "temperature": 0,
        "messages": [{"role": "user", "content": "Is Metformin used for type 2 diabetes? " * 3}]}


@pytest.fixture(scope="module")
def int4_client(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path):
    """The service as it runs by default: the engine core in its own process, built from the settings."""
    root = tmp_path_factory.mktemp("kv")
    settings = make_settings(f"sqlite:///{root / 'audit.db'}", kv_cache_dtype="int4", kv_cache_strategy="tiered",
                             kv_cache_cold_dir=root / "cold", index_cache_dir=root / "index")
    kgs = {"medical": tiny_medical_kg()}
    options = {**runtime.engine_options(settings), "limits": None}
    engine = runtime.load_engine(tiny_checkpoint, kgs, process=True, **options)
    app = create_app(settings, engine=engine, verifier=runtime.RulesVerifier(kgs), knowledge=runtime.KgKnowledge(kgs))
    with TestClient(app) as client:
        yield client
    asyncio.run(engine.shutdown())   # the lifespan shuts down only engines it loaded itself


def test_health_names_the_kv_cache(int4_client: TestClient) -> None:
    health = int4_client.get("/health").json()
    kv_cache = health["kv_cache"]
    assert kv_cache["dtype"] == "int4" and kv_cache["strategy"] == "tiered"
    assert health["engine_allocator"] == "system"   # this core was launched without a preload
    assert kv_cache["residual_tokens"] == 32 and kv_cache["block_size"] == 32


def test_every_record_names_the_kv_cache_inside_its_hashed_details(int4_client: TestClient) -> None:
    plain = int4_client.post("/v1/chat/completions", json=CHAT)
    with int4_client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as streamed:
        streamed.read()
    too_long = [{"role": "user", "content": "Is Metformin used for type 2 diabetes? " * 200}]
    refused = int4_client.post("/v1/chat/completions", json={**CHAT, "messages": too_long})   # the engine says no
    assert plain.status_code == 200 and streamed.status_code == 200 and refused.status_code == 400
    expected = int4_client.get("/health").json()["kv_cache"]
    records = int4_client.get("/v1/audits").json()["data"]
    assert {r["status"] for r in records} == {"completed", "error"} and len(records) == 3
    assert all(r["details"]["kv_cache"] == expected for r in records)
    # the settings are covered by the chain: rewriting them is caught like any other edit
    audit_id = plain.headers["X-Audit-Id"]
    with int4_client.app.state.services.database.engine.begin() as conn:
        forged = json.dumps({"kv_cache": {**expected, "dtype": "auto"}})
        conn.execute(text("UPDATE audit_records SET details = :d WHERE id = :i"), {"d": forged, "i": audit_id})
    report = int4_client.get("/v1/audits/verify").json()
    assert report["ok"] is False and report["problem"]["record_id"] == audit_id


def test_engine_stats_reach_metrics(int4_client: TestClient) -> None:
    import time

    engine = int4_client.app.state.services.engine
    deadline = time.monotonic() + 10
    while "kv_cache" not in engine.stats():   # the core reports its stats about twice a second
        assert time.monotonic() < deadline
        time.sleep(0.1)
    stats = engine.stats()
    assert stats["kv_cache"]["dtype"] == "int4" and stats["kv_cache_quantized_blocks"] > 0
    metrics = int4_client.get("/metrics").text
    assert "auditor_engine_kv_cache_quantized_blocks " in metrics
    assert "auditor_engine_kv_cache_cold_capacity_blocks " in metrics


def _serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model: Path, **env: str) -> int:
    import uvicorn

    from auditor.cli import main
    from auditor.settings import get_settings

    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: None)
    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.setenv("AUDITOR_MODEL_PATH", str(model))
    for name, value in env.items():
        monkeypatch.setenv(f"AUDITOR_{name.upper()}", value)
    get_settings.cache_clear()
    try:
        return main(["serve"])
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize(("env", "message"), [
    (dict(kv_cache_dtype="fp8"), "invalid settings: AUDITOR_KV_CACHE_DTYPE: Input should be 'auto', 'int8' or 'int4'"),
    (dict(kv_cache_strategy="cold"), "invalid settings: AUDITOR_KV_CACHE_STRATEGY: Input should be 'static' or 'tiered'"),
    (dict(kv_cache_dtype="int4", kv_cache_cold_bytes="0"),
     "invalid settings: AUDITOR_KV_CACHE_COLD_BYTES: Input should be greater than or equal to 1"),
])
def test_serve_refuses_unknown_kv_settings_in_one_line(monkeypatch, tmp_path, capsys, tiny_checkpoint, env, message):
    assert _serve(monkeypatch, tmp_path, tiny_checkpoint, **env) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"auditor serve: error: {message}") and err.count("\n") == 1


def test_serve_refuses_a_kv_layout_the_model_cannot_use(monkeypatch, tmp_path, capsys):
    from engine.synthetic import write_tiny_checkpoint

    model = write_tiny_checkpoint(tmp_path / "odd", hidden_size=96, num_heads=2, num_kv_heads=1)   # head_dim 48
    assert _serve(monkeypatch, tmp_path, model, kv_cache_dtype="int8") == 2
    err = capsys.readouterr().err
    assert err.startswith("auditor serve: error: kv_cache_dtype=int8 does not fit this model: head_dim 48")
    assert _serve(monkeypatch, tmp_path, model, kv_cache_dtype="auto") == 0   # full precision fits any model


def test_serve_refuses_a_cold_dir_it_cannot_write(monkeypatch, tmp_path, capsys, tiny_checkpoint):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = _serve(monkeypatch, tmp_path, tiny_checkpoint, kv_cache_strategy="tiered",
                  kv_cache_cold_dir=str(blocker / "cold"))
    assert code == 2
    assert capsys.readouterr().err.startswith(f"auditor serve: error: kv_cache_cold_dir {blocker / 'cold'}: cannot")


def test_a_recovered_stream_record_names_the_kv_cache_of_its_opening(database) -> None:
    from sqlalchemy import select

    from auditor.trail.models import AuditRecord
    from auditor.trail.segments import StreamOpening, commit_segment, open_stream, recover_interrupted_streams

    kv_cache = {"dtype": "int8", "strategy": "static", "residual_tokens": 32}
    opening = StreamOpening("stream-1", "acme", "raw", {"endpoint": "chat", "kv_cache": kv_cache})
    open_stream(database, opening, timeout_s=5)
    commit_segment(database, opening, 1, "First sentence.", timeout_s=5)
    assert recover_interrupted_streams(database, idle_for_s=0) == ["stream-1"]
    with database.engine.connect() as conn:
        details = conn.execute(select(AuditRecord.details).where(AuditRecord.id == "stream-1")).scalar_one()
    assert details["kv_cache"] == kv_cache and details["recovered_segments"][0]["idx"] == 1


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("AUDITOR_WORKER_EMBEDDED_BUSY_SHARE", "0", "AUDITOR_WORKER_EMBEDDED_BUSY_SHARE: Input should be greater than 0"),
    ("AUDITOR_WORKER_EMBEDDED_BUSY_SHARE", "1.5", "AUDITOR_WORKER_EMBEDDED_BUSY_SHARE: Input should be less than or"),
    ("AUDITOR_WORKER_EMBEDDED_MAX_LAG_S", "soon", "AUDITOR_WORKER_EMBEDDED_MAX_LAG_S: Input should be a valid number"),
])
def test_serve_refuses_bad_worker_settings_in_one_line(monkeypatch, tmp_path, capsys, tiny_checkpoint,
                                                       variable, value, message):
    monkeypatch.setenv(variable, value)   # before: a pydantic traceback when the app started
    assert _serve(monkeypatch, tmp_path, tiny_checkpoint) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"auditor serve: error: invalid settings: {message}") and err.count("\n") == 1
