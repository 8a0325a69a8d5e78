"""The review workflow: a queue of records whose verdicts need a person, per-claim reviews, and a feedback
file of disputed verdicts for the rule-pack authors.

A review covers one verdict set (the record's current evaluation, or the gate's inline verdicts): per
claim, the reviewer confirms the verdict or disputes it as a false positive (a claim called contradicted
that is right) or a false negative (a claim called supported or unverifiable that is wrong, or a wrong
claim the validators missed), each with an optional note. A review is an appended, chained event, never
an update; the view remembers which verdict set was last reviewed, so a re-audit that changes the verdicts
puts the record back in the queue.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import Connection, and_, func, or_, select

from auditor.packs.registry import versions_by_hash
from auditor.store.database import Database
from auditor.trail.access_log import Reader, check_tenant_filter, log_access, logged_filters
from auditor.trail.chain import text_digest
from auditor.trail.events import append_event
from auditor.trail.models import AuditRecord, Evaluation, RecordVerdict, TrailEvent
from auditor.trail.queries import RecordNotFound, Shown, get_shown, list_records, record_views
from auditor.trail.schemas import AuditFilters, AuditRecordOut, CleanText
from auditor.trail.verdicts import mark_reviewed, verdict_ref

Decision = Literal["confirm", "false_positive", "false_negative"]
LOW_CONFIDENCE = 0.5   # a claim judged with less confidence than this sends its record to review
MAX_NOTE = 2000


class ReviewError(ValueError):
    """A review that does not fit the verdicts it names."""


class ReviewConflict(ReviewError):
    """The record's verdicts changed since the reviewer loaded them."""


class ClaimReview(BaseModel):
    model_config = ConfigDict(extra="forbid")

    claim_index: int | None = Field(default=None, ge=0, le=10_000,
                                    description="Index into the current claims; omit for a claim the validators missed")
    decision: Decision
    note: CleanText | None = Field(default=None, max_length=MAX_NOTE)
    text: CleanText | None = Field(default=None, max_length=2000, description="The missed claim (false_negative only)")

    @model_validator(mode="after")
    def _missed_claims_need_text(self) -> ClaimReview:
        if self.claim_index is None and (self.decision != "false_negative" or not self.text):
            raise ValueError("a review item without claim_index is a missed claim: decision false_negative and text")
        return self


class ReviewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    claims: list[ClaimReview] = Field(min_length=1, max_length=500)
    note: CleanText | None = Field(default=None, max_length=MAX_NOTE)
    evaluation_id: CleanText | None = Field(
        default=None, max_length=36,
        description="The verdict set reviewed (an evaluation id, or 'inline'); refused if the verdicts moved on")


class QueueFilters(AuditFilters):
    """The review queue: records of the filter whose current verdicts are contradicted, blocked or
    low-confidence, and not yet reviewed."""

    min_confidence: float | None = Field(default=None, ge=0, le=1,
                                         description="A claim less confident than this needs review "
                                                     "(default: AUDITOR_REVIEW_MIN_CONFIDENCE)")


def queue_condition(min_confidence: float) -> Any:
    needs = or_(RecordVerdict.n_contradicted > 0, RecordVerdict.gate_action.in_(("block", "refuse")),
                RecordVerdict.implied_action.in_(("block", "refuse")), RecordVerdict.min_confidence < min_confidence)
    reviewed = RecordVerdict.reviewed_ref == func.coalesce(RecordVerdict.evaluation_id, "inline")
    return and_(RecordVerdict.kind == "record", needs, or_(RecordVerdict.reviewed_ref.is_(None), ~reviewed))


