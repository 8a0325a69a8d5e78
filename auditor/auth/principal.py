"""Who is calling: API key -> (tenant, role).

Development mode (no authentication; every caller is the `default` tenant's admin) exists only while no
key has ever been created, the server is bound to loopback, and the environment is not production. Once
any key has existed the process latches: a request without a valid key gets 401 from then on, even if
the last key is revoked or the key rows disappear."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from auditor.auth.keys import find_active_key, keys_ever_created

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


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class AuthGuard:
    """Per-process authentication policy: whether development mode may apply, and the latch that ends it."""

    def __init__(self, *, environment: str, bind_host: str) -> None:
        self.development_allowed = environment != "production" and bind_host in LOOPBACK_HOSTS
        self._keys_seen = False

    @property
    def keys_required(self) -> bool:
        return self._keys_seen

    def principal_for(self, session: Session, bearer_token: str | None) -> Principal:
        """The principal a request runs as, or AuthenticationError."""
        if not self._keys_seen and keys_ever_created(session):
            self._keys_seen = True
        if not self._keys_seen:
            if self.development_allowed:
                return Principal(DEV_TENANT, "admin", None, development=True)
            raise AuthenticationError("no API key has been created yet, and development mode is off (production, or "
                                      "bound beyond loopback): create one with `auditor keys create`",
                                      code="no_api_keys")
        return principal_for_key(session, bearer_token)


def principal_for_key(session: Session, bearer_token: str | None) -> Principal:
    """The principal of a valid, unrevoked key, or AuthenticationError."""
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
