"""Retention: purge the content of expired records, except under legal hold (`auditor.trail.holds`), leaving
hashed tombstones.

A purge drops the sensitive text (prompt, outputs, claims) and stamps `purged_at`; the record's digests
stay, so the chain still verifies. The purge itself is appended to the chain as a `kind="purge"`
record naming every purged id (verify-chain flags content removed without one), all in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import and_, insert, not_, null, or_, select, update

from auditor.settings import Settings
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail import verdicts
from auditor.trail.holds import held_by
from auditor.trail.models import AuditRecord, Evaluation, Purge, TrailEvent
from auditor.trail.records import NewRecord, append_in_transaction


class RetentionError(ValueError):
    """A purge request that cannot be applied."""


@dataclass(frozen=True, slots=True)
class PurgeResult:
    purge_record_id: str | None      # None on a dry run or when nothing expired
    purged_ids: list[str]
    held_ids: list[str]
    holds: dict[str, list[int]] = field(default_factory=dict)   # held record id -> the holds that keep it


def _expired_condition(settings: Settings, now: datetime):  # noqa: ANN202 - a SQLAlchemy clause
    clauses = [and_(AuditRecord.domain == domain, AuditRecord.created_at < now - timedelta(days=days))
               for domain, days in settings.retention_days.items()]
    if settings.default_retention_days is not None:
        listed = list(settings.retention_days)
        other = or_(AuditRecord.domain.is_(None), not_(AuditRecord.domain.in_(listed))) if listed else True
        clauses.append(and_(other, AuditRecord.created_at < now - timedelta(days=settings.default_retention_days)))
    return or_(*clauses) if clauses else None


def purge_expired(database: Database, settings: Settings, *, now: datetime | None = None,
                  dry_run: bool = False) -> PurgeResult:
    now = now or utcnow()
    expired = _expired_condition(settings, now)
    if expired is None:
        return PurgeResult(None, [], [])
    with database.write_connection() as conn:
        query = select(AuditRecord.id).where(AuditRecord.kind == "record", AuditRecord.purged_at.is_(None), expired)
        candidates = list(conn.execute(query.order_by(AuditRecord.seq)).scalars())
        holds = held_by(conn, candidates)
        held = [rid for rid in candidates if rid in holds]
        purge = [rid for rid in candidates if rid not in holds]
        if dry_run or not purge:
            return PurgeResult(None, purge, held, holds)
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
            # Review notes may quote the record, and the view keeps claim text for search: both go too.
            conn.execute(update(TrailEvent).where(TrailEvent.record_id.in_(batch), TrailEvent.note.is_not(None))
                         .values(note=null(), purged_at=now))
        verdicts.forget_text(conn, purge)
        conn.execute(insert(Purge), {"at": now, "purge_record_id": marker.id, "records_purged": len(purge),
                                     "records_held": len(held), "policy": policy})
    return PurgeResult(marker.id, purge, held, holds)
