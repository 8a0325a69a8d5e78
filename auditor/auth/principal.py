"""Who is calling: API key -> (tenant, role). With no keys configured the service is in development
mode: every caller is the `default` tenant's admin and any bearer token is ignored."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from auditor.api.errors import ApiError
from auditor.auth.keys import any_active_key, find_active_key

DEV_TENANT = "default"


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    role: str                 # client | auditor | admin
    key_id: str | None
    development: bool = False

    @property
    def tenant_scope(self) -> str | None:
        """The tenant whose records this caller may read; None means all tenants (admin)."""
        return None if self.role == "admin" else self.tenant


def authenticate(request: Request) -> Principal:
    """FastAPI dependency: the caller, or 401. Runs in a worker thread (it queries the database)."""
    database = request.app.state.services.database
    with database.session() as session:
        if not any_active_key(session):
            return Principal(DEV_TENANT, "admin", None, development=True)
        token = _bearer_token(request.headers.get("authorization"))
        if token is None:
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key")
        key = find_active_key(session, token)
        if key is None:
            raise ApiError(401, "invalid or revoked API key", code="invalid_api_key")
        return Principal(key.tenant, key.role, key.id)


def _bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def require_role(principal: Principal, *roles: str) -> Principal:
    if principal.role not in roles:
        raise ApiError(403, f"role {principal.role!r} may not do this (needs {' or '.join(roles)})",
                       code="insufficient_role")
    return principal
