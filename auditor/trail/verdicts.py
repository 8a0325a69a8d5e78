"""The current-verdict view (`record_verdicts`): what the trail currently believes about each record.

Records are append-only and evaluations are appended beside them, so "the verdicts of record X" is a
choice among verdict sets: the output gate's inline verdicts (live records only) and each evaluation.
The current set is the one with the highest rank:

    rank = (made under the active rule pack of the record's domain?, when it was made)

so an evaluation under the active pack beats everything else, and among the rest the latest wins. A worker
that still runs an old pack therefore cannot flip verdicts back after a re-audit under the new one.

The view is derived, never chained: `add_records` writes a record's row in the transaction that appends
the record, `apply_evaluations` moves it in the transaction that appends an evaluation, and `rebuild`
recomputes rows from the chained records and evaluations alone (so the view can always be checked and
restored from what the chain protects).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, or_, select, update

from auditor.store.bulk import bulk_insert
from auditor.trail.models import AuditRecord, Evaluation, RecordVerdict

GATE_ACTIONS = ("allow", "annotate", "redact", "block", "refuse")
SEVERITIES = ("low", "medium", "high", "critical")
_ACTION_RANK = {action: rank for rank, action in enumerate(GATE_ACTIONS)}
_SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}
APPLIED_STATUSES = ("done", "not_applicable")   # evaluations that carry verdicts (failed ones do not)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# -- what a verdict set says ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimSummary:
    n_supported: int
    n_contradicted: int
    n_unverifiable: int
    implied_action: str | None
    max_severity: str | None
    min_confidence: float | None
    rule_ids: tuple[str, ...]
    search_text: str | None
    n_fabrication: int = 0   # references no index holds: possible fabrications, and those contradicted as absent


FABRICATION_EVIDENCE = ("possible_fabrication", "fabrication")


def is_fabrication(claim: Mapping[str, Any]) -> bool:
    """A claim about a reference that no index holds (a possible fabrication), or that complete coverage proves
    absent ("no case at 541 U.S. 1127"): its own category in lists, filters and bundles."""
    return any(isinstance(e, dict) and e.get("kind") in FABRICATION_EVIDENCE for e in claim.get("evidence") or [])


def summarise_claims(claims: Sequence[Any] | None) -> ClaimSummary:
    """Counts, the action and severity the claims' rules ask for, and the text a search matches.

    The action comes from each claim's `gate` annotation (the rules evaluator writes one per contradicted
    claim); claims that carry none leave it unknown (None) when any of them is contradicted."""
    counts = {"supported": 0, "contradicted": 0, "unverifiable": 0}
    actions: list[str] = []
    severities: list[str] = []
    confidences: list[float] = []
    rule_ids: set[str] = set()
    texts: list[str] = []
    fabrications = 0
    for claim in claims or []:
        if not isinstance(claim, dict):
            continue
        fabrications += is_fabrication(claim)
        verdict = claim.get("verdict")
        if verdict in counts:
            counts[verdict] += 1
        gate = claim.get("gate")
        if isinstance(gate, dict):
            if gate.get("on_fail") in _ACTION_RANK:
                actions.append(gate["on_fail"])
            if gate.get("severity") in _SEVERITY_RANK:
                severities.append(gate["severity"])
        if isinstance(claim.get("confidence"), int | float):
            confidences.append(float(claim["confidence"]))
        rule_ids.update(r for r in [claim.get("rule_id"), *(claim.get("rule_ids") or [])] if isinstance(r, str) and r)
        if isinstance(claim.get("text"), str):
            texts.append(claim["text"])
    if actions:
        implied: str | None = max(actions, key=_ACTION_RANK.__getitem__)
    else:
        implied = None if counts["contradicted"] else "allow"
    return ClaimSummary(
        counts["supported"], counts["contradicted"], counts["unverifiable"], implied,
        max(severities, key=_SEVERITY_RANK.__getitem__) if severities else None,
        min(confidences) if confidences else None, tuple(sorted(rule_ids)),
        search_text(texts), fabrications,
    )


def search_text(texts: Iterable[str]) -> str | None:
    joined = "\n".join(texts)
    return joined.casefold() if joined else None


def output_actions(gate_decisions: Sequence[Any] | None) -> tuple[str, str | None]:
    """The strongest output-stage action the gate took (allow when none) and the highest severity it named."""
    actions, severities = [], []
    for decision in gate_decisions or []:
        if isinstance(decision, dict) and decision.get("stage") == "output" and decision.get("action") in _ACTION_RANK:
            actions.append(decision["action"])
            severity = (decision.get("detail") or {}).get("severity")   # GateDecision.detail
            if severity in _SEVERITY_RANK:
                severities.append(severity)
    return (max(actions, key=_ACTION_RANK.__getitem__, default="allow"),
            max(severities, key=_SEVERITY_RANK.__getitem__) if severities else None)


def had_gate(endpoint: str | None, kind: str = "record") -> bool:
    """Imported outputs never passed our gate: they have verdicts, but no gate action to compare with."""
    return kind == "record" and endpoint != "import"


def occurred_at(*, endpoint: str | None, details: Mapping[str, Any] | None, created_at: datetime) -> datetime:
    """When the output was produced: an import's own timestamp, else when the record was written."""
    if endpoint == "import" and details and isinstance(details.get("timestamp"), str):
        try:
            return aware(datetime.fromisoformat(details["timestamp"]))
        except ValueError:
            pass
    return aware(created_at)


def aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _rule_id_text(ids: Iterable[str]) -> str | None:
    unique = sorted({i for i in ids if i})
    return f" {' '.join(unique)} " if unique else None


def _gate_rule_ids(gate_decisions: Sequence[Any] | None) -> list[str]:
    return [d.get("rule_id") for d in gate_decisions or [] if isinstance(d, dict) and d.get("rule_id")]


# -- rows ----------------------------------------------------------------------------------------------


def record_row(values: Mapping[str, Any]) -> dict[str, Any]:
    """The view row of a newly written record: the gate's inline verdicts (live records), or none yet."""
    gated = had_gate(values.get("endpoint"), values.get("kind", "record"))
    row = {
        "record_id": values["id"], "seq": values["seq"], "kind": values.get("kind", "record"),
        "tenant": values["tenant"], "domain": values.get("domain"), "intent": values.get("intent"),
        "model_id": values.get("model_id"), "endpoint": values.get("endpoint"), "status": values["status"],
        "occurred_at": occurred_at(endpoint=values.get("endpoint"), details=values.get("details"),
                                   created_at=values["created_at"]),
        "recorded_at": aware(values["created_at"]), "gate_action": values.get("gate_action") if gated else None,
        "reviewed_ref": None, "disputed": 0,
    }
    row.update(_inline_verdicts(values) if gated else _no_verdicts(values))
    return row


def _inline_verdicts(values: Mapping[str, Any]) -> dict[str, Any]:
    summary = summarise_claims(values.get("claims"))
    action, severity = output_actions(values.get("gate_decisions"))
    return {
        "source": "inline", "evaluation_id": None, "evaluated_at": aware(values["created_at"]),
        "evaluator_version": None, "rule_pack_hash": values.get("rule_pack_hash"), "kg_version": values.get("kg_version"),
        "n_supported": values.get("n_supported") or 0, "n_contradicted": values.get("n_contradicted") or 0,
        "n_unverifiable": values.get("n_unverifiable") or 0, "fer": values.get("fer"),
        "citation_confidence": None, "joint_score": None, "implied_action": action,
        "max_severity": severity or summary.max_severity, "min_confidence": summary.min_confidence,
        "rule_ids": values.get("rule_ids") or _rule_id_text([*summary.rule_ids, *_gate_rule_ids(values.get("gate_decisions"))]),
        "search_text": summary.search_text, "n_fabrication": summary.n_fabrication,
    }


def _no_verdicts(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "source": "none", "evaluation_id": None, "evaluated_at": None, "evaluator_version": None,
        "rule_pack_hash": None, "kg_version": None, "n_supported": 0, "n_contradicted": 0, "n_unverifiable": 0,
        "fer": None, "citation_confidence": None, "joint_score": None, "implied_action": None,
        "max_severity": None, "min_confidence": None, "rule_ids": None, "search_text": None, "n_fabrication": 0,
    }


