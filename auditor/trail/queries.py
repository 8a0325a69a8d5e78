"""Read the audit trail: the compliance filters as one query over the current-verdict view, keyset cursors,
pages with each record's current verdicts, single records.

The trail's readers (`auditor.trail.reads`) wrap these with access logging; re-audit jobs, holds and
exports select their records with the same `filtered_query`, so "what a list shows", "what a job covers"
and "what a hold keeps" agree. Records are listed newest first by when they were produced (`occurred_at`,
an import's own timestamp), then by seq.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Select, and_, bindparam, func, or_, select, tuple_
from sqlalchemy.orm import Session

from auditor.kg.versions import judged_before
from auditor.kg.withdrawn import cites_withdrawn, stale_reasons
from auditor.packs.registry import active_hashes, versions_by_hash
from auditor.trail.domain_source import source_condition
from auditor.trail.models import AuditRecord, Evaluation, RecordVerdict
from auditor.trail.schemas import AuditFilters, AuditRecordOut, CurrentVerdicts, PackRefOut, RecordFilter
from auditor.trail.verdicts import SEVERITIES, had_gate, search_text, stale_condition, verdict_ref

MAX_SEQ = 2**63 - 1   # seqs are BIGINT: a cursor beyond it names no record and must not reach the driver
_ID = re.compile(r"^[\x21-\x7e]{1,64}$")
View = RecordVerdict


def plausible_id(value: str) -> bool:
    """Ids are printable ASCII up to 64 characters; anything else (NUL, surrogates, megabytes) names nothing
    and is answered without a query."""
    return bool(_ID.match(value))


class AuditQueryError(ValueError):
    """A filter or cursor the trail cannot be queried with."""


class RecordNotFound(LookupError):
    """No such record, or one owned by another tenant (the two look alike on purpose)."""


# -- cursors: (occurred_at, seq) of the last row shown ------------------------------------------------------


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def encode_cursor(occurred: datetime, seq: int) -> str:
    stamp = (_utc(occurred) - _EPOCH) // _MICROSECOND   # exact: a float timestamp would lose microseconds
    return base64.urlsafe_b64encode(f"v2:{stamp}:{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, stamp, seq = raw.split(":")
        if prefix != "v2" or not stamp.lstrip("-").isdigit() or not seq.isdigit() or not 0 < int(seq) <= MAX_SEQ:
            raise ValueError(prefix)
        return _EPOCH + int(stamp) * _MICROSECOND, int(seq)
    except (ValueError, OverflowError, OSError, binascii.Error, UnicodeDecodeError) as exc:
        raise AuditQueryError(f"invalid cursor {cursor!r}") from exc


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


# -- the filter ------------------------------------------------------------------------------------------


def filtered_query(filters: RecordFilter, *, tenant_scope: str | None,
                   active_packs: Mapping[str, str] | None = None, extra: Any = None) -> Select[tuple[RecordVerdict]]:
    """View rows matching `filters` (and the `extra` condition), newest first. `tenant_scope` None means all
    tenants (admin). `active_packs` (domain -> hash) is needed only by the `stale` filter."""
    conditions: list[Any] = [] if extra is None else [extra]
    tenant = tenant_scope if tenant_scope is not None else filters.tenant
    if tenant is not None:
        conditions.append(View.tenant == tenant)
    for column, low, high in ((View.occurred_at, filters.since, filters.until),
                              (View.recorded_at, filters.recorded_since, filters.recorded_until)):
        if low is not None:
            conditions.append(column >= low)
        if high is not None:
            conditions.append(column < high)
    for column, value in (
        (View.domain, filters.domain), (View.intent, filters.intent), (View.model_id, filters.model),
        (View.endpoint, filters.endpoint), (View.gate_action, filters.gate_action),
        (View.implied_action, filters.verdict_action), (View.status, filters.status),
        (View.kind, getattr(filters, "kind", None)),
    ):
        if value is not None:
            conditions.append(column == value)
    if filters.domain_source is not None:   # kept in the record's chained details, not in the view
        conditions.append(View.record_id.in_(select(AuditRecord.id).where(source_condition(filters.domain_source))))
    conditions += _verdict_conditions(filters, active_packs)
    cursor = getattr(filters, "cursor", None)
    if cursor is not None:
        occurred, seq = decode_cursor(cursor)
        # A row comparison: PostgreSQL walks the (occurred_at, seq) index from the cursor on.
        conditions.append(tuple_(View.occurred_at, View.seq) < tuple_(
            bindparam(None, occurred, type_=View.occurred_at.type), bindparam(None, seq, type_=View.seq.type)))
    return select(View).where(and_(*conditions)).order_by(View.occurred_at.desc(), View.seq.desc())


def _verdict_conditions(filters: RecordFilter, active_packs: Mapping[str, str] | None) -> list[Any]:
    conditions: list[Any] = []
    if filters.has_contradicted is not None:
        conditions.append(View.n_contradicted > 0 if filters.has_contradicted else View.n_contradicted == 0)
    if filters.fabrication is not None:
        conditions.append(View.n_fabrication > 0 if filters.fabrication else View.n_fabrication == 0)
    if filters.severity is not None:
        conditions.append(View.max_severity.in_(SEVERITIES[SEVERITIES.index(filters.severity):]))
    if filters.fer_min is not None:
        conditions.append(View.fer >= filters.fer_min)
    if filters.fer_max is not None:
        conditions.append(View.fer <= filters.fer_max)
    if filters.rule_id is not None:
        conditions.append(View.rule_ids.contains(f" {filters.rule_id} ", autoescape=True))
    if filters.rule_pack is not None:
        conditions.append(View.rule_pack_hash.startswith(filters.rule_pack, autoescape=True))
    if filters.stale is not None:
        stale = stale_condition(active_packs or {})
        if stale is None:
            conditions.append(View.source == "__none__" if filters.stale else View.source.is_not(None))
        else:
            conditions.append(and_(View.source != "none", stale) if filters.stale else ~stale)
    if filters.reviewed is not None:
        reviewed = View.reviewed_ref == func.coalesce(View.evaluation_id, "inline")
        conditions.append(reviewed if filters.reviewed else or_(View.reviewed_ref.is_(None), ~reviewed))
    if filters.kg_older_than is not None:
        conditions.append(judged_before(filters.kg_older_than))
    if filters.kg_withdrawn is not None:
        conditions.append(cites_withdrawn() if filters.kg_withdrawn else ~cites_withdrawn())
    if filters.q is not None:
        conditions.append(View.search_text.contains(search_text([filters.q]) or "", autoescape=True))
    return conditions


# -- pages -------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Shown:
    """A record as a read shows it: the stored record and its row of the current-verdict view."""

    record: AuditRecord
    view: RecordVerdict


def list_records(session: Session, filters: AuditFilters, *, tenant_scope: str | None,
                 extra: Any = None) -> tuple[list[Shown], str | None]:
    """One page of records and the cursor of the next page (None on the last page)."""
    active = active_hashes(session.connection()) if filters.stale is not None else None
    query = filtered_query(filters, tenant_scope=tenant_scope, active_packs=active, extra=extra)
    views = list(session.execute(query.limit(filters.limit + 1)).scalars())
    next_cursor = None
    if len(views) > filters.limit:
        last = views[filters.limit - 1]
        next_cursor = encode_cursor(last.occurred_at, last.seq)
    return _with_records(session, views[: filters.limit]), next_cursor


def _with_records(session: Session, views: Sequence[RecordVerdict]) -> list[Shown]:
    records = {r.id: r for r in session.execute(
        select(AuditRecord).where(AuditRecord.id.in_([v.record_id for v in views]))).scalars()}
    return [Shown(records[v.record_id], v) for v in views]


def iter_records(session: Session, filters: AuditFilters, *, tenant_scope: str | None,
                 batch_size: int = 500) -> Iterator[list[Shown]]:
    """Every matching record, newest first, in keyset-paginated batches (for exports)."""
    page_filters = filters.model_copy(update={"limit": batch_size})
    while True:
        rows, cursor = list_records(session, page_filters, tenant_scope=tenant_scope)
        if rows:
            yield rows
        if cursor is None:
            return
        page_filters = page_filters.model_copy(update={"cursor": cursor})


def get_record(session: Session, record_id: str, *, tenant_scope: str | None) -> AuditRecord | None:
    """The record, or None if absent or owned by another tenant (callers answer 404 either way)."""
    if not plausible_id(record_id):
        return None
    query = select(AuditRecord).where(AuditRecord.id == record_id)
    if tenant_scope is not None:
        query = query.where(AuditRecord.tenant == tenant_scope)
    return session.execute(query).scalar()


def get_shown(session: Session, record_id: str, *, tenant_scope: str | None) -> Shown | None:
    record = get_record(session, record_id, tenant_scope=tenant_scope)
    if record is None:
        return None
    view = session.get(RecordVerdict, record_id)
    return Shown(record, view) if view is not None else None


def evaluations_for(session: Session, record_id: str) -> Sequence[Evaluation]:
    query = select(Evaluation).where(Evaluation.record_id == record_id).order_by(Evaluation.created_at)
    return session.execute(query).scalars().all()


# -- what a read shows ---------------------------------------------------------------------------------------


def record_views(conn: Connection, shown: Sequence[Shown], *, with_claims: bool = True) -> list[AuditRecordOut]:
    """Records with their current verdicts (claims from the current evaluation, or inline), as reads show them."""
    evaluation_ids = [s.view.evaluation_id for s in shown if s.view.evaluation_id]
    claims: dict[str, Any] = {}
    if with_claims and evaluation_ids:
        claims = dict(conn.execute(select(Evaluation.id, Evaluation.claims).where(Evaluation.id.in_(evaluation_ids))).all())
    hashes = {s.view.rule_pack_hash for s in shown if s.view.rule_pack_hash}
    versions = versions_by_hash(conn, hashes)
    active = active_hashes(conn) if hashes else {}
    verdict_claims = {item.record.id: (claims.get(item.view.evaluation_id) if item.view.evaluation_id
                                       else item.record.claims) for item in shown}
    stale = stale_reasons(conn, verdict_claims) if with_claims else {}
    out = []
    for item in shown:
        record_out = AuditRecordOut.model_validate(item.record)
        current_claims = verdict_claims[item.record.id] if with_claims else None
        out.append(record_out.model_copy(update={
            "occurred_at": item.view.occurred_at,
            "current": current_verdicts(item.view, versions, active, current_claims,
                                        kg_stale_reason=stale.get(item.record.id))}))
    return out


def current_verdicts(view: RecordVerdict, versions: Mapping[str, str], active: Mapping[str, str],
                     claims: list[Any] | None, *, kg_stale_reason: str | None = None) -> CurrentVerdicts:
    pack = None
    if view.rule_pack_hash:
        pack = PackRefOut(version=versions.get(view.rule_pack_hash), hash=view.rule_pack_hash,
                          active=active.get(view.domain or "") == view.rule_pack_hash)
    return CurrentVerdicts(
        source=view.source, evaluation_id=view.evaluation_id, evaluated_at=view.evaluated_at,
        evaluator_version=view.evaluator_version, rule_pack=pack, kg_version=view.kg_version,
        n_supported=view.n_supported, n_contradicted=view.n_contradicted, n_unverifiable=view.n_unverifiable,
        n_fabrication=view.n_fabrication or 0,
        fer=view.fer, citation_confidence=view.citation_confidence, joint_score=view.joint_score,
        verdict_action=view.implied_action, max_severity=view.max_severity, min_confidence=view.min_confidence,
        had_gate=had_gate(view.endpoint, view.kind),
        reviewed=view.reviewed_ref is not None and view.reviewed_ref == verdict_ref(view.evaluation_id),
        disputed=view.disputed, claims=claims, kg_stale=kg_stale_reason is not None, kg_stale_reason=kg_stale_reason,
    )
