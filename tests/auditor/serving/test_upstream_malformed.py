"""Malformed upstream replies, from a fake OpenAI-compatible server over real HTTP (a real upstream cannot be
made to produce them). Each must end as 502 `upstream_malformed` (or `upstream_disconnected` for a stream
cut short) in the OpenAI error shape, with an error record; none may reach the client as an answer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from auditor.app import create_app
from benchmarks.serve_process import free_port
from tests.auditor.conftest import FakeEngine, make_settings

pytestmark = pytest.mark.timeout(120)


def _chunk(content: Any, finish: str | None = None) -> str:
    return "data: " + json.dumps({"id": "x", "choices": [{"index": 0, "delta": {"content": content},
                                                           "finish_reason": finish}]}) + "\n\n"


REPLIES: dict[str, Any] = {
    "invalid-json": lambda: Response("{not json", media_type="application/json"),
    "no-choices": lambda: JSONResponse({"id": "x", "object": "chat.completion"}),
    "choice-not-object": lambda: JSONResponse({"choices": ["hello"]}),
    "content-not-text": lambda: JSONResponse({"choices": [{"message": {"content": 42}, "finish_reason": "stop"}]}),
    "html-page": lambda: PlainTextResponse("<html>proxy error</html>", media_type="text/html"),
    "stream-garbage": lambda: StreamingResponse(iter([_chunk("Hello. "), "data: <<garbage>>\n\n"]),
                                                media_type="text/event-stream"),
    "stream-not-object": lambda: StreamingResponse(iter(["data: [1, 2]\n\n"]), media_type="text/event-stream"),
    "stream-delta-not-object": lambda: StreamingResponse(
        iter(["data: " + json.dumps({"choices": [{"delta": "text"}]}) + "\n\n"]), media_type="text/event-stream"),
    "stream-cut-short": lambda: StreamingResponse(iter([_chunk("Metformin lowers glucose. "), _chunk("It is")]),
                                                  media_type="text/event-stream"),
    "stream-error-event": lambda: StreamingResponse(
        iter([_chunk("Fine so far. "), 'data: {"error": {"message": "engine exploded", "code": "x"}}\n\n']),
        media_type="text/event-stream"),
}
EXPECTED = {"stream-cut-short": "upstream_disconnected", "stream-error-event": "upstream_error"}


@pytest.fixture(scope="module")
def fake_upstream() -> Iterator[str]:
    async def completions(request: Request) -> Response:
        body = await request.json()
        return REPLIES[body["model"]]()

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def client(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The service, with each reply as a model twice: read as a stream (the default) and as one JSON body."""
    models = {f"{name}{suffix}": {"upstream": {"base_url": fake_upstream, "model": name, "connect_retries": 0,
                                               "stream": not suffix}}
              for name in REPLIES for suffix in ("", "-plain")}
    settings = make_settings(f"sqlite:///{tmp_path_factory.mktemp('malformed') / 'audit.db'}", models=models)
    with TestClient(create_app(settings, engine=FakeEngine())) as test_client:
        yield test_client


@pytest.mark.parametrize("name", sorted(REPLIES))
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("suffix", ["", "-plain"])
def test_a_malformed_reply_is_a_502_in_the_openai_shape_with_an_error_record(client: TestClient, name: str,
                                                                             stream: bool, suffix: str) -> None:
    body = {"model": name + suffix, "messages": [{"role": "user", "content": "Hi"}], "stream": stream}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        raw = response.read().decode()
    if response.status_code == 200:        # a stream that had begun: the error is its last event
        assert stream
        lines = [line.removeprefix("data: ") for line in raw.splitlines() if line.startswith("data: ")]
        assert lines[-1] != "[DONE]"
        error = json.loads(lines[-1])["error"]
    else:
        assert response.status_code == 502, raw
        error = json.loads(raw)["error"]
    assert error["code"] == EXPECTED.get(name, "upstream_malformed"), error
    assert error["type"] and error["message"]
    audit_id = response.headers["X-Audit-Id"]
    row = client.get(f"/v1/audits/{audit_id}").json()
    assert row["status"] == "error" and error["code"] in row["error"]
    assert "<<garbage>>" not in (row["delivered_output"] or "")