def review_queue(database: Database, reader: Reader, filters: QueueFilters, *,
                 default_min_confidence: float = LOW_CONFIDENCE) -> tuple[list[AuditRecordOut], str | None]:
    """One page of the queue (newest first), logged as a read of the records it shows."""
    check_tenant_filter(database, reader, filters, "review_queue")
    minimum = filters.min_confidence if filters.min_confidence is not None else default_min_confidence
    with database.session(write=True) as session:
        rows, cursor = list_records(session, filters, tenant_scope=reader.tenant_scope, extra=queue_condition(minimum))
        log_access(session, reader, key=database.chain_key, action="review_queue", filters=logged_filters(filters),
                   result_count=len(rows), record_ids=[row.record.id for row in rows])
        return record_views(session.connection(), rows), cursor


def submit_review(database: Database, reviewer: Reader, record_id: str, review: ReviewIn) -> dict[str, Any]:
    """Chain the review of the record's current verdicts and mark them reviewed (one transaction)."""
    with database.session(write=True) as session:
        shown = get_shown(session, record_id, tenant_scope=reviewer.tenant_scope)
        if shown is None or shown.record.kind != "record":
            raise RecordNotFound(f"no audit record {record_id!r}")
        ref = verdict_ref(shown.view.evaluation_id)
        if review.evaluation_id is not None and review.evaluation_id != ref:
            raise ReviewConflict(f"the verdicts of {record_id} changed (now {ref}, reviewed {review.evaluation_id}): "
                                 "reload the record and review its current verdicts")
        claims = _current_claims(session.connection(), shown)
        items = [_item(index, item, claims) for index, item in enumerate(review.claims)]
        # Free text (notes, a missed claim) may quote the record: it goes in the event's note, which a purge drops.
        notes = {"note": review.note,
                 "claims": {str(i): item.note for i, item in enumerate(review.claims) if item.note},
                 "missed": {str(i): item.text for i, item in enumerate(review.claims) if item.claim_index is None}}
        note = json.dumps(notes, ensure_ascii=False) if review.note or notes["claims"] or notes["missed"] else None
        disputed = sum(1 for item in items if item["decision"] != "confirm")
        event = append_event(session.connection(), reviewer, key=database.chain_key, kind="review", record_id=record_id,
                             subject=ref, note=note, payload={
                                 "verdict_ref": ref, "evaluation_id": shown.view.evaluation_id,
                                 "rule_pack_hash": shown.view.rule_pack_hash, "items": items, "disputed": disputed})
        mark_reviewed(session.connection(), record_id, reviewed_ref=ref, disputed=disputed)
        return _review_out(event)


def _current_claims(conn: Connection, shown: Shown) -> list[Any]:
    if shown.view.evaluation_id is None:
        return list(shown.record.claims or [])
    claims = conn.execute(select(Evaluation.claims).where(Evaluation.id == shown.view.evaluation_id)).scalar()
    return list(claims or [])


def _item(position: int, item: ClaimReview, claims: list[Any]) -> dict[str, Any]:
    if item.claim_index is None:
        return {"claim_index": None, "decision": item.decision, "missed_claim_sha256": text_digest(item.text)}
    if item.claim_index >= len(claims):
        raise ReviewError(f"claims[{position}]: claim_index {item.claim_index} is out of range "
                          f"(the current verdicts have {len(claims)} claims)")
    claim = claims[item.claim_index] if isinstance(claims[item.claim_index], dict) else {}
    verdict = claim.get("verdict")
    if item.decision == "false_positive" and verdict != "contradicted":
        raise ReviewError(f"claims[{position}]: false_positive disputes a contradicted verdict; "
                          f"claim {item.claim_index} is {verdict}")
    if item.decision == "false_negative" and verdict == "contradicted":
        raise ReviewError(f"claims[{position}]: claim {item.claim_index} is already contradicted; "
                          "confirm it, or dispute it as false_positive")
    return {"claim_index": item.claim_index, "decision": item.decision, "verdict": verdict,
            "kind": claim.get("kind"), "rule_ids": claim.get("rule_ids") or [], "claim_sha256": text_digest(claim.get("text"))}


