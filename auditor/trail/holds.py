"""Legal holds by matter: place, list, release. Placing and releasing are chained events.

A hold names the matter it serves (a case or investigation id), a reason, who placed it and one scope:

- records: the listed audit ids (each must exist and be the placer's to see);
- filter: every record matching a compliance filter (evaluated when a purge runs, so later records that
  match are kept too);
- tenant: every record of a tenant.

Held records are skipped by retention purges until the hold is released, with a reason, by an admin.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from sqlalchemy import Connection, func, insert, or_, select, update

from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.access_log import Reader
from auditor.trail.events import append_event
from auditor.trail.models import AuditRecord, LegalHold, LegalHoldRecord, RecordVerdict
from auditor.trail.queries import filtered_query, plausible_id
from auditor.trail.schemas import CleanText, RecordFilter

MAX_HOLD_RECORDS = 10_000
_MATTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/#-]{0,127}$")


class HoldError(ValueError):
    """A hold that cannot be placed or released as asked."""


class HoldNotFound(HoldError, LookupError):
    pass


class HoldConflict(HoldError):
    """The hold is in a state that forbids the change (releasing a released hold)."""


class RecordsNotFound(HoldError, LookupError):
    def __init__(self, missing: list[str]) -> None:
        self.missing = missing
        shown = ", ".join(missing[:5]) + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
        super().__init__(f"no audit record {shown}: a hold names existing records only")


class HoldScope(BaseModel):
    """Exactly one of: records, filter, tenant."""

    model_config = ConfigDict(extra="forbid")

    records: list[CleanText] | None = Field(default=None, min_length=1, max_length=MAX_HOLD_RECORDS)
    filter: RecordFilter | None = None
    tenant: CleanText | None = Field(default=None, min_length=1, max_length=128)

    @model_validator(mode="after")
    def _exactly_one(self) -> HoldScope:
        given = [name for name in ("records", "filter", "tenant") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("a hold's scope is exactly one of: records, filter, tenant")
        return self

    def as_json(self) -> dict[str, Any]:
        if self.records is not None:
            return {"records": list(dict.fromkeys(self.records))}
        if self.filter is not None:
            return {"filter": self.filter.model_dump(mode="json", exclude_none=True)}
        return {"tenant": self.tenant}


class HoldIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    matter_id: CleanText = Field(min_length=1, max_length=128, description="The matter (case) the hold serves")
    reason: CleanText = Field(min_length=1, max_length=2000)
    scope: HoldScope

    @field_validator("matter_id")
    @classmethod
    def _matter_shape(cls, value: str) -> str:
        if not _MATTER.match(value):
            raise ValueError("matter ids are 1-128 characters of letters, digits and . _ : / # -")
        return value

    @field_validator("reason")
    @classmethod
    def _reason_given(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a legal hold needs a reason")
        return value


class HoldOut(BaseModel):
    id: int
    matter_id: str
    reason: str
    scope: dict[str, Any]
    placed_by: dict[str, Any] | None
    placed_at: datetime
    released_at: datetime | None
    released_by: dict[str, Any] | None
    release_reason: str | None
    active: bool
    records_named: int | None = None     # records scope: how many ids it names


def _actor(reader: Reader) -> dict[str, Any]:
    return {"key_id": reader.key_id, "tenant": reader.tenant, "role": reader.role}


def place_hold(database: Database, actor: Reader, hold: HoldIn) -> HoldOut:
    """Store the hold and chain its placing (one transaction). Listed records must all exist."""
    scope = hold.scope.as_json()
    with database.write_connection() as conn:
        if "records" in scope:
            _require_records(conn, scope["records"], tenant_scope=actor.tenant_scope)
        hold_id = conn.execute(insert(LegalHold).values(
            matter_id=hold.matter_id, reason=hold.reason, scope=scope, placed_by=_actor(actor), created_at=utcnow(),
            tenant=scope.get("tenant")).returning(LegalHold.id)).scalar_one()
        if "records" in scope:
            conn.execute(insert(LegalHoldRecord), [{"hold_id": hold_id, "record_id": rid} for rid in scope["records"]])
        append_event(conn, actor, key=database.chain_key, kind="hold_placed", subject=f"hold:{hold_id}",
                     note=hold.reason, payload={"hold_id": hold_id, "matter_id": hold.matter_id, "scope": scope})
        return _hold_out(conn, hold_id)


def _require_records(conn: Connection, record_ids: Sequence[str], *, tenant_scope: str | None) -> None:
    found: set[str] = set()
    plausible = [rid for rid in record_ids if plausible_id(rid)]
    for start in range(0, len(plausible), 500):
        query = select(AuditRecord.id).where(AuditRecord.id.in_(plausible[start:start + 500]),
                                             AuditRecord.kind == "record")
        if tenant_scope is not None:
            query = query.where(AuditRecord.tenant == tenant_scope)
        found.update(conn.execute(query).scalars())
    missing = [rid for rid in record_ids if rid not in found]
    if missing:
        raise RecordsNotFound(missing)


def release_hold(database: Database, actor: Reader, hold_id: int, *, reason: str) -> HoldOut:
    if not reason.strip():
        raise HoldError("releasing a legal hold needs a reason")
    with database.write_connection() as conn:
        row = conn.execute(select(LegalHold.id, LegalHold.released_at, LegalHold.matter_id)
                           .where(LegalHold.id == hold_id).with_for_update()).one_or_none()
        if row is None:
            raise HoldNotFound(f"no legal hold {hold_id}")
        if row.released_at is not None:
            raise HoldConflict(f"legal hold {hold_id} was already released at {row.released_at:%Y-%m-%d %H:%M}")
        conn.execute(update(LegalHold).where(LegalHold.id == hold_id).values(
            released_at=utcnow(), released_by=_actor(actor), release_reason=reason))
        append_event(conn, actor, key=database.chain_key, kind="hold_released", subject=f"hold:{hold_id}",
                     note=reason, payload={"hold_id": hold_id, "matter_id": row.matter_id or f"legacy-{hold_id}"})
        return _hold_out(conn, hold_id)


def list_holds(database: Database, *, matter_id: str | None = None, include_released: bool = False) -> list[HoldOut]:
    with database.engine.connect() as conn:
        query = select(LegalHold.id).order_by(LegalHold.id.desc())
        if matter_id is not None:
            query = query.where(LegalHold.matter_id == matter_id)
        if not include_released:
            query = query.where(LegalHold.released_at.is_(None))
        return [_hold_out(conn, hold_id) for hold_id in conn.execute(query).scalars()]


def get_hold(database: Database, hold_id: int) -> HoldOut:
    with database.engine.connect() as conn:
        if conn.execute(select(LegalHold.id).where(LegalHold.id == hold_id)).first() is None:
            raise HoldNotFound(f"no legal hold {hold_id}")
        return _hold_out(conn, hold_id)


def _hold_out(conn: Connection, hold_id: int) -> HoldOut:
    row = conn.execute(select(LegalHold.__table__).where(LegalHold.id == hold_id)).one()
    scope = _scope_of(row)
    named = None
    if "records" in scope:
        named = conn.execute(select(func.count()).select_from(LegalHoldRecord)
                             .where(LegalHoldRecord.hold_id == hold_id)).scalar_one()
        scope = {"records": named} if named > 20 else scope
    return HoldOut(id=row.id, matter_id=row.matter_id or f"legacy-{row.id}", reason=row.reason, scope=scope,
                   placed_by=row.placed_by, placed_at=row.created_at, released_at=row.released_at,
                   released_by=row.released_by, release_reason=row.release_reason,
                   active=row.released_at is None, records_named=named)


def _scope_of(row: Any) -> dict[str, Any]:
    """A hold's scope; holds from before matters existed (tenant/domain/record columns) read as one."""
    if row.scope:
        return dict(row.scope)
    if row.record_id:
        return {"records": [row.record_id]}
    legacy = {k: v for k, v in (("tenant", row.tenant), ("domain", row.domain)) if v}
    return {"tenant": row.tenant} if set(legacy) == {"tenant"} else {"filter": legacy}


