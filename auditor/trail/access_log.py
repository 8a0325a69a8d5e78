"""The access log: who read what of the trail, and when. Every reader in `auditor.trail.reads` writes here
in the same transaction as its read, so no caller (router, CLI, console) can forget it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from auditor.store.base import utcnow
from auditor.store.database import ChainKey, Database
from auditor.trail.chain import chain_entries
from auditor.trail.ledgers import ACCESS
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


def _storable(text: str) -> str:
    """A caller-chosen string (an id from a URL) as the store can keep it: NUL and invalid Unicode escaped."""
    escaped = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    return escaped[:64]


def log_access(session: Session, reader: Reader, *, key: ChainKey, action: str, target: str | None = None,
               filters: dict[str, Any] | None = None, result_count: int | None = None,
               record_ids: list[str] | None = None) -> None:
    """Record a read of the trail, chained in the access ledger, in the caller's write transaction."""
    values: dict[str, Any] = {
        "at": utcnow(), "key_id": reader.key_id, "tenant": reader.tenant, "role": reader.role, "action": action,
        "target": _storable(target) if target is not None else None, "filters": filters,
        "result_count": result_count, "record_ids": record_ids,
    }
    chain_entries(session.connection(), ACCESS, [values], hmac_key=key.hmac_key,
                  checkpoint_interval=key.checkpoint_interval)
    session.add(AccessLogEntry(**values))


def access_log_query(*, tenant_scope: str | None) -> Select[tuple[AccessLogEntry]]:
    query = select(AccessLogEntry).order_by(AccessLogEntry.id.desc())
    return query if tenant_scope is None else query.where(AccessLogEntry.tenant == tenant_scope)


def log_denied(database: Database, reader: Reader, *, target: str, reason: str) -> None:
    """Record a refused read (wrong role, another tenant's records) in its own commit: the refusal that follows
    rolls nothing back."""
    with database.session(write=True) as session:
        log_access(session, reader, key=database.chain_key, action="denied", target=target[:64],
                   filters={"reason": reason[:200]})
