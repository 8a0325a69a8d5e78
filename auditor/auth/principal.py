"""Who is calling: API key -> (tenant, role). With no keys configured the service is in development
mode: every caller is the `default` tenant's admin and any bearer token is ignored."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from auditor.auth.keys import any_active_key, find_active_key

DEV_TENANT = "default"


class AuthenticationError(Exception):
    """No usable credentials: `code` says which case (missing_api_key | invalid_api_key)."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class RoleNotAllowed(PermissionError):
    """The caller's role may not do this."""


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


def principal_for(session: Session, bearer_token: str | None) -> Principal:
    """The principal a request runs as, or AuthenticationError."""
    if not any_active_key(session):
        return Principal(DEV_TENANT, "admin", None, development=True)
    if bearer_token is None:
        raise AuthenticationError("missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key")
    key = find_active_key(session, bearer_token)
    if key is None:
        raise AuthenticationError("invalid or revoked API key", code="invalid_api_key")
    return Principal(key.tenant, key.role, key.id)


def require_role(principal: Principal, *roles: str) -> Principal:
    if principal.role not in roles:
        raise RoleNotAllowed(f"role {principal.role!r} may not do this (needs {' or '.join(roles)})")
    return principal
