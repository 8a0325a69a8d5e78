"""`install_console(app)`: the console's routers, static files, error pages and security headers."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from auditor.console import pages_admin, pages_jobs, pages_login, pages_trail
from auditor.console.auth import ConsoleForbidden, LoginRequired, login_path
from auditor.console.rendering import render

# No inline script or style anywhere in the console, so the policy can forbid both (and every other origin).
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def install_console(app: FastAPI) -> None:
    for module in (pages_login, pages_trail, pages_jobs, pages_admin):
        app.include_router(module.router)
    app.mount("/console/static", StaticFiles(directory=Path(__file__).parent / "static"), name="console-static")

    @app.exception_handler(LoginRequired)
    async def _login_required(_request: Request, exc: LoginRequired) -> Response:
        return RedirectResponse(login_path(exc.next_path), status_code=303)

    @app.exception_handler(ConsoleForbidden)
    async def _forbidden(request: Request, exc: ConsoleForbidden) -> HTMLResponse:
        return render(request, "error.html", None, status_code=403, message=str(exc))

    app.add_middleware(ConsoleHeaders)


class ConsoleHeaders:
    """Security headers on the console's responses. Plain ASGI, not `@app.middleware("http")`: Starlette's
    BaseHTTPMiddleware pipes every response, streamed inference included, through a task and a memory
    stream, a cost each SSE chunk of every API request paid for headers only console pages carry."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith("/console"):
            await self.app(scope, receive, send)
            return
        extra = [("content-security-policy", CONTENT_SECURITY_POLICY), ("x-content-type-options", "nosniff"),
                 ("referrer-policy", "same-origin")]
        if not path.startswith("/console/static"):
            extra.append(("cache-control", "no-store"))   # trail contents stay out of caches

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in extra:
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