def evaluation_verdicts(evaluation: Any, gate_decisions: Sequence[Any] | None) -> dict[str, Any]:
    """The view columns an evaluation sets (its verdicts; the record's gate decisions keep their rule ids)."""
    summary = summarise_claims(evaluation.claims)
    return {
        "source": "evaluation", "evaluation_id": evaluation.id, "evaluated_at": aware(evaluation.created_at),
        "evaluator_version": evaluation.evaluator_version, "rule_pack_hash": evaluation.rule_pack_hash,
        "kg_version": evaluation.kg_version, "n_supported": summary.n_supported,
        "n_contradicted": summary.n_contradicted, "n_unverifiable": summary.n_unverifiable, "fer": evaluation.fer,
        "citation_confidence": evaluation.citation_confidence, "joint_score": evaluation.joint_score,
        "implied_action": summary.implied_action, "max_severity": summary.max_severity,
        "min_confidence": summary.min_confidence,
        "rule_ids": _rule_id_text([*summary.rule_ids, *_gate_rule_ids(gate_decisions)]),
        "search_text": summary.search_text, "n_fabrication": summary.n_fabrication,
    }


def outranks(candidate_pack: str | None, candidate_at: datetime | None, current_source: str,
             current_pack: str | None, current_at: datetime | None, active_pack: str | None) -> bool:
    """Whether a verdict set replaces the current one (see the module docstring for the rank)."""
    if current_source == "none":
        return True
    candidate = (active_pack is not None and candidate_pack == active_pack, aware(candidate_at or _EPOCH))
    current = (active_pack is not None and current_pack == active_pack, aware(current_at or _EPOCH))
    return candidate >= current


# -- writing ------------------------------------------------------------------------------------------


def add_records(conn: Connection, records: Sequence[Mapping[str, Any]]) -> None:
    """The view rows of newly appended records (in the append's transaction)."""
    bulk_insert(conn, RecordVerdict.__table__, [record_row(values) for values in records])


def apply_evaluations(conn: Connection, evaluations: Sequence[Any], *, active_packs: Mapping[str, str]) -> int:
    """Move each record's row to a new evaluation when it outranks the current verdicts (in the transaction
    that appends the evaluations). Returns how many rows moved."""
    applied = [e for e in evaluations if e.status in APPLIED_STATUSES]
    if not applied:
        return 0
    ids = list({e.record_id for e in applied})
    current = {row.record_id: row._asdict() for row in conn.execute(
        select(RecordVerdict.record_id, RecordVerdict.domain, RecordVerdict.source, RecordVerdict.rule_pack_hash,
               RecordVerdict.evaluated_at).where(RecordVerdict.record_id.in_(ids)))}
    decisions = dict(conn.execute(select(AuditRecord.id, AuditRecord.gate_decisions).where(AuditRecord.id.in_(ids))).all())
    moves: dict[str, dict[str, Any]] = {}
    for evaluation in sorted(applied, key=lambda e: aware(e.created_at)):
        row = current.get(evaluation.record_id)
        if row is None:
            continue   # a record without a view row is rebuilt by `rebuild`, never half-written here
        if not outranks(evaluation.rule_pack_hash, evaluation.created_at, row["source"], row["rule_pack_hash"],
                        row["evaluated_at"], active_packs.get(row["domain"] or "")):
            continue
        moves[evaluation.record_id] = evaluation_verdicts(evaluation, decisions.get(evaluation.record_id))
        row.update(source="evaluation", rule_pack_hash=evaluation.rule_pack_hash, evaluated_at=evaluation.created_at)
    if moves:   # one executemany (pipelined on PostgreSQL), not a round trip per row
        columns = list(next(iter(moves.values())))
        statement = update(RecordVerdict).where(RecordVerdict.record_id == bindparam("b_record_id")).values(
            {column: bindparam(f"b_{column}") for column in columns})
        conn.execute(statement, [{"b_record_id": record_id, **{f"b_{k}": v for k, v in values.items()}}
                                 for record_id, values in moves.items()])
    return len(moves)


