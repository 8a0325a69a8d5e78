"""The access log: who read what of the trail, and when. Every reader in `auditor.trail.reads` writes here
in the same transaction as its read, so no caller (router, CLI, console) can forget it.

`read_log` answers "who read record X" and "what did key K read": each entry that showed records is
indexed by record id (`access_reads`), and reading the log is itself a logged read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Select, insert, select
from sqlalchemy.orm import Session

from auditor.store.base import utcnow
from auditor.store.database import ChainKey, Database
from auditor.trail.chain import chain_entries
from auditor.trail.ledgers import ACCESS
from auditor.trail.models import AccessLogEntry, AccessRead
from auditor.trail.schemas import AccessEntryOut, AccessLogFilters


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
    entry = AccessLogEntry(**values)
    session.add(entry)
    if record_ids:
        session.flush()   # the entry's id, for its index rows
        session.execute(insert(AccessRead), [{"access_id": entry.id, "record_id": rid} for rid in dict.fromkeys(record_ids)])


def access_log_query(filters: AccessLogFilters, *, tenant_scope: str | None) -> Select[tuple[AccessLogEntry]]:
    """Entries matching `filters`, newest first. A tenant's reader sees its own tenant's entries only."""
    query = select(AccessLogEntry).order_by(AccessLogEntry.id.desc())
    tenant = tenant_scope if tenant_scope is not None else filters.tenant
    conditions = [AccessLogEntry.tenant == tenant] if tenant is not None else []
    for column, value in ((AccessLogEntry.key_id, filters.key_id), (AccessLogEntry.action, filters.action),
                          (AccessLogEntry.role, filters.role)):
        if value is not None:
            conditions.append(column == value)
    if filters.since is not None:
        conditions.append(AccessLogEntry.at >= filters.since)
    if filters.until is not None:
        conditions.append(AccessLogEntry.at < filters.until)
    if filters.record_id is not None:
        conditions.append(AccessLogEntry.id.in_(
            select(AccessRead.access_id).where(AccessRead.record_id == filters.record_id)))
    if filters.cursor is not None:
        conditions.append(AccessLogEntry.id < filters.cursor)
    return query.where(*conditions)


def read_log(database: Database, reader: Reader, filters: AccessLogFilters) -> tuple[list[AccessEntryOut], int | None]:
    """One page of the access log and the next page's cursor; the read itself is logged first, so it shows
    up in its own answer when it matches."""
    if filters.tenant is not None and reader.tenant_scope is not None and filters.tenant != reader.tenant_scope:
        reason = "only admins may read other tenants' access log"
        log_denied(database, reader, target=f"access_log:tenant={filters.tenant}", reason=reason)
        raise PermissionError(reason)
    with database.session(write=True) as session:
        log_access(session, reader, key=database.chain_key, action="access_log",
                   filters=filters.model_dump(mode="json", exclude_none=True))
        session.flush()
        rows = list(session.execute(
            access_log_query(filters, tenant_scope=reader.tenant_scope).limit(filters.limit + 1)).scalars())
        cursor = rows[filters.limit - 1].id if len(rows) > filters.limit else None
        return [AccessEntryOut.model_validate(row) for row in rows[: filters.limit]], cursor


class TenantNotAllowed(PermissionError):
    """A non-admin reader asked for another tenant's records."""


def check_tenant_filter(database: Database, reader: Reader, filters: Any, action: str) -> None:
    """Refuse (and log) a filter naming another tenant than the reader's own; admins read every tenant."""
    tenant = getattr(filters, "tenant", None)
    if tenant is not None and reader.tenant_scope is not None and tenant != reader.tenant_scope:
        reason = "only admins may read other tenants' records"
        log_denied(database, reader, target=f"{action}:tenant={tenant}", reason=reason)
        raise TenantNotAllowed(reason)


def logged_filters(filters: Any) -> dict[str, Any]:
    """A read's filters as its log entry keeps them."""
    return filters.model_dump(mode="json", exclude_none=True)


def log_denied(database: Database, reader: Reader, *, target: str, reason: str) -> None:
    """Record a refused read (wrong role, another tenant's records) in its own commit: the refusal that follows
    rolls nothing back."""
    with database.session(write=True) as session:
        log_access(session, reader, key=database.chain_key, action="denied", target=target[:64],
                   filters={"reason": reason[:200]})
