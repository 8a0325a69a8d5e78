"""Upstream models against a real upstream: a second `auditor serve` process on the bundled model, over real
HTTP. The service under test runs in-process (TestClient); only its upstream is another process.

Faults are real: the upstream is paused (SIGSTOP: slow), killed mid-stream (SIGKILL), started on a model
folder whose chat template raises (500), asked with a wrong key (401), or absent (connection refused).
Malformed replies come from a fake server (test_upstream_malformed.py), the only thing a real upstream
cannot be made to produce.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.serve_process import ServeProcess, free_port, model_folder
from tests.auditor.conftest import ScriptedVerifier
from tests.auditor.sse import delivered, events

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QUESTION = [{"role": "user", "content": "Tell me about Metformin."}]
KEY_ENV = "AUDITOR_TEST_UPSTREAM_KEY"
WRONG_KEY_ENV = "AUDITOR_TEST_UPSTREAM_WRONG_KEY"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """The bundled model as it ships, behind an API key."""
    server = ServeProcess(tmp_path_factory.mktemp("upstream"), api_key=True).start()
    os.environ[KEY_ENV] = server.key or ""
    os.environ[WRONG_KEY_ENV] = "sk-not-the-upstream-key"
    try:
        yield server
    finally:
        server.stop()
        os.environ.pop(KEY_ENV, None)
        os.environ.pop(WRONG_KEY_ENV, None)


@pytest.fixture(scope="module")
def long_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_folder(tmp_path_factory.mktemp("long-model") / "model", never_stop=True)


@pytest.fixture
def long_upstream(tmp_path: Path, long_model: Path) -> Iterator[ServeProcess]:
    """A model that writes sentence after sentence (about one a second here) until max_tokens."""
    server = ServeProcess(tmp_path / "long-upstream", model_path=long_model).start()
    try:
        yield server
    finally:
        server.stop()


def upstream_entry(server: ServeProcess | None, *, base_url: str | None = None, key_env: str | None = KEY_ENV,
                   **config: Any) -> dict[str, Any]:
    upstream = {"base_url": base_url or (server.base_url if server else ""), "model": "auditor", **config}
    if key_env and server is not None and server.key:
        upstream["api_key_env"] = key_env
    return {"upstream": upstream}


@pytest.fixture
def service(app_factory):
    """The service under test with a model registry; `verifier` optional (default: no claims)."""
    def build(models: dict[str, Any], **kwargs: Any):
        return app_factory(overrides={"models": models}, **kwargs)
    return build


def chat(client, model: str = "up", **body: Any):
    payload = {"model": model, "messages": QUESTION, "max_tokens": 40, "temperature": 0, **body}
    return client.post("/v1/chat/completions", json=payload, headers={"X-Domain": "medical"})


def record(client, audit_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/audits/{audit_id}")
    assert response.status_code == 200, response.text
    return response.json()


def assert_error(response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"] and error["type"]
    return error


def last_record(client) -> dict[str, Any]:
    page = client.get("/v1/audits", params={"limit": 1}).json()["data"]
    return record(client, page[0]["id"])


# -- forwarding ---------------------------------------------------------------------------------------------


def test_chat_is_forwarded_gated_and_recorded_with_the_upstream_named(service, upstream: ServeProcess,
                                                                       tmp_path: Path) -> None:
    import httpx

    direct = httpx.post(f"{upstream.base_url}/chat/completions", headers={"Authorization": f"Bearer {upstream.key}"},
                        json={"model": "auditor", "messages": QUESTION, "max_tokens": 40, "temperature": 0}, timeout=60)
    client = service({"up": {**upstream_entry(upstream), "domain": "medical"}})
    assert "up" in [m["id"] for m in client.get("/v1/models").json()["data"]]
    response = chat(client)
    assert response.status_code == 200, response.text
    body = response.json()
    # greedy decoding: the same answer as asking the upstream directly
    assert body["choices"][0]["message"]["content"] == direct.json()["choices"][0]["message"]["content"]
    assert body["usage"]["completion_tokens"] == direct.json()["usage"]["completion_tokens"]
    row = record(client, response.headers["X-Audit-Id"])
    assert row["model_id"] == "up" and row["status"] == "completed" and row["domain"] == "medical"
    assert row["details"]["upstream"]["base_url"] == upstream.base_url
    assert row["details"]["upstream"]["model"] == "auditor"
    assert row["details"]["decoding"]["kg_constrained"] is False
    assert row["details"]["upstream"]["response_id"].startswith("chatcmpl-")   # correlates with the upstream's log
    assert row["checkpoint_hash"] is None and not row["kg_events"]
    assert client.get("/v1/audits/verify").json()["ok"] is True


def test_completions_are_forwarded(service, upstream: ServeProcess) -> None:
    client = service({"up": upstream_entry(upstream)})
    response = client.post("/v1/completions", json={"model": "up", "prompt": "Metformin is", "max_tokens": 12,
                                                    "temperature": 0})
    assert response.status_code == 200, response.text
    text = response.json()["choices"][0]["text"]
    assert text
    row = record(client, response.headers["X-Audit-Id"])
    assert row["endpoint"] == "completions" and row["output"] == text


def test_the_upstream_key_is_sent_but_never_stored(service, upstream: ServeProcess, app_database_url: str) -> None:
    client = service({"up": upstream_entry(upstream), "bad": upstream_entry(upstream, key_env=WRONG_KEY_ENV)})
    assert chat(client).status_code == 200
    assert chat(client, "bad").status_code == 502
    stored = b"".join(path.read_bytes() for path in Path(app_database_url.removeprefix("sqlite:///")).parent.glob("audit.db*"))
    assert upstream.key and upstream.key.encode() not in stored
    assert b"sk-not-the-upstream-key" not in stored


def test_streams_are_gated_sentence_by_sentence(service, long_upstream: ServeProcess) -> None:
    # the long model writes sentence after sentence: the first one judged is blocked, the others released
    verifier = BlockFirstAnswer()
    client = service({"up": upstream_entry(long_upstream)}, verifier=verifier)
    with client.stream("POST", "/v1/chat/completions", headers={"X-Domain": "medical"},
                       json={"model": "up", "messages": QUESTION, "max_tokens": 120, "temperature": 0,
                             "stream": True}) as response:
        body = response.read().decode()
    lines = events(body)
    assert response.status_code == 200 and lines[-1] == "[DONE]"
    text = delivered(lines)
    blocked = verifier.seen[0]
    assert len(verifier.seen) >= 2 and text.strip()                  # each sentence was judged on its own
    assert blocked not in text                                        # the blocked sentence never left
    row = record(client, response.headers["X-Audit-Id"])
    assert row["gate_action"] == "block" and row["delivered_output"] == text
    assert blocked in row["output"]                                   # the upstream's words, kept for the audit


# -- regenerate on block -----------------------------------------------------------------------------------


class BlockFirstAnswer(ScriptedVerifier):
    """Blocks every sentence of the first answer it judges (a contradicted claim), allows the rest."""

    def __init__(self) -> None:
        super().__init__({})
        self.answers = 0

    def verify(self, text: str, *, domain: str | None, prompt: str | None, intent: str | None = None):
        from auditor.gate.gate import GateDecision, Verification

        self.seen.append(text)
        if len(self.seen) > 1:
            return Verification()
        claim = {"text": text, "verdict": "contradicted", "rule_id": "test.first",
                 "evidence": [{"description": "the KG says otherwise", "source": "test KG"}]}
        return Verification(claims=[claim], decisions=[GateDecision("output", "test.first", "block", "contradicted")])


def test_regenerate_on_block_asks_again_with_the_contradicted_claims_and_records_each_attempt(
        service, upstream: ServeProcess) -> None:
    client = service({"up": {**upstream_entry(upstream), "regenerate_on_block": 2}}, verifier=BlockFirstAnswer())
    response = chat(client, max_tokens=60)
    assert response.status_code == 200, response.text
    body = response.json()
    attempts = body["audit"]["attempts"]
    assert len(attempts) == 2 and response.headers["X-Audit-Id"] == attempts[-1] == body["audit_id"]
    first, second = record(client, attempts[0]), record(client, attempts[1])
    assert first["status"] == "blocked" and second["status"] == "completed"
    assert first["details"]["regeneration"] == {"attempt": 1, "max_attempts": 3}
    regeneration = second["details"]["regeneration"]
    assert regeneration["attempt"] == 2 and regeneration["previous_audit_id"] == attempts[0]
    sent = json.loads(second["prompt"])
    assert sent[0]["role"] == "system" and "the KG says otherwise" in sent[0]["content"]
    assert first["output"].strip()[:30] in sent[0]["content"]          # the contradicted claim, quoted
    assert body["choices"][0]["message"]["content"] == second["delivered_output"]


def test_regenerate_on_block_gives_up_after_n_attempts(service, upstream: ServeProcess) -> None:
    verifier = ScriptedVerifier({"": ("contradicted", "block")})   # every sentence of every answer
    client = service({"up": {**upstream_entry(upstream), "regenerate_on_block": 2}}, verifier=verifier)
    response = chat(client)
    assert response.status_code == 200
    attempts = response.json()["audit"]["attempts"]
    assert len(attempts) == 3
    assert [record(client, a)["status"] for a in attempts] == ["blocked"] * 3
    assert [record(client, a)["details"]["regeneration"]["attempt"] for a in attempts] == [1, 2, 3]


# -- faults ------------------------------------------------------------------------------------------------


def test_a_stalled_upstream_gives_504_and_an_error_record(service, upstream: ServeProcess) -> None:
    client = service({"up": upstream_entry(upstream, read_timeout_s=1.0)})
    upstream.pause()
    try:
        started = time.monotonic()
        response = chat(client)
        elapsed = time.monotonic() - started
        with client.stream("POST", "/v1/chat/completions", headers={"X-Domain": "medical"},
                           json={"model": "up", "messages": QUESTION, "stream": True}) as streamed:
            streamed_body = streamed.read().decode()
    finally:
        upstream.resume()
    error = assert_error(response, 504, "upstream_timeout")
    assert "no data within 1s" in error["message"] and elapsed < 10
    # a stream that has sent nothing yet fails as a plain 504 too
    assert streamed.status_code == 504 and json.loads(streamed_body)["error"]["code"] == "upstream_timeout"
    row = record(client, response.headers["X-Audit-Id"])   # the failed request's record, named in the error
    assert row["status"] == "error" and "upstream_timeout" in row["error"]
    # resumed: the pooled client recovers (a resumed process on a loaded machine may miss the 1 s read timeout once)
    assert any(chat(client).status_code == 200 for _ in range(5))


def test_an_answer_longer_than_the_total_timeout_gives_504(service, long_upstream: ServeProcess) -> None:
    client = service({"up": upstream_entry(long_upstream, total_timeout_s=0.5)})
    response = chat(client, max_tokens=200)
    assert "longer than total_timeout_s" in assert_error(response, 504, "upstream_timeout")["message"]


def test_an_upstream_500_gives_502_and_an_error_record(service, tmp_path: Path) -> None:
    broken = ServeProcess(tmp_path / "broken", model_path=model_folder(tmp_path / "broken-model",
                                                                         broken_template=True)).start()
    try:
        client = service({"up": upstream_entry(broken)})
        response = chat(client)
    finally:
        broken.stop()
    error = assert_error(response, 502, "upstream_error")
    assert "answered 500" in error["message"]
    row = last_record(client)
    assert row["status"] == "error" and "upstream_error" in row["error"] and row["delivered_output"] in (None, "")


def test_an_upstream_that_refuses_our_key_gives_502(service, upstream: ServeProcess) -> None:
    client = service({"up": upstream_entry(upstream, key_env=WRONG_KEY_ENV)})
    error = assert_error(chat(client), 502, "upstream_refused")
    assert "401" in error["message"]


def test_connection_refused_gives_502_after_bounded_retries(service) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    timings = {}
    for retries in (0, 3):
        client = service({"up": upstream_entry(None, base_url=closed, connect_retries=retries)})
        started = time.monotonic()
        error = assert_error(chat(client), 502, "upstream_unreachable")
        timings[retries] = time.monotonic() - started
        assert f"after {retries + 1} attempt(s)" in error["message"]
    # three retries wait 0.1 + 0.3 + 1.0 s between attempts; none waits nothing
    assert timings[3] >= 1.4 and timings[0] < timings[3]
    assert last_record(client)["status"] == "error"


def test_an_upstream_killed_mid_stream_ends_the_stream_with_502_and_records_what_was_delivered(
        service, long_upstream: ServeProcess) -> None:
    client = service({"up": upstream_entry(long_upstream)})
    received: list[str] = []
    with client.stream("POST", "/v1/chat/completions", headers={"X-Domain": "medical"},
                       json={"model": "up", "messages": QUESTION, "max_tokens": 200, "temperature": 0,
                             "stream": True}) as response:
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                received.append(line.removeprefix("data: "))
                if delivered(received):           # the first sentence is out: the upstream is mid-answer
                    long_upstream.pause()
                    long_upstream.kill()
                    break
        received += [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert response.status_code == 200
    assert received[-1] != "[DONE]"
    error = json.loads(received[-1])["error"]
    assert error["code"] == "upstream_disconnected" and error["type"]
    text = delivered(received[:-1])
    row = record(client, response.headers["X-Audit-Id"])
    assert row["status"] == "error" and "upstream_disconnected" in row["error"]
    assert row["delivered_output"] == text and f"{len(text)} characters had been delivered" in row["error"]
    assert client.get("/v1/audits/verify").json()["ok"] is True


def test_an_upstream_killed_mid_answer_fails_a_non_streaming_request_with_502(service,
                                                                            long_upstream: ServeProcess) -> None:
    client = service({"up": upstream_entry(long_upstream)})
    killer = threading.Thread(target=kill_after_first_sentence, args=(long_upstream,))
    killer.start()
    try:
        response = chat(client, max_tokens=200)
    finally:
        killer.join()
    assert_error(response, 502, "upstream_disconnected")
    row = record(client, response.headers["X-Audit-Id"])
    assert row["status"] == "error" and row["output"]          # what the upstream had sent is kept
    assert row["delivered_output"] in (None, "")               # and the client got none of it


def kill_after_first_sentence(server: ServeProcess, timeout_s: float = 60.0) -> None:
    """Kill the upstream once it has sent its first sentence: it commits each sentence of a stream to its own
    store before flushing it (its next one is about a second away on this model)."""
    import sqlite3

    path = server.database_url.removeprefix("sqlite:///")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(path, timeout=1) as conn:
                if conn.execute("SELECT count(*) FROM stream_segments WHERE idx >= 1").fetchone()[0]:
                    break
        except sqlite3.OperationalError:
            pass
        time.sleep(0.02)
    time.sleep(0.2)          # committed, then flushed: let the flush land
    server.pause()
    server.kill()


# -- configuration -------------------------------------------------------------------------------------------


def test_an_api_replica_without_a_local_engine_serves_only_its_upstreams(upstream: ServeProcess,
                                                                          app_database_url: str) -> None:
    from fastapi.testclient import TestClient

    from auditor.app import create_app
    from tests.auditor.conftest import make_settings

    settings = make_settings(app_database_url, local_engine=False, domains=[],
                             models={"up": upstream_entry(upstream)})
    with TestClient(create_app(settings)) as client:
        ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert "up" in ids and "auditor" not in ids and not any(i.startswith("auditor-") for i in ids)
        assert client.post("/v1/chat/completions", json={"model": "up", "messages": QUESTION,
                                                         "max_tokens": 8}).status_code == 200
        assert client.post("/v1/chat/completions", json={"model": "auditor", "messages": QUESTION}).status_code == 404