def _review_out(event: Any) -> dict[str, Any]:
    get = (lambda name: event[name]) if isinstance(event, dict) else (lambda name: getattr(event, name))
    note = get("note")
    return {"id": get("id"), "seq": get("seq"), "at": get("at"), "record_id": get("record_id"),
            "reviewer": {"key_id": get("key_id"), "tenant": get("tenant"), "role": get("role")},
            **(get("payload") or {}), "notes": json.loads(note) if note else None}


def reviews_of(conn: Connection, record_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(select(TrailEvent.__table__).where(TrailEvent.kind == "review", TrailEvent.record_id == record_id)
                        .order_by(TrailEvent.seq)).all()
    return [_review_out(row) for row in rows]


# -- feedback for rule-pack authors ---------------------------------------------------------------------------


class FeedbackFilters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    since: datetime | None = None
    domain: CleanText | None = Field(default=None, max_length=64)
    decision: Literal["false_positive", "false_negative"] | None = None


def feedback_lines(database: Database, reader: Reader, filters: FeedbackFilters) -> Iterator[dict[str, Any]]:
    """One line per disputed claim: the claim as judged (text, verdict, evidence, rules), the pack version,
    the dispute and its note. Read in pages; each page is logged with the record ids it names."""
    after_seq = 0
    while True:
        with database.session(write=True) as session:
            conn = session.connection()
            query = (select(TrailEvent.__table__, RecordVerdict.domain)
                     .join(RecordVerdict, RecordVerdict.record_id == TrailEvent.record_id)
                     .where(TrailEvent.kind == "review", TrailEvent.seq > after_seq).order_by(TrailEvent.seq).limit(200))
            if reader.tenant_scope is not None:
                query = query.where(RecordVerdict.tenant == reader.tenant_scope)
            if filters.since is not None:
                query = query.where(TrailEvent.at >= filters.since)
            if filters.domain is not None:
                query = query.where(RecordVerdict.domain == filters.domain)
            events = conn.execute(query).all()
            if not events:
                return
            after_seq = events[-1].seq
            lines = [line for event in events for line in _disputes(conn, event, filters.decision)]
            log_access(session, reader, key=database.chain_key, action="review_feedback",
                       filters=filters.model_dump(mode="json", exclude_none=True), result_count=len(lines),
                       record_ids=list(dict.fromkeys(line["record_id"] for line in lines)))
        yield from lines


def _disputes(conn: Connection, event: Any, decision: str | None) -> list[dict[str, Any]]:
    payload = event.payload or {}
    notes = json.loads(event.note) if event.note else {}
    claims: list[Any] = []
    if payload.get("evaluation_id"):
        claims = conn.execute(select(Evaluation.claims).where(Evaluation.id == payload["evaluation_id"])).scalar() or []
    else:
        claims = conn.execute(select(AuditRecord.claims).where(AuditRecord.id == event.record_id)).scalar() or []
    pack_hash = payload.get("rule_pack_hash")
    version = versions_by_hash(conn, {pack_hash}).get(pack_hash) if pack_hash else None
    lines = []
    for position, item in enumerate(payload.get("items") or []):
        if item["decision"] == "confirm" or (decision is not None and item["decision"] != decision):
            continue
        index = item.get("claim_index")
        claim = claims[index] if index is not None and index < len(claims) else None
        lines.append({
            "review_id": event.id, "reviewed_at": event.at.isoformat(), "record_id": event.record_id,
            "domain": event.domain, "evaluation_id": payload.get("evaluation_id"),
            "rule_pack": {"version": version, "hash": pack_hash}, "claim_index": index,
            "decision": item["decision"], "claim": claim,
            "missed_claim": (notes.get("missed") or {}).get(str(position)) if index is None else None,
            "note": (notes.get("claims") or {}).get(str(position)), "review_note": notes.get("note"),
            "reviewer": {"key_id": event.key_id, "tenant": event.tenant, "role": event.role},
        })
    return lines
