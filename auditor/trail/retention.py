"""Retention: purge the content of expired records, except under legal hold, leaving hashed tombstones.

A purge drops the sensitive text (prompt, outputs, claims) and stamps `purged_at`; the record's digests
stay, so the chain still verifies. The purge itself is appended to the chain as a `kind="purge"`
record naming every purged id (verify-chain flags content removed without one), all in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, insert, not_, null, or_, select, update
from sqlalchemy.orm import Session

from auditor.settings import Settings
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.models import AuditRecord, Evaluation, LegalHold, Purge
from auditor.trail.records import NewRecord, append_in_transaction


class RetentionError(ValueError):
    """A hold or purge request that cannot be applied."""


@dataclass(frozen=True, slots=True)
class PurgeResult:
    purge_record_id: str | None      # None on a dry run or when nothing expired
    purged_ids: list[str]
    held_ids: list[str]


def place_hold(session: Session, *, reason: str, tenant: str | None = None, domain: str | None = None,
               record_id: str | None = None) -> LegalHold:
    if not (tenant or domain or record_id):
        raise RetentionError("a legal hold needs a tenant, a domain or a record id")
    if not reason.strip():
        raise RetentionError("a legal hold needs a reason")
    hold = LegalHold(tenant=tenant, domain=domain, record_id=record_id, reason=reason)
    session.add(hold)
    session.flush()
    return hold


def release_hold(session: Session, hold_id: int) -> LegalHold:
    hold = session.get(LegalHold, hold_id)
    if hold is None:
        raise RetentionError(f"no legal hold with id {hold_id}")
    hold.released_at = hold.released_at or utcnow()
    return hold


def _expired_condition(settings: Settings, now: datetime):  # noqa: ANN202 - a SQLAlchemy clause
    clauses = [and_(AuditRecord.domain == domain, AuditRecord.created_at < now - timedelta(days=days))
               for domain, days in settings.retention_days.items()]
    if settings.default_retention_days is not None:
        listed = list(settings.retention_days)
        other = or_(AuditRecord.domain.is_(None), not_(AuditRecord.domain.in_(listed))) if listed else True
        clauses.append(and_(other, AuditRecord.created_at < now - timedelta(days=settings.default_retention_days)))
    return or_(*clauses) if clauses else None


def _held(row: Any, holds: Sequence[Any]) -> bool:
    return any(
        (h.tenant is None or h.tenant == row.tenant) and (h.domain is None or h.domain == row.domain)
        and (h.record_id is None or h.record_id == row.id)
        for h in holds
    )


def purge_expired(database: Database, settings: Settings, *, now: datetime | None = None,
                  dry_run: bool = False) -> PurgeResult:
    now = now or utcnow()
    expired = _expired_condition(settings, now)
    if expired is None:
        return PurgeResult(None, [], [])
    with database.write_connection() as conn:
        hold_rows = conn.execute(select(LegalHold.__table__).where(LegalHold.released_at.is_(None))).all()
        query = select(AuditRecord.id, AuditRecord.tenant, AuditRecord.domain).where(
            AuditRecord.kind == "record", AuditRecord.purged_at.is_(None), expired)
        candidates = conn.execute(query).all()
        held = [row.id for row in candidates if _held(row, hold_rows)]
        purge = [row.id for row in candidates if row.id not in set(held)]
        if dry_run or not purge:
            return PurgeResult(None, purge, held)
        policy = {"retention_days": settings.retention_days, "default_retention_days": settings.default_retention_days,
                  "as_of": now.isoformat()}
        marker = append_in_transaction(
            conn,
            NewRecord(tenant="system", status="completed", kind="purge", content_mode="hash",
                      details={"purged_ids": purge, "held": len(held), "policy": policy}),
            key=database.chain_key,
        )
        for start in range(0, len(purge), 500):  # bounded IN lists
            batch = purge[start:start + 500]
            conn.execute(update(AuditRecord).where(AuditRecord.id.in_(batch)).values(
                prompt=null(), output=null(), delivered_output=null(), claims=null(), purged_at=now))
            # Evaluations quote the output's sentences in their claims: the same tombstone rule covers them.
            conn.execute(update(Evaluation).where(Evaluation.record_id.in_(batch)).values(claims=null(), purged_at=now))
        conn.execute(insert(Purge), {"at": now, "purge_record_id": marker.id, "records_purged": len(purge),
                                     "records_held": len(held), "policy": policy})
    return PurgeResult(marker.id, purge, held)
