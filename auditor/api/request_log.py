"""One log context per HTTP request, and one warning line for every answer it refuses or fails.

The route binds what it learns (`auditor.logs.bind`: the request id, tenant, audit id); this middleware opens
the context, takes the audit and request ids from the response headers too, and for a 4xx or 5xx logs the status,
the route and the cause from the OpenAI-shaped error body (`code: message`), so an operator sees why without
the client's help. Streams that fail after their 200 log their own error where it happens."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from auditor.logs import bind, log_context

logger = logging.getLogger("auditor.http")
_CAUSE_BYTES = 4096   # enough of an error body for its code and message
_PRINTABLE_ID = re.compile(r"[\x21-\x7e]{1,128}")   # a client's X-Request-Id as the API accepts it


class RequestLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0
        body = bytearray()

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in message.get("headers", [])}
                bind(audit_id=headers.get("x-audit-id"), request_id=headers.get("x-request-id"))
            elif message["type"] == "http.response.body" and status >= 400 and len(body) < _CAUSE_BYTES:
                body.extend(message.get("body", b"")[:_CAUSE_BYTES - len(body)])
            await send(message)

        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        with log_context(request_id=given if _PRINTABLE_ID.fullmatch(given) else None):
            try:
                await self.app(scope, receive, watch)
            finally:
                if status >= 400:
                    log = logger.error if status >= 500 else logger.warning
                    log("%s %s answered %d: %s", scope.get("method"), scope.get("path"), status, _cause(bytes(body)))


def _cause(body: bytes) -> str:
    try:
        error: Any = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", "replace") or "(no body)"
    if not isinstance(error, dict):
        return str(error)[:300]
    return f"{error.get('code') or error.get('type')}: {str(error.get('message'))[:300]}"
