"""The summary a finished re-audit job ends with: what changed between "before" and "after".

- before: the record's latest evaluation made before the job (else the inline claims and FER the
  record was written with); after: the job's evaluation.
- FER distribution before and after (count, mean, median, 10-bin histogram over [0, 1]); outputs
  with no verified claim have no FER and are counted apart, never as 0.
- claims whose verdict changed, with both evidences (claims matched by normalised text, and by kind
  when both sides name one);
- records whose gate action would now differ: the output-gate action the record actually got versus
  the action the new verdicts imply under the job's rule pack. Imported outputs never passed the gate,
  so they are counted apart (`no_gate`), never as "allow -> ...";
- the rule packs the job pinned (version and hash per domain) and the packs its evaluations name;
- why items failed: the error class and message of each failed record, and the count per cause (a cause is
  the error class and message, e.g. "ScoringError: the record holds no output text ...").
Lists are capped at `MAX_LISTED` entries; totals are exact.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.jobs.models import ReauditItem, ReauditJob
from auditor.jobs.scoring import GATE_ACTIONS
from auditor.packs.registry import versions_by_hash
from auditor.trail.models import AuditRecord, Evaluation
from auditor.trail.verdicts import had_gate

MAX_LISTED = 200
FER_BINS = 10
_PAGE = 500
_RANK = {action: rank for rank, action in enumerate(GATE_ACTIONS)}
# a failure reason names its exception as "<Class>: <message>", maybe after what was tried
# ("gave up after 4 attempts: OperationalError: database is locked")
_ERROR = re.compile(r"(?:^|: )(?P<error>[A-Z][A-Za-z0-9_]*): (?P<message>.*)\Z", re.S)


def build_summary(session: Session, job: ReauditJob) -> dict[str, Any]:
    fer_before: list[float | None] = []
    fer_after: list[float | None] = []
    verdict_changes: list[dict[str, Any]] = []
    gate_changes: list[dict[str, Any]] = []
    totals: Counter[str] = Counter()
    transitions: Counter[str] = Counter()
    versions: set[str] = set()
    pack_hashes: set[str] = set()
    causes: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    last_id = 0
    while True:
        items = session.execute(
            select(ReauditItem.id, ReauditItem.record_id, ReauditItem.status, ReauditItem.evaluation_id,
                   ReauditItem.before_evaluation_id, ReauditItem.gate_action_after, ReauditItem.failure_reason)
            .where(ReauditItem.job_id == job.id, ReauditItem.id > last_id).order_by(ReauditItem.id).limit(_PAGE)
        ).all()
        if not items:
            break
        last_id = items[-1].id
        evaluation_ids = {i.evaluation_id for i in items} | {i.before_evaluation_id for i in items}
        evaluations = {row.id: row for row in session.execute(
            select(Evaluation.id, Evaluation.claims, Evaluation.fer, Evaluation.evaluator_version,
                   Evaluation.rule_pack_hash)
            .where(Evaluation.id.in_([e for e in evaluation_ids if e])))}
        records = {row.id: row for row in session.execute(
            select(AuditRecord.id, AuditRecord.claims, AuditRecord.fer, AuditRecord.gate_decisions,
                   AuditRecord.endpoint, AuditRecord.kind)
            .where(AuditRecord.id.in_([i.record_id for i in items])))}
        for item in items:
            totals[item.status] += 1
            if item.status == "failed":
                error, message = failure_cause(item.failure_reason)
                causes[f"{error}: {message}" if error else message] += 1
                if len(failures) < MAX_LISTED:
                    failures.append({"record_id": item.record_id, "error": error, "message": message})
            if item.status != "done":
                continue
            after = evaluations[item.evaluation_id]
            before = evaluations.get(item.before_evaluation_id) if item.before_evaluation_id else None
            record = records[item.record_id]
            versions.add(after.evaluator_version)
            if after.rule_pack_hash:
                pack_hashes.add(after.rule_pack_hash)
            fer_before.append(before.fer if before else record.fer)
            fer_after.append(after.fer)
            for change in claim_verdict_changes(before.claims if before else record.claims, after.claims):
                totals["verdict_changes"] += 1
                if len(verdict_changes) < MAX_LISTED:
                    verdict_changes.append({"record_id": item.record_id, **change})
            if not had_gate(record.endpoint, record.kind):
                totals["no_gate"] += 1
                continue
            recorded = recorded_output_action(record.gate_decisions)
            if item.gate_action_after is not None and item.gate_action_after != recorded:
                totals["gate_changes"] += 1
                transitions[f"{recorded}->{item.gate_action_after}"] += 1
                if len(gate_changes) < MAX_LISTED:
                    gate_changes.append({"record_id": item.record_id, "before": recorded,
                                         "after": item.gate_action_after})
    return {
        "records": {"total": job.total, "done": totals["done"], "failed": totals["failed"],
                    "not_applicable": totals["not_applicable"], "pending": totals["pending"]},
        "evaluator_versions": sorted(versions),
        "rule_packs": job.rule_packs or {},
        "evaluation_rule_packs": _pack_versions(session, pack_hashes),
        "fer_before": fer_distribution(fer_before),
        "fer_after": fer_distribution(fer_after),
        "verdict_changes": {"total": totals["verdict_changes"], "listed": verdict_changes},
        "gate_action_changes": {"total": totals["gate_changes"], "by_transition": dict(transitions),
                                "listed": gate_changes, "no_gate": totals["no_gate"]},
        "failures": {"total": totals["failed"], "by_cause": dict(causes.most_common(MAX_LISTED)),
                     "listed": failures},
    }


def failure_cause(reason: str | None) -> tuple[str | None, str]:
    """(error class, message) of a failed item's reason; no class where the failure was no exception (a chunk
    redelivered too often)."""
    if not reason:
        return None, "no reason recorded"
    found = _ERROR.search(reason)
    return (found["error"], found["message"]) if found else (None, reason)


def _pack_versions(session: Session, hashes: set[str]) -> dict[str, str | None]:
    """Each evaluation pack hash with its registered version (None for packs the registry does not know)."""
    known = versions_by_hash(session.connection(), hashes)
    return {pack_hash: known.get(pack_hash) for pack_hash in sorted(hashes)}


def fer_distribution(values: list[float | None]) -> dict[str, Any]:
    scored = [v for v in values if v is not None]
    histogram = [0] * FER_BINS
    for value in scored:
        histogram[min(int(value * FER_BINS), FER_BINS - 1)] += 1   # FER 1.0 belongs to the last bin
    return {
        "scored": len(scored), "no_verified_claims": len(values) - len(scored),
        "mean": round(statistics.fmean(scored), 4) if scored else None,
        "median": round(statistics.median(scored), 4) if scored else None,
        "histogram": [{"from": b / FER_BINS, "to": (b + 1) / FER_BINS, "count": histogram[b]} for b in range(FER_BINS)],
    }


def claim_verdict_changes(before: list[Any] | None, after: list[Any] | None) -> list[dict[str, Any]]:
    """Claims whose verdict differs before and after, with both verdicts and evidences. A claim found on one
    side only counts when it is contradicted there (before or after is then `{"verdict": None}`): a newly
    found error (a new KG version, a new rule) is the change a re-audit exists to show, while a claim newly
    judged supported is not."""
    unmatched: dict[str, list[dict[str, Any]]] = {}
    for claim in after or []:
        if isinstance(claim, dict) and claim.get("text"):
            unmatched.setdefault(_normalise(claim["text"]), []).append(claim)
    changes = []
    for old in before or []:
        if not isinstance(old, dict) or not old.get("text") or not old.get("verdict"):
            continue
        candidates = unmatched.get(_normalise(old["text"]), [])
        match = next((c for c in candidates if _same_kind(old, c)), None)
        if match is None:
            if old["verdict"] == "contradicted":   # an error the re-audit no longer finds
                changes.append(_change(old, old, None))
            continue
        candidates.remove(match)
        if match.get("verdict") != old["verdict"]:
            changes.append(_change(match, old, match))
    for claims in unmatched.values():
        changes += [_change(new, None, new) for new in claims if new.get("verdict") == "contradicted"]
    return changes


def _change(claim: dict[str, Any], old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    def side(value: dict[str, Any] | None) -> dict[str, Any]:
        return {"verdict": value.get("verdict"), "evidence": value.get("evidence")} if value else {"verdict": None}

    return {"claim": claim["text"], "kind": claim.get("kind"), "span": claim.get("span"),
            "before": side(old), "after": side(new)}


def recorded_output_action(gate_decisions: list[Any] | None) -> str:
    """The strongest output-stage action the record was delivered under ("allow" when none)."""
    actions = [d.get("action") for d in gate_decisions or []
               if isinstance(d, dict) and d.get("stage") == "output" and d.get("action") in _RANK]
    return max(actions, key=_RANK.__getitem__, default="allow")


def _normalise(text: str) -> str:
    return " ".join(text.casefold().split())


def _same_kind(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return old.get("kind") is None or new.get("kind") is None or old.get("kind") == new.get("kind")
