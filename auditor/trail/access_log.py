"""The access log: who read what of the trail, and when. Every reader in `auditor.trail.reads` writes here
in the same transaction as its read, so no caller (router, CLI, console) can forget it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from auditor.trail.models import AccessLogEntry


class Reader(Protocol):
    """Whoever reads the trail: an API key's principal, or the CLI operator."""

    @property
    def key_id(self) -> str | None: ...
    @property
    def tenant(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def tenant_scope(self) -> str | None: ...   # None: every tenant (admin)


@dataclass(frozen=True, slots=True)
class CliOperator:
    """The CLI runs with database access, so it reads as an admin; its reads are logged under this name."""

    key_id: str | None = None
    tenant: str = "(cli)"
    role: str = "admin"
    tenant_scope: str | None = None


def log_access(session: Session, reader: Reader, *, action: str, target: str | None = None,
               filters: dict[str, Any] | None = None, result_count: int | None = None) -> None:
    """Record a read of the trail (in the caller's transaction)."""
    session.add(AccessLogEntry(
        key_id=reader.key_id, tenant=reader.tenant, role=reader.role, action=action, target=target,
        filters=filters, result_count=result_count,
    ))


def access_log_query(*, tenant_scope: str | None) -> Select[tuple[AccessLogEntry]]:
    query = select(AccessLogEntry).order_by(AccessLogEntry.id.desc())
    return query if tenant_scope is None else query.where(AccessLogEntry.tenant == tenant_scope)