# -- which records are held ----------------------------------------------------------------------------


def held_by(conn: Connection, record_ids: Sequence[str]) -> dict[str, list[int]]:
    """For each given record under an active hold, the ids of the holds that keep it."""
    held: dict[str, list[int]] = {}
    holds = conn.execute(select(LegalHold.__table__).where(LegalHold.released_at.is_(None))).all()
    for start in range(0, len(record_ids), 500):
        batch = list(record_ids[start:start + 500])
        for hold in holds:
            for record_id in _matching(conn, hold, batch):
                held.setdefault(record_id, []).append(hold.id)
    return held


def _matching(conn: Connection, hold: Any, batch: list[str]) -> Iterable[str]:
    scope = _scope_of(hold)
    if "records" in scope:
        query = select(LegalHoldRecord.record_id).where(LegalHoldRecord.hold_id == hold.id,
                                                        LegalHoldRecord.record_id.in_(batch))
        listed = set(conn.execute(query).scalars())
        if hold.record_id:
            listed |= {hold.record_id} & set(batch)
        return listed
    if "tenant" in scope:
        return conn.execute(select(RecordVerdict.record_id).where(
            RecordVerdict.tenant == scope["tenant"], RecordVerdict.record_id.in_(batch))).scalars()
    filters = RecordFilter.model_validate(scope["filter"])
    query = filtered_query(filters, tenant_scope=None).with_only_columns(RecordVerdict.record_id).order_by(None)
    return conn.execute(query.where(RecordVerdict.record_id.in_(batch))).scalars()


def holds_covering(conn: Connection, record_id: str) -> list[dict[str, Any]]:
    """The active holds that keep one record (for `audits show`)."""
    ids = held_by(conn, [record_id]).get(record_id, [])
    if not ids:
        return []
    rows = conn.execute(select(LegalHold.id, LegalHold.matter_id, LegalHold.reason)
                        .where(or_(*(LegalHold.id == i for i in ids)))).all()
    return [{"hold_id": r.id, "matter_id": r.matter_id or f"legacy-{r.id}", "reason": r.reason} for r in rows]
