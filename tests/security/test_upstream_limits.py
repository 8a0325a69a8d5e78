"""Issue 43, findings 8 and 10: an upstream model that tries to exhaust the service or leak through its errors.

The upstream here is a raw TCP server on 127.0.0.1 (a framework would not let it dribble headers or hold a line
open), one behaviour per upstream model name:

- finding 8: a reply dribbled byte by byte (headers, JSON body, error body, one SSE line) must end at the
  upstream's `total_timeout_s`, not when the upstream stops; a body, an SSE line or an answer past its cap
  must end as 502 `upstream_too_large`; each with an error record.
- finding 10: an upstream 500 body, a JSON `error` body, an SSE `error` event and a malformed SSE event that
  carry an e-mail address and a card number must not reach the client verbatim, and the record's `error`
  field (chained, never purged) keeps them only as the content mode allows.
"""

from __future__ import annotations

import asyncio
import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from auditor.serving.upstream import UpstreamError, _Deadline, _lines
from tests.auditor.sse import delivered, events

pytestmark = pytest.mark.timeout(120)

DRIBBLE_S = 6.0            # how long a dribbling upstream keeps going (the old code waited it out)
TOTAL_TIMEOUT_S = 1.0      # the upstream's configured bound on the whole exchange
WITHIN_S = 4.0             # what a bounded exchange may take here, record commit included, on a loaded host
EMAIL, CARD = "jane.doe@example.com", "4111 1111 1111 1111"
LEAK = f"quota exceeded for {EMAIL}, card {CARD}"

# -- the hostile upstream ------------------------------------------------------------------------------------


