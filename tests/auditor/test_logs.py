"""Structured logs (issue 42): JSON lines with the request's audit id, request id and tenant wherever known,
readable text on a terminal, and one warning line with its cause for every refused or failed request."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from auditor.logs import bind, configure, log_context


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def root_logging() -> Iterator[None]:
    """configure() replaces the root handlers; put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_a_json_line_carries_the_requests_context(root_logging) -> None:
    stream = io.StringIO()
    configure("auto", stream=stream, force=True)          # not a terminal: JSON
    with log_context(request_id="req-1"):
        bind(tenant="acme", audit_id="a-1")
        logging.getLogger("auditor.gate").warning("blocked %s", "a dose")
    logging.getLogger("auditor").info("outside any request")
    inside, outside = _lines(stream)
    assert {"timestamp", "level", "logger", "message"} <= set(inside)
    assert (inside["level"], inside["logger"], inside["message"]) == ("WARNING", "auditor.gate", "blocked a dose")
    assert (inside["audit_id"], inside["request_id"], inside["tenant"]) == ("a-1", "req-1", "acme")
    assert "audit_id" not in outside and "context" not in outside


def test_a_terminal_gets_readable_text(root_logging) -> None:
    stream = _Terminal()
    configure("auto", stream=stream, force=True)
    with log_context(audit_id="a-2"):
        logging.getLogger("auditor").info("scored")
    line = stream.getvalue().strip()
    assert not line.startswith("{") and "INFO auditor: scored [audit_id=a-2]" in line


def test_what_a_thread_binds_reaches_the_requests_context(root_logging) -> None:
    # routes run in the threadpool with a copy of the context: the dict is shared, so the middleware sees it
    import contextvars
    import threading

    with log_context() as values:
        context = contextvars.copy_context()
        thread = threading.Thread(target=lambda: context.run(bind, tenant="beta"))
        thread.start()
        thread.join()
        assert values["tenant"] == "beta"


def test_every_refused_request_logs_one_warning_with_its_cause(app_factory, root_logging) -> None:
    client = app_factory()
    stream = io.StringIO()
    configure("json", stream=stream, force=True)
    response = client.post("/v1/chat/completions", headers={"X-Request-Id": "client-42"},
                           json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "n": 0})
    assert 400 <= response.status_code < 500
    warnings = [line for line in _lines(stream) if line["logger"] == "auditor.http"]
    assert len(warnings) == 1
    [line] = warnings
    code = response.json()["error"]["code"]
    assert line["level"] == "WARNING" and str(response.status_code) in line["message"] and code in line["message"]
    assert line["request_id"] == "client-42" and line["tenant"]
    # a request that succeeds logs no such line
    ok = client.post("/v1/chat/completions", json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
    assert ok.status_code == 200
    assert len([line for line in _lines(stream) if line["logger"] == "auditor.http"]) == 1


def test_a_host_that_configured_logging_keeps_its_handlers(root_logging) -> None:
    # `auditor serve` run inside another program (or a test) must not take over its logging
    stream = io.StringIO()
    logging.getLogger().addHandler(logging.StreamHandler(stream))
    before = list(logging.getLogger().handlers)
    assert configure("json") is None and logging.getLogger().handlers == before


def test_the_default_handler_follows_stderr(root_logging, monkeypatch: pytest.MonkeyPatch) -> None:
    # a handler holding the stderr of its day writes to a closed file once stderr is swapped (tests, daemons)
    configure("json", force=True)
    for _ in range(2):
        swapped = io.StringIO()
        monkeypatch.setattr("sys.stderr", swapped)
        logging.getLogger("auditor").warning("to the current stderr")
        assert "to the current stderr" in swapped.getvalue()
