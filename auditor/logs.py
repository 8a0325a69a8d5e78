"""Log lines every process writes the same way: JSON lines for a log pipeline, readable text on a terminal.

Each line carries timestamp, level, logger and message, and the request it belongs to wherever that is known:
`audit_id`, `request_id`, `tenant`, `trace_id`. Code on a request's path says what it knows with `bind(...)`
(the request middleware opens one context per request; the worker one per task), and the filter adds it to every
record logged under that context, from any module. The context is one dict shared by reference, so what a route
running in the threadpool binds is seen by the middleware's closing line too.

`AUDITOR_LOG_FORMAT`: auto (JSON unless stderr is a terminal), json or text."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from pythonjsonlogger.json import JsonFormatter

LogFormat = Literal["auto", "json", "text"]
CONTEXT_FIELDS = ("audit_id", "request_id", "tenant", "trace_id", "job_id")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s%(context)s"

_context: ContextVar[dict[str, Any] | None] = ContextVar("auditor_log_context", default=None)


@contextmanager
def log_context(**fields: Any) -> Iterator[dict[str, Any]]:
    """A fresh context for one request or task; `bind` adds to it from anywhere below."""
    values = {name: value for name, value in fields.items() if value is not None}
    token = _context.set(values)
    try:
        yield values
    finally:
        _context.reset(token)


def bind(**fields: Any) -> None:
    """Add what is now known (an audit id, a tenant) to the current request's or task's context. Outside one
    (a direct call, a test) it does nothing: a context set here would outlive the request and name it on every
    later line of the thread."""
    values = _context.get()
    if values is not None:
        values.update({name: value for name, value in fields.items() if value is not None})


def current() -> dict[str, Any]:
    return dict(_context.get() or {})


class ContextFilter(logging.Filter):
    """Adds the context's fields to each record (JSON: as keys; text: as one ` [audit_id=...]` suffix)."""

    def filter(self, record: logging.LogRecord) -> bool:
        values = _context.get() or {}
        for name in CONTEXT_FIELDS:
            if name in values and not hasattr(record, name):
                setattr(record, name, values[name])
        shown = " ".join(f"{name}={getattr(record, name)}" for name in CONTEXT_FIELDS if getattr(record, name, None))
        record.context = f" [{shown}]" if shown else ""
        return True


class _Json(JsonFormatter):
    def process_log_record(self, log_record: dict[str, Any]) -> dict[str, Any]:
        log_record.pop("context", None)   # the text form's suffix; JSON has the fields themselves
        return log_record


def json_formatter() -> logging.Formatter:
    return _Json("{levelname}{name}{message}", style="{", timestamp=True,
                 rename_fields={"levelname": "level", "name": "logger"})


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a line is written (as logging's last-resort handler does), so a
    replaced or redirected stderr never leaves the handler writing to a closed stream."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure(log_format: LogFormat = "auto", *, level: int | str = logging.INFO,
              stream: Any = None, force: bool = False) -> logging.Handler | None:
    """Give the root logger one handler that writes `log_format` to `stream` (default: stderr, as it is at each
    write). Like `logging.basicConfig`, it leaves a root logger that already has handlers alone (a host that
    embeds the service, or a test run, chose its own) unless `force`; returns the handler it installed."""
    root = logging.getLogger()
    if root.handlers and not force:
        return None
    chosen = log_format if log_format != "auto" else ("text" if _is_terminal(stream or sys.stderr) else "json")
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler.addFilter(ContextFilter())
    handler.setFormatter(json_formatter() if chosen == "json" else logging.Formatter(_TEXT))
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
