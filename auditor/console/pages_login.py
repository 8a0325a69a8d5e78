"""Login with an API key (auditor, reviewer or admin) into a session cookie, and logout (which ends the session
on the server too, so a copy of the cookie is refused from then on)."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from auditor.api.deps import ServicesDep
from auditor.console.auth import CONSOLE_ROLES, FormDep, UserDep, key_principal, read_form, signer_for
from auditor.console.logouts import log_out
from auditor.console.rendering import render
from auditor.console.session import LOGIN_COOKIE, LOGIN_TTL_S, SESSION_COOKIE, SESSION_TTL_S
from auditor.trail.access_log import log_denied

router = APIRouter(prefix="/console")


def _safe_next(target: str | None) -> str:
    """Only a console path: never another site (an open redirect) nor a protocol-relative URL."""
    if target and target.startswith("/console") and not target.startswith("//") and "\\" not in target:
        return target
    return "/console"


def _cookie_flags(request: Request) -> dict[str, object]:
    production = request.app.state.services.settings.environment == "production"
    return {"httponly": True, "samesite": "strict", "path": "/console",
            "secure": production or request.url.scheme == "https"}


@router.get("/login", response_class=HTMLResponse, include_in_schema=False)
def login_form(request: Request, next: str | None = None) -> HTMLResponse:   # noqa: A002 - the query's name
    return _login_page(request, next_path=_safe_next(next), error=None)


def _login_page(request: Request, *, next_path: str, error: str | None, status_code: int = 200) -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    response = render(request, "login.html", None, status_code=status_code, next_path=next_path, error=error,
                      csrf_token=signer_for(request).csrf_token("login:" + nonce))
    response.set_cookie(LOGIN_COOKIE, nonce, max_age=LOGIN_TTL_S, **_cookie_flags(request))
    return response


@router.post("/login", include_in_schema=False)
async def login(request: Request, services: ServicesDep) -> Response:
    form = await read_form(request)
    next_path = _safe_next(form.get("next"))
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not nonce or not signer_for(request).csrf_valid("login:" + nonce, form.get("csrf_token")):
        return _login_page(request, next_path=next_path, status_code=403,
                           error="The login form expired or came from elsewhere: please try again.")
    principal = key_principal(services.database, form.get("api_key", "").strip()) if form.get("api_key") else None
    if principal is None:
        return _login_page(request, next_path=next_path, status_code=401, error="Unknown or revoked API key.")
    if principal.role not in CONSOLE_ROLES:
        log_denied(services.database, principal, target="/console/login", reason="client keys may not use the console")
        return _login_page(request, next_path=next_path, status_code=403,
                           error="This key's role may not use the console (it needs reviewer, auditor or admin).")
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(SESSION_COOKIE, signer_for(request).issue(principal.key_id or ""), max_age=SESSION_TTL_S,
                        **_cookie_flags(request))
    response.delete_cookie(LOGIN_COOKIE, path="/console")
    return response


@router.post("/logout", include_in_schema=False)
def logout(request: Request, services: ServicesDep, user: UserDep, form: FormDep) -> Response:
    log_out(services.database, user.session)
    response = RedirectResponse("/console/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/console", httponly=True, samesite="strict")
    return response
