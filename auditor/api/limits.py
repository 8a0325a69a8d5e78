"""Reject request bodies over `max_body_bytes` with 413, whether or not Content-Length is sent."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from auditor.api.errors import error_body


class _BodyTooLarge(Exception):
    pass


class BodySizeLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(send)
            return
        received = 0
        too_large = False

        async def counting_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # Frameworks turn exceptions raised while reading the body into their own 400, so
                    # flag it, stop the read, and swap whatever response the app makes for a 413.
                    too_large = True
                    raise _BodyTooLarge
            return message

        replaced = False

        async def replacing_send(message: Message) -> None:
            nonlocal replaced
            if not too_large:
                await send(message)
            elif not replaced:
                replaced = True
                await self._reject(send)

        try:
            await self.app(scope, counting_receive, replacing_send)
        except _BodyTooLarge:
            if not replaced:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        body = json.dumps(error_body(413, f"request body exceeds {self.max_bytes} bytes", "request_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
