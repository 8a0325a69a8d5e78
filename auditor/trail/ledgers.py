"""The trail's ledgers: which tables are hash-chained, which fields each digest covers, and how the
whole trail is verified in one consistent snapshot.

- records (1): `audit_records`, the requests and purges;
- evaluations (2): every (re-)scoring of a record; for imported outputs the only verdicts there are;
- access (3): every read of the trail, denied reads included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, select

from auditor.trail.chain import ChainProblem, ChainReport, Ledger, LedgerReport, Link, combine, verify_ledger
from auditor.trail.models import AccessLogEntry, AuditRecord, Evaluation

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

LEDGERS = (RECORDS, EVALUATIONS, ACCESS)


def verify_trail(conn: Connection, hmac_key: bytes, *, starts: Mapping[str, Link] | None = None) -> ChainReport:
    """Verify every ledger. Run it inside one read-only snapshot (`Database.snapshot`), so appends and
    purges that land meanwhile cannot raise false alarms."""
    starts = starts or {}
    purged = _ids_named_by_purges(conn)
    checks = {"records": lambda row: _record_content_removed(row, purged),
              "evaluations": lambda row: _evaluation_content_removed(row, purged)}
    return combine((ledger.name, verify_ledger(conn, ledger, hmac_key, row_check=checks.get(ledger.name),
                                               start=starts.get(ledger.name))) for ledger in LEDGERS)


def _ids_named_by_purges(conn: Connection) -> set[str]:
    query = select(AuditRecord.details).where(AuditRecord.kind == "purge")
    return {rid for details in conn.execute(query).scalars() for rid in _purged(details)}


def _purged(details: Mapping[str, Any] | None) -> Iterable[str]:
    return (details or {}).get("purged_ids", [])


def _record_content_removed(row: Any, purged: set[str]) -> ChainProblem | None:
    if row.purged_at is not None and row.id not in purged:
        return ChainProblem("unauthorised_purge", row.seq, row.id, "content removed without a purge record")
    if row.purged_at is None and row.content_mode != "hash":
        for text_field, digest_field in RECORDS.sensitive_fields.items():
            if getattr(row, text_field) is None and getattr(row, digest_field) is not None:
                return ChainProblem("altered", row.seq, row.id, f"{text_field} removed (its digest is chained)")
    return None


def _evaluation_content_removed(row: Any, purged: set[str]) -> ChainProblem | None:
    if row.purged_at is not None and row.record_id not in purged:
        return ChainProblem("unauthorised_purge", row.seq, row.id, "claims removed without a purge record",
                            "evaluations")
    if row.purged_at is None and row.claims is None and row.claims_sha256 is not None:
        return ChainProblem("altered", row.seq, row.id, "claims removed (their digest is chained)", "evaluations")
    return None


__all__ = ["ACCESS", "EVALUATIONS", "LEDGERS", "RECORDS", "LedgerReport", "verify_trail"]
