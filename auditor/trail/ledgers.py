"""The trail's ledgers: which tables are hash-chained, which fields each digest covers, and how the
whole trail is verified in one consistent snapshot.

- records (1): `audit_records`, the requests and purges;
- evaluations (2): every (re-)scoring of a record; for imported outputs the only verdicts there are;
- access (3): every read of the trail, denied reads included;
- events (4): reviews, legal holds placed and released, rule packs activated, alerts, bundles issued.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from sqlalchemy import Connection, select

from auditor.trail.chain import ChainProblem, ChainReport, Ledger, LedgerReport, Link, combine, verify_ledger
from auditor.trail.models import AccessLogEntry, AuditRecord, Evaluation, TrailEvent

RECORDS = Ledger(
    number=1, name="records", table=AuditRecord.__table__,
    # Fixed list: adding a column must not change old digests.
    hashed_fields=(
        "id", "kind", "created_at", "tenant", "key_id", "request_id", "endpoint", "intent", "domain",
        "model_id", "checkpoint_hash", "sampling_params", "kg_version", "rule_pack_hash", "content_mode",
        "prompt_sha256", "output_sha256", "delivered_sha256", "claims_sha256", "prompt_tokens",
        "completion_tokens", "timings", "logprob_summary", "kg_events", "gate_decisions", "gate_action",
        "rule_ids", "n_supported", "n_contradicted", "n_unverifiable", "fer", "finish_reason", "status",
        "error", "details",
    ),
    sensitive_fields={"prompt": "prompt_sha256", "output": "output_sha256",
                      "delivered_output": "delivered_sha256", "claims": "claims_sha256"},
)

EVALUATIONS = Ledger(
    number=2, name="evaluations", table=Evaluation.__table__,
    hashed_fields=(
        "id", "record_id", "job_id", "evaluator_version", "kg_version", "rule_pack_hash", "status",
        "failure_reason", "claims_sha256", "fer", "citation_confidence", "joint_score", "created_at",
    ),
    sensitive_fields={"claims": "claims_sha256"},
    optional_fields=("details",),   # revision 0004: the domains an evaluation was scored under
)

ACCESS = Ledger(
    number=3, name="access", table=AccessLogEntry.__table__,
    hashed_fields=("at", "key_id", "tenant", "role", "action", "target", "filters", "result_count", "record_ids"),
)

EVENTS = Ledger(
    number=4, name="events", table=TrailEvent.__table__,
    hashed_fields=("id", "at", "kind", "key_id", "tenant", "role", "record_id", "subject", "payload", "note_sha256"),
    sensitive_fields={"note": "note_sha256"},
)

LEDGERS = (RECORDS, EVALUATIONS, ACCESS, EVENTS)


def verify_trail(conn: Connection, hmac_key: bytes, *, starts: Mapping[str, Link] | None = None) -> ChainReport:
    """Verify every ledger. Run it inside one read-only snapshot (`Database.snapshot`), so appends and
    purges that land meanwhile cannot raise false alarms."""
    starts = starts or {}
    purged = _ids_named_by_purges(conn)
    checks = {"records": lambda row: _record_content_removed(row, purged),
              "evaluations": lambda row: _evaluation_content_removed(row, purged),
              "events": lambda row: _event_note_removed(row, purged)}
    return combine((ledger.name, verify_ledger(conn, ledger, hmac_key, row_check=checks.get(ledger.name),
                                               start=starts.get(ledger.name))) for ledger in LEDGERS)


class PurgedIds:
    """The ids every purge record names, kept as a sorted array of 8-byte digests: a million purged ids take
    8 MB instead of a Python set's hundred, so verification stays in bounded memory. A digest collision could
    only hide an unauthorised purge behind an authorised one of a colliding id (odds about n²/2⁶⁵)."""

    def __init__(self, ids: Iterable[str]) -> None:
        self._digests = np.unique(np.fromiter((self._key(i) for i in ids), dtype=np.uint64))

    @staticmethod
    def _key(record_id: str) -> int:
        return int.from_bytes(hashlib.blake2b(record_id.encode(), digest_size=8).digest(), "big")

    def __contains__(self, record_id: object) -> bool:
        if not isinstance(record_id, str):
            return False
        key = np.uint64(self._key(record_id))
        index = int(np.searchsorted(self._digests, key))
        return index < len(self._digests) and bool(self._digests[index] == key)

    def __len__(self) -> int:
        return len(self._digests)


def _ids_named_by_purges(conn: Connection) -> PurgedIds:
    query = select(AuditRecord.details).where(AuditRecord.kind == "purge")
    return PurgedIds(rid for details in conn.execute(query).scalars() for rid in _purged(details))


def _purged(details: Mapping[str, Any] | None) -> Iterable[str]:
    return (details or {}).get("purged_ids", [])


def _record_content_removed(row: Any, purged: PurgedIds) -> ChainProblem | None:
    if row.purged_at is not None and row.id not in purged:
        return ChainProblem("unauthorised_purge", row.seq, row.id, "content removed without a purge record")
    if row.purged_at is None and row.content_mode != "hash":
        for text_field, digest_field in RECORDS.sensitive_fields.items():
            if getattr(row, text_field) is None and getattr(row, digest_field) is not None:
                return ChainProblem("altered", row.seq, row.id, f"{text_field} removed (its digest is chained)")
    return None


def _evaluation_content_removed(row: Any, purged: PurgedIds) -> ChainProblem | None:
    if row.purged_at is not None and row.record_id not in purged:
        return ChainProblem("unauthorised_purge", row.seq, row.id, "claims removed without a purge record",
                            "evaluations")
    if row.purged_at is None and row.claims is None and row.claims_sha256 is not None:
        return ChainProblem("altered", row.seq, row.id, "claims removed (their digest is chained)", "evaluations")
    return None


def _event_note_removed(row: Any, purged: PurgedIds) -> ChainProblem | None:
    if row.purged_at is not None and row.record_id not in purged:
        return ChainProblem("unauthorised_purge", row.seq, row.id, "note removed without a purge record", "events")
    if row.purged_at is None and row.note is None and row.note_sha256 is not None:
        return ChainProblem("altered", row.seq, row.id, "note removed (its digest is chained)", "events")
    return None


__all__ = ["ACCESS", "EVALUATIONS", "EVENTS", "LEDGERS", "RECORDS", "LedgerReport", "verify_trail"]
