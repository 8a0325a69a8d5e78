"""The service on an engine core in its own process: answers as before, and when the core is killed,
requests in flight get a clear 503 (or an error event mid-stream) and are recorded as failed, new ones get
503 at once while the core restarts, and once it is back requests succeed again. Nothing hangs."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from auditor.app import create_app
from auditor.serving import runtime
from auditor.serving.runtime import KgKnowledge, RulesVerifier
from tests.auditor.conftest import make_settings
from tests.auditor.real_engine import tiny_medical_kg

pytestmark = pytest.mark.timeout(240)

CHAT = {"model": "auditor-medical", "max_tokens": 40, "temperature": 0,
        "messages": [{"role": "user", "content": "Is Metformin used for type 2 diabetes?"}]}


@pytest.fixture
def process_client(tmp_path: Path, tiny_checkpoint: Path):
    kgs = {"medical": tiny_medical_kg()}
    engine = runtime.load_engine(tiny_checkpoint, kgs, process=True, index_cache_dir=tmp_path / "index")
    engine.restart_backoff_s = 0.2
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'audit.db'}"), engine=engine,
                     verifier=RulesVerifier(kgs), knowledge=KgKnowledge(kgs))
    with TestClient(app) as client:
        yield client, engine
    # the lifespan shuts down only engines it loaded itself
    import asyncio

    asyncio.run(engine.shutdown())


def _wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_service_answers_through_the_core_process(process_client) -> None:
    client, engine = process_client
    assert engine.pid != os.getpid()
    response = client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 200, response.text
    record = client.get(f"/v1/audits/{response.headers['X-Audit-Id']}").json()
    assert record["status"] == "completed" and record["kg_events"][0]["kind"] == "constrained"
    assert record["completion_tokens"] == response.json()["usage"]["completion_tokens"] > 0
    assert record["delivered_output"] == response.json()["choices"][0]["message"]["content"]
    streamed = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")


def test_a_killed_core_fails_requests_in_flight_with_503_and_records_them(process_client) -> None:
    client, engine = process_client
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
    first_pid = engine.pid
    os.kill(first_pid, signal.SIGSTOP)   # frozen: requests sent now are in flight until it dies
    try:
        with ThreadPoolExecutor(4) as pool:
            plain = [pool.submit(client.post, "/v1/chat/completions", json=CHAT) for _ in range(3)]
            stream = pool.submit(client.post, "/v1/chat/completions", json={**CHAT, "stream": True})
            time.sleep(1.0)
            assert not any(f.done() for f in plain)   # really in flight
            os.kill(first_pid, signal.SIGKILL)
            started = time.monotonic()
            responses = [f.result(timeout=30) for f in plain]
            streamed = stream.result(timeout=30)
            failed_within = time.monotonic() - started
    finally:
        try:
            os.kill(first_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert failed_within < 10
    for response in responses:
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["code"] == "engine_unavailable" and "exit code -9" in error["message"]
        assert response.headers["Retry-After"]
    # a stream either failed before its first byte (503) or ends with an error event and no [DONE]
    if streamed.status_code == 200:
        assert '"engine_unavailable"' in streamed.text and "[DONE]" not in streamed.text
    else:
        assert streamed.status_code == 503
    failed = client.get("/v1/audits", params={"status": "error"}).json()["data"]
    assert len(failed) == 4
    assert all(r["error"].startswith("engine unavailable") for r in failed)

    # while the new core starts: 503 at once, recorded too; /ready says so
    during = client.post("/v1/chat/completions", json=CHAT)
    assert during.status_code in (200, 503), during.text   # 200 when the new core was already up
    if during.status_code == 503:
        assert "restarting" in during.json()["error"]["message"]
        assert client.get("/ready").json()["engine"] in ("restarting", "ok")
    _wait_until(lambda: engine.available, 120)
    assert engine.pid != first_pid and engine.restarts == 1
    assert client.get("/ready").status_code == 200
    after = client.post("/v1/chat/completions", json=CHAT)
    assert after.status_code == 200, after.text
    statuses = [r["status"] for r in client.get("/v1/audits", params={"limit": 100}).json()["data"]]
    restarting = during.status_code == 503
    assert statuses.count("completed") == 2 + (not restarting) and statuses.count("error") == 4 + restarting
    report = client.get("/v1/audits/verify").json()
    assert report["ok"] is True, json.dumps(report)
