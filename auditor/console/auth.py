"""Who is using the console: the session cookie -> the API key it names (checked on every request) -> a
Principal, the same one the API's readers and access log take. Client keys never get a console session, and a
session that logged out is refused by every process (`auditor.console.logouts`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qsl, quote

from fastapi import Depends, Request

from auditor.api.deps import ServicesDep
from auditor.auth.keys import find_active_key
from auditor.auth.models import ApiKey
from auditor.auth.principal import Principal, RoleNotAllowed, require_role
from auditor.console.logouts import is_logged_out
from auditor.console.session import SESSION_COOKIE, ConsoleSession, SessionSigner
from auditor.store.database import Database
from auditor.trail.access_log import log_denied

CONSOLE_ROLES = ("reviewer", "auditor", "admin")
MAX_FORM_BYTES = 64_000


class LoginRequired(Exception):
    """No valid session: the handler redirects to the login page, back to `next_path` afterwards."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class ConsoleForbidden(Exception):
    """A signed-in user whose role may not do this, or a form without a valid CSRF token: a 403 page."""


@dataclass(frozen=True, slots=True)
class ConsoleUser:
    principal: Principal
    csrf_token: str
    nonce: str
    session: ConsoleSession   # what the cookie carries (logout ends it on the server)

    @property
    def role(self) -> str:
        return self.principal.role


def signer_for(request: Request) -> SessionSigner:
    signer = getattr(request.app.state, "console_signer", None)
    if signer is None:
        settings = request.app.state.services.settings
        signer = request.app.state.console_signer = SessionSigner(settings.hmac_key.get_secret_value().encode())
    return signer


def key_principal(database: Database, plaintext: str) -> Principal | None:
    """The principal of an active key given at login, or None."""
    with database.session() as session:
        key = find_active_key(session, plaintext)
        return Principal(key.tenant, key.role, key.id) if key is not None else None


def _active_key(database: Database, console_session: ConsoleSession) -> ApiKey | None:
    """The session's key, if the key is not revoked and the session did not log out."""
    with database.session() as session:
        key = session.get(ApiKey, console_session.key_id)
        if key is None or key.revoked_at is not None or is_logged_out(session, console_session.nonce):
            return None
        session.expunge(key)
        return key


def console_user(request: Request, services: ServicesDep) -> ConsoleUser:
    signer = signer_for(request)
    session = signer.read(request.cookies.get(SESSION_COOKIE))
    key = _active_key(services.database, session) if session is not None else None
    if session is None or key is None or key.role not in CONSOLE_ROLES:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(target if request.method == "GET" else "/console")
    return ConsoleUser(Principal(key.tenant, key.role, key.id), signer.csrf_token(session.nonce), session.nonce,
                       session)


UserDep = Annotated[ConsoleUser, Depends(console_user)]


def allow(user: ConsoleUser, database: Database, request: Request, *roles: str) -> Principal:
    """The user's principal if its role is one of `roles`; else a logged refusal and a 403 page."""
    try:
        return require_role(user.principal, *roles)
    except RoleNotAllowed as exc:
        log_denied(database, user.principal, target=request.url.path, reason=str(exc))
        raise ConsoleForbidden(str(exc)) from exc


async def read_form(request: Request) -> dict[str, str]:
    """An application/x-www-form-urlencoded body as a dict (the last value of a repeated field wins)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise ConsoleForbidden("form too large")
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=1000))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConsoleForbidden("unreadable form") from exc


async def checked_form(request: Request, user: UserDep) -> dict[str, str]:
    """The POSTed form, once its CSRF token is the session's."""
    form = await read_form(request)
    if not signer_for(request).csrf_valid(user.nonce, form.pop("csrf_token", None)):
        raise ConsoleForbidden("the form's CSRF token is missing or not this session's: reload the page and retry")
    return form


FormDep = Annotated[dict[str, str], Depends(checked_form)]


def login_path(next_path: str) -> str:
    return "/console/login?next=" + quote(next_path, safe="")
