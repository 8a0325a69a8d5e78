"""The service on the real engine (tiny random checkpoint): KG constraint wiring, JSON mode, records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from auditor.app import create_app
from tests.auditor.conftest import make_settings
from tests.auditor.real_engine import build_real_runtime


@pytest.fixture(scope="module")
def real_client(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path):
    root = tmp_path_factory.mktemp("real")
    engine, verifier, knowledge = build_real_runtime(tiny_checkpoint)
    app = create_app(make_settings(f"sqlite:///{root / 'audit.db'}"), engine=engine, verifier=verifier,
                     knowledge=knowledge)
    with TestClient(app) as client:
        yield client


def test_kg_constraint_is_wired_and_recorded(real_client: TestClient) -> None:
    response = real_client.post("/v1/chat/completions", json={
        "model": "auditor-medical", "max_tokens": 12, "temperature": 0,
        "messages": [{"role": "user", "content": "Is Metformin used for type 2 diabetes?"}]})
    assert response.status_code == 200, response.text
    record = real_client.get(f"/v1/audits/{response.headers['X-Audit-Id']}").json()
    linking = record["kg_events"][0]
    assert linking["kind"] == "constrained"
    assert linking["data"]["anchor_ids"] == ["drug:DB00331", "condition:type-2-diabetes"]
    assert record["sampling_params"]["kg_constraint"]["allowed_count"] == linking["data"]["allowed_count"] > 0
    assert record["kg_version"] and record["rule_pack_hash"]
    assert record["checkpoint_hash"] == real_client.app.state.services.engine.checkpoint_hash
    assert record["completion_tokens"] == response.json()["usage"]["completion_tokens"] > 0


def test_json_object_mode_on_the_real_engine(real_client: TestClient) -> None:
    response = real_client.post("/v1/chat/completions", json={
        "model": "model", "max_tokens": 200, "temperature": 0, "seed": 7,
        "response_format": {"type": "json_object"},
        "messages": [{"role": "user", "content": "Answer in JSON."}]})
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["message"]["content"]), dict)
    else:  # cut by max_tokens: still a prefix of one JSON object
        assert choice["finish_reason"] == "length" and choice["message"]["content"].lstrip().startswith("{")


def test_bad_json_schema_is_400_from_the_engine(real_client: TestClient) -> None:
    response = real_client.post("/v1/chat/completions", json={
        "model": "model", "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}}})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("stream", [False, True])
def test_records_name_the_dtype_the_engine_ran_in(real_client: TestClient, stream: bool) -> None:
    engine = real_client.app.state.services.engine
    assert engine.dtype in ("bfloat16", "float32")   # dtype="auto": bf16 on a CPU with AMX or AVX512-BF16
    request = {"model": "model", "max_tokens": 6, "temperature": 0, "stream": stream,
               "messages": [{"role": "user", "content": "Hello world"}]}
    with real_client.stream("POST", "/v1/chat/completions", json=request) as response:
        response.read()
    assert response.status_code == 200
    record = real_client.get(f"/v1/audits/{response.headers['X-Audit-Id']}").json()
    assert record["details"]["model_dtype"] == engine.dtype


def test_engine_dtype_setting_reaches_the_engine(tiny_checkpoint: Path, monkeypatch) -> None:
    from pydantic import ValidationError

    from auditor.serving import runtime
    from auditor.settings import Settings
    from tests.auditor.real_engine import tiny_medical_kg

    monkeypatch.setenv("AUDITOR_ENGINE_DTYPE", "float32")
    settings = Settings()
    config = runtime.engine_options(settings)["config"]   # what the app and the engine-core process build from
    engine = runtime.load_engine(tiny_checkpoint, {"medical": tiny_medical_kg()}, config=config)
    assert engine.dtype == "float32"
    monkeypatch.setenv("AUDITOR_ENGINE_DTYPE", "int4")
    with pytest.raises(ValidationError, match="engine_dtype"):
        Settings()