def mark_reviewed(conn: Connection, record_id: str, *, reviewed_ref: str, disputed: int) -> None:
    conn.execute(update(RecordVerdict).where(RecordVerdict.record_id == record_id)
                 .values(reviewed_ref=reviewed_ref, disputed=disputed))


def verdict_ref(evaluation_id: str | None) -> str:
    """Which verdict set a review covers: an evaluation's id, or "inline" for the gate's own verdicts."""
    return evaluation_id or "inline"


def forget_text(conn: Connection, record_ids: Sequence[str]) -> None:
    """A purge drops claim text from the view too (retention covers every copy of the content)."""
    for start in range(0, len(record_ids), 500):
        conn.execute(update(RecordVerdict).where(RecordVerdict.record_id.in_(record_ids[start:start + 500]))
                     .values(search_text=None))


# -- rebuilding -----------------------------------------------------------------------------------------


def rebuild(conn: Connection, *, active_packs: Mapping[str, str], domain: str | None = None,
            after_seq: int = 0, batch: int = 2000, columns: Collection[str] | None = None) -> int:
    """Recompute view rows from the chained records and evaluations, `batch` records at a time (bounded
    memory). Returns how many rows were written. Reviews keep their marks; purged text stays dropped.
    `columns`: write only these (a migration rebuilding the view as an older revision defined it)."""
    written = 0
    while True:
        query = select(AuditRecord.__table__).where(AuditRecord.seq > after_seq).order_by(AuditRecord.seq).limit(batch)
        if domain is not None:
            query = query.where(AuditRecord.domain == domain)
        records = conn.execute(query).mappings().all()
        if not records:
            return written
        after_seq = records[-1]["seq"]
        ids = [r["id"] for r in records]
        evaluations: dict[str, list[Any]] = {}
        for evaluation in conn.execute(select(Evaluation.__table__).where(
                Evaluation.record_id.in_(ids), Evaluation.status.in_(APPLIED_STATUSES))):
            evaluations.setdefault(evaluation.record_id, []).append(evaluation)
        kept = {row.record_id: row for row in conn.execute(
            select(RecordVerdict.record_id, RecordVerdict.reviewed_ref, RecordVerdict.disputed)
            .where(RecordVerdict.record_id.in_(ids)))}
        conn.execute(delete(RecordVerdict).where(RecordVerdict.record_id.in_(ids)))
        rows = [_rebuilt_row(record, evaluations.get(record["id"], []), kept.get(record["id"]), active_packs)
                for record in records]
        if columns is not None:
            rows = [{name: value for name, value in row.items() if name in columns} for row in rows]
        bulk_insert(conn, RecordVerdict.__table__, rows)
        written += len(rows)


def _rebuilt_row(record: Mapping[str, Any], evaluations: list[Any], kept: Any,
                 active_packs: Mapping[str, str]) -> dict[str, Any]:
    row = record_row(record)
    active = active_packs.get(record.get("domain") or "")
    for evaluation in sorted(evaluations, key=lambda e: aware(e.created_at)):
        if outranks(evaluation.rule_pack_hash, evaluation.created_at, row["source"], row["rule_pack_hash"],
                    row["evaluated_at"], active):
            row.update(evaluation_verdicts(evaluation, record.get("gate_decisions")))
    if record.get("purged_at") is not None:
        row["search_text"] = None
    if kept is not None:
        row["reviewed_ref"], row["disputed"] = kept.reviewed_ref, kept.disputed
    return row


def stale_condition(active_packs: Mapping[str, str]) -> Any:
    """Rows whose verdicts were made under another pack than their domain's active one."""
    clauses = [and_(RecordVerdict.domain == domain, or_(RecordVerdict.rule_pack_hash.is_(None),
                                                        RecordVerdict.rule_pack_hash != pack_hash))
               for domain, pack_hash in active_packs.items()]
    return or_(*clauses) if clauses else None
