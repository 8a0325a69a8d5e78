"""`install_console(app)`: the console's routers, static files, error pages and security headers."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

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

    @app.middleware("http")
    async def _console_headers(request: Request, call_next):  # type: ignore[no-untyped-def]
        response = await call_next(request)
        if request.url.path.startswith("/console"):
            response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
            response.headers.setdefault("Referrer-Policy", "same-origin")
            if not request.url.path.startswith("/console/static"):
                response.headers.setdefault("Cache-Control", "no-store")   # trail contents stay out of caches
        return response