def _chunk(content: str, finish: str | None = None) -> bytes:
    event = {"id": "x", "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _answer(content: str = "Fine.", **extra: Any) -> bytes:
    return json.dumps({"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                "finish_reason": "stop"}], **extra}).encode()


def _head(status: str = "200 OK", content_type: str = "application/json", length: int | None = None) -> bytes:
    """A response head; without a length the body runs until the connection closes."""
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _dribble(sock: socket.socket, piece: bytes, *, interval_s: float = 0.1, seconds: float = DRIBBLE_S) -> None:
    """`piece` every `interval_s` (well inside the read timeout) for `seconds`; stops when the service hangs up."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        sock.sendall(piece)
        time.sleep(interval_s)


def _dribbled_json(sock: socket.socket) -> None:
    sock.sendall(_head())
    _dribble(sock, b" ")                     # JSON may start with any amount of whitespace
    sock.sendall(_answer())


def _dribbled_headers(sock: socket.socket) -> None:
    body = _answer()
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: ")
    _dribble(sock, b"a")
    sock.sendall(f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)


def _dribbled_error_body(sock: socket.socket) -> None:
    sock.sendall(_head("500 Internal Server Error"))
    _dribble(sock, b" ")
    sock.sendall(b'{"error": {"message": "overloaded"}}')


def _dribbled_line(sock: socket.socket) -> None:
    sock.sendall(_head(content_type="text/event-stream") + b'data: {"choices": [{"delta": {"content": "')
    _dribble(sock, b"a" * 4096)              # one line that never ends (about 240 KB in all)


def _long_line(sock: socket.socket) -> None:
    sock.sendall(_head(content_type="text/event-stream") + _chunk("x" * (3 * 2**20 // 2)) + b"data: [DONE]\n\n")


_PADDING = "p" * (9 * 2**20)                 # past the default 8 MiB body cap


def _huge_body(sock: socket.socket) -> None:
    body = _answer(padding=_PADDING)
    sock.sendall(_head(length=len(body)) + body)


def _huge_body_unannounced(sock: socket.socket) -> None:
    sock.sendall(_head() + _answer(padding=_PADDING))


_SENTENCES = "".join(f"Sentence number {i} is fine. " for i in range(200))   # about 5,600 characters


def _long_answer_stream(sock: socket.socket) -> None:
    sock.sendall(_head(content_type="text/event-stream"))
    for start in range(0, len(_SENTENCES), 50):
        sock.sendall(_chunk(_SENTENCES[start:start + 50]))
    sock.sendall(_chunk("", "stop") + b"data: [DONE]\n\n")


def _long_answer_body(sock: socket.socket) -> None:
    body = _answer(_SENTENCES)
    sock.sendall(_head(length=len(body)) + body)


def _error_500_with_pii(sock: socket.socket) -> None:
    body = json.dumps({"error": {"message": LEAK, "type": "server_error"}}).encode()
    sock.sendall(_head("500 Internal Server Error", length=len(body)) + body)


def _error_body_with_pii(sock: socket.socket) -> None:
    body = json.dumps({"error": {"message": LEAK}}).encode()
    sock.sendall(_head(length=len(body)) + body)


def _error_event_with_pii(sock: socket.socket) -> None:
    sock.sendall(_head(content_type="text/event-stream") + _chunk("Fine so far. ")
                 + b"data: " + json.dumps({"error": {"message": LEAK}}).encode() + b"\n\n")


def _malformed_event_with_pii(sock: socket.socket) -> None:
    sock.sendall(_head(content_type="text/event-stream") + _chunk("Fine so far. ")
                 + f"data: <{LEAK}>\n\n".encode())


BEHAVIOURS: dict[str, Callable[[socket.socket], None]] = {
    "dribbled-json": _dribbled_json, "dribbled-headers": _dribbled_headers,
    "dribbled-error-body": _dribbled_error_body, "dribbled-line": _dribbled_line, "long-line": _long_line,
    "huge-body": _huge_body, "huge-body-unannounced": _huge_body_unannounced,
    "long-answer-stream": _long_answer_stream, "long-answer-body": _long_answer_body,
    "error-500-pii": _error_500_with_pii, "error-body-pii": _error_body_with_pii,
    "error-event-pii": _error_event_with_pii, "malformed-event-pii": _malformed_event_with_pii,
}


class _Upstream(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(15)
        try:
            raw = b""
            while b"\r\n\r\n" not in raw:
                raw += sock.recv(65536) or b"\r\n\r\n"
            head, _, body = raw.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += sock.recv(65536) or b""
            BEHAVIOURS[json.loads(body)["model"]](sock)
        except (OSError, ValueError, KeyError):
            pass                               # the service hung up (what a bounded reader does), or a bad request
        finally:
            sock.close()


@pytest.fixture(scope="module")
def hostile_upstream() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Upstream)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _models(base_url: str, **config: Any) -> dict[str, Any]:
    """Each behaviour as a model read as a stream (its name) and as one JSON body (name + "-plain")."""
    return {f"{name}{suffix}": {"upstream": {"base_url": base_url, "model": name, "connect_retries": 0,
                                             "stream": not suffix, **config}}
            for name in BEHAVIOURS for suffix in ("", "-plain")}


def _ask(client, model: str, *, stream: bool, max_tokens: int = 64) -> tuple[int, str, dict[str, Any], float, str]:
    """(status, body, the error the client got, seconds taken, the audit id)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "stream": stream,
            "max_tokens": max_tokens}
    started = time.monotonic()
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        raw = response.read().decode()
    elapsed = time.monotonic() - started
    if response.status_code == 200 and stream:      # a stream that had begun: the error is its last event
        last = events(raw)[-1]
        error = {} if last == "[DONE]" else json.loads(last).get("error", {})
    else:
        error = json.loads(raw).get("error", {}) if response.status_code != 200 else {}
    return response.status_code, raw, error, elapsed, response.headers.get("x-audit-id", "")


def _record(client, audit_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/audits/{audit_id}")
    assert response.status_code == 200, response.text
    return response.json()


# -- finding 8: deadlines hold inside every read --------------------------------------------------------------


@pytest.mark.parametrize("model", ["dribbled-json-plain", "dribbled-json", "dribbled-headers",
                                   "dribbled-error-body", "dribbled-line"])
def test_finding_8_a_dribbling_upstream_ends_at_the_total_timeout(app_on, sqlite_store: str,
                                                                   hostile_upstream: str, model: str) -> None:
    client = app_on(sqlite_store, models=_models(hostile_upstream, total_timeout_s=TOTAL_TIMEOUT_S))
    status, raw, error, elapsed, audit_id = _ask(client, model, stream=False)
    assert elapsed < WITHIN_S, f"{model}: {status} after {elapsed:.1f}s (the upstream dribbled for {DRIBBLE_S}s)"
    assert status == 504 and error.get("code") == "upstream_timeout", raw[:300]
    assert "total_timeout_s" in error["message"] and error["type"]
    row = _record(client, audit_id)
    assert row["status"] == "error" and "upstream_timeout" in row["error"]


def test_finding_8_a_dribbling_stream_line_ends_the_client_stream_at_the_total_timeout(
        app_on, sqlite_store: str, hostile_upstream: str) -> None:
    client = app_on(sqlite_store, models=_models(hostile_upstream, total_timeout_s=TOTAL_TIMEOUT_S))
    status, raw, error, elapsed, audit_id = _ask(client, "dribbled-line", stream=True)
    assert elapsed < WITHIN_S, f"{status} after {elapsed:.1f}s"
    assert status == 504 and error.get("code") == "upstream_timeout", raw[:300]   # nothing had been sent yet
    assert _record(client, audit_id)["status"] == "error"


# -- finding 8: sizes are capped --------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["huge-body-plain", "huge-body-unannounced-plain", "long-line",
                                   "long-answer-body-plain"])
def test_finding_8_an_oversized_reply_is_a_502_with_an_error_record(app_on, sqlite_store: str,
                                                                     hostile_upstream: str, model: str) -> None:
    client = app_on(sqlite_store, models=_models(hostile_upstream))
    status, raw, error, elapsed, audit_id = _ask(client, model, stream=False, max_tokens=16)
    assert status == 502 and error.get("code") == "upstream_too_large", f"{status}: {raw[:300]}"
    assert error["type"] and error["message"] and elapsed < 30
    row = _record(client, audit_id)
    assert row["status"] == "error" and "upstream_too_large" in row["error"]
    assert len(row["output"] or "") < 4096          # the oversized answer was not kept either


def test_finding_8_a_streamed_answer_past_its_cap_ends_with_an_error_event(app_on, sqlite_store: str,
                                                                             hostile_upstream: str) -> None:
    # 16 tokens cannot come to 5,600 characters: the stream stops at the answer cap, with an error event
    client = app_on(sqlite_store, models=_models(hostile_upstream))
    status, raw, error, _, audit_id = _ask(client, "long-answer-stream", stream=True, max_tokens=16)
    assert error.get("code") == "upstream_too_large", f"{status}: {raw[-300:]}"
    sent = delivered([line for line in events(raw) if line != "[DONE]" and "error" not in json.loads(line)])
    assert len(sent) < len(_SENTENCES) // 2
    row = _record(client, audit_id)
    assert row["status"] == "error" and "upstream_too_large" in row["error"]


# -- finding 10: upstream error text is neither echoed raw nor stored in clear ---------------------------------

PII_CASES = [("error-500-pii-plain", False), ("error-500-pii", True), ("error-body-pii-plain", False),
             ("error-event-pii", False), ("error-event-pii", True), ("malformed-event-pii", False),
             ("malformed-event-pii", True)]


def _leaks(value: str) -> bool:
    return EMAIL in value or CARD in value or CARD.replace(" ", "") in value


def test_finding_10_upstream_error_text_is_redacted_for_the_client_and_in_the_record(
        app_on, sql, store_url: str, hostile_upstream: str) -> None:
    client = app_on(store_url, models=_models(hostile_upstream))   # default content mode: redacted
    ids = []
    for model, stream in PII_CASES:
        status, raw, error, _, audit_id = _ask(client, model, stream=stream)
        assert error.get("code") in ("upstream_error", "upstream_malformed"), f"{model}: {status} {raw[-300:]}"
        assert not _leaks(raw), f"{model} (stream={stream}) echoed the upstream's PII: {raw[-300:]}"
        ids.append(audit_id)
        if model.startswith("error-500"):
            assert "500" in error["message"]      # still says what failed
    with sql(store_url).connect() as conn:
        stored = dict(conn.execute(text("SELECT id, error FROM audit_records WHERE status = 'error'")).all())
    assert set(ids) <= set(stored)
    for audit_id, model in zip(ids, [m for m, _ in PII_CASES], strict=True):
        assert not _leaks(stored[audit_id]), f"{model}: stored in clear: {stored[audit_id]}"
        assert "upstream_" in stored[audit_id]
    assert any("[EMAIL]" in value for value in stored.values())   # redacted, not just dropped


@pytest.mark.parametrize("mode", ["raw", "hash"])
def test_finding_10_the_stored_upstream_error_follows_the_content_mode(app_on, sql, sqlite_store: str,
                                                                        hostile_upstream: str, mode: str) -> None:
    client = app_on(sqlite_store, models=_models(hostile_upstream), default_content_mode=mode)
    status, raw, error, _, audit_id = _ask(client, "error-500-pii-plain", stream=False)
    assert status == 502 and error["code"] == "upstream_error" and not _leaks(raw)   # the client never sees it
    with sql(sqlite_store).connect() as conn:
        stored = conn.execute(text("SELECT error FROM audit_records WHERE id = :id"), {"id": audit_id}).scalar()
    if mode == "raw":
        assert EMAIL in stored                    # the operator chose to keep text as it was
    else:
        assert "quota exceeded" not in stored and not _leaks(stored)   # "hash" keeps no text


# -- the bounded line reader keeps the event-stream framing ------------------------------------------------------


def _read_lines(pieces: list[bytes], limit: int = 4096) -> list[str]:
    class Pieces(httpx.AsyncByteStream):
        async def __aiter__(self):
            for piece in pieces:      # each one network read
                yield piece

    async def go() -> list[str]:
        response = httpx.Response(200, stream=Pieces())
        return [line async for line in _lines(response, _Deadline(5.0), limit)]

    return asyncio.run(go())


def test_lines_end_at_crlf_lf_or_cr_wherever_the_reads_split_them() -> None:
    assert _read_lines([b"data: a\r", b"\ndata: b\n", b"\ndata: c\rdata: d\r\n", b"data: e"]) == [
        "data: a", "data: b", "", "data: c", "data: d", "data: e"]
    assert _read_lines([b"x" * 3000, b"x" * 1096 + b"\n"]) == ["x" * 4096]       # at the cap: still a line
    with pytest.raises(Exception, match="max_line_bytes"):
        _read_lines([b"x" * 3000, b"x" * 1097])                                      # past it, unended
    with pytest.raises(Exception, match="max_line_bytes"):
        _read_lines([b"x" * 5000 + b"\ndata: [DONE]\n"])                            # past it, in one read


def test_the_deadline_cancels_a_read_in_progress_but_never_the_work_between_reads() -> None:
    async def go() -> None:
        between = _Deadline(0.2)
        await between.within(asyncio.sleep(0))
        await asyncio.sleep(0.4)                   # the caller's own work (the gate, a commit) across the deadline
        with pytest.raises(UpstreamError, match="total_timeout_s"):
            await between.within(asyncio.sleep(0))   # the next read fails at once
        reading = _Deadline(0.2)
        started = time.monotonic()
        with pytest.raises(UpstreamError, match="total_timeout_s"):
            await reading.within(asyncio.sleep(30))  # a read that would outlast it is cut at it
        assert time.monotonic() - started < 2
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0   # its own cancel was taken back
        for deadline in (between, reading):
            deadline.close()

    asyncio.run(go())


def test_a_cancel_from_elsewhere_during_a_read_stays_a_cancel() -> None:
    async def go() -> None:
        deadline = _Deadline(30)
        reader = asyncio.create_task(deadline.within(asyncio.sleep(30)))
        await asyncio.sleep(0.05)
        reader.cancel()                            # the client went away
        with pytest.raises(asyncio.CancelledError):
            await reader
        deadline.close()

    asyncio.run(go())
