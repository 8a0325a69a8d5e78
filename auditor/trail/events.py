"""The events ledger: what people and the service did to the trail besides reading it, chained like records.

Reviews, legal holds placed and released, rule packs activated, KG versions imported, rolled back or
anchored, alerts fired and bundles issued are each
one appended event, written in the same transaction as the state they change (a hold row, the view's
review mark), so the chained history and the current state cannot disagree.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Select, insert, select

from auditor.store.base import new_id, utcnow
from auditor.store.database import ChainKey
from auditor.trail.access_log import Reader
from auditor.trail.chain import chain_entries
from auditor.trail.ledgers import EVENTS
from auditor.trail.models import TrailEvent

EVENT_KINDS = ("review", "hold_placed", "hold_released", "pack_activated", "alert", "bundle_issued",
               "kg_imported", "kg_rolled_back", "kg_anchored")   # KG changes: auditor.kg.anchors


def append_event(conn: Connection, actor: Reader, *, key: ChainKey, kind: str, record_id: str | None = None,
                 subject: str | None = None, payload: dict[str, Any] | None = None,
                 note: str | None = None) -> dict[str, Any]:
    """Chain one event in the caller's write transaction; returns its stored values (id, seq, at, ...)."""
    assert kind in EVENT_KINDS, kind
    values: dict[str, Any] = {
        "id": new_id(), "at": utcnow(), "kind": kind, "key_id": actor.key_id, "tenant": actor.tenant,
        "role": actor.role, "record_id": record_id, "subject": subject, "payload": payload, "note": note,
    }
    chain_entries(conn, EVENTS, [values], hmac_key=key.hmac_key, checkpoint_interval=key.checkpoint_interval)
    conn.execute(insert(TrailEvent), values)
    return values


def events_query(*, kind: str | None = None, record_id: str | None = None,
                 subject: str | None = None) -> Select[tuple[TrailEvent]]:
    query = select(TrailEvent).order_by(TrailEvent.seq.desc())
    for column, value in ((TrailEvent.kind, kind), (TrailEvent.record_id, record_id), (TrailEvent.subject, subject)):
        if value is not None:
            query = query.where(column == value)
    return query
