"""The hash chain: canonical content digests, record hashes, signed checkpoints and verification.

record_hash = sha256(f"{seq}:{prev_hash}:{content_digest}"). The content digest covers the hashed
fields below, with each sensitive field (prompt, outputs, claims) replaced by its own SHA-256. So a
retention purge can drop the sensitive text and the chain still verifies, while any edit of a stored
field, a deleted row or two rows swapped breaks it at a named seq.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, select

from auditor.trail.models import AuditRecord, ChainHead, Checkpoint

GENESIS_HASH = "0" * 64

# Covered by the content digest, in this fixed list: adding a column must not change old digests.
HASHED_FIELDS = (
    "id", "kind", "created_at", "tenant", "key_id", "request_id", "endpoint", "intent", "domain",
    "model_id", "checkpoint_hash", "sampling_params", "kg_version", "rule_pack_hash", "content_mode",
    "prompt_sha256", "output_sha256", "delivered_sha256", "claims_sha256", "prompt_tokens",
    "completion_tokens", "timings", "logprob_summary", "kg_events", "gate_decisions", "gate_action",
    "rule_ids", "n_supported", "n_contradicted", "n_unverifiable", "fer", "finish_reason", "status",
    "error", "details",
)
# Sensitive text field -> the digest field that stands in for it.
SENSITIVE_FIELDS = {
    "prompt": "prompt_sha256",
    "output": "output_sha256",
    "delivered_output": "delivered_sha256",
    "claims": "claims_sha256",
}


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return canonical_time(value)
    raise TypeError(f"not JSON-serialisable in an audit record: {type(value).__name__}")


def canonical_time(value: datetime) -> str:
    """UTC, microseconds: SQLite returns naive datetimes and PostgreSQL aware ones; both hash alike."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(timespec="microseconds") + "Z"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sensitive_digest(name: str, value: Any) -> str | None:
    if value is None:
        return None
    return sha256_text(value if name != "claims" else canonical_json(value))


def content_digest(values: Mapping[str, Any]) -> str:
    return sha256_text(canonical_json({name: values.get(name) for name in HASHED_FIELDS}))


def record_hash(seq: int, prev_hash: str, digest: str) -> str:
    return sha256_text(f"{seq}:{prev_hash}:{digest}")


def sign_checkpoint(key: bytes, seq: int, hash_: str) -> str:
    return hmac.new(key, f"{seq}:{hash_}".encode(), hashlib.sha256).hexdigest()


@dataclass(slots=True)
class ChainProblem:
    kind: str          # altered | deleted | reordered | unauthorised_purge | bad_checkpoint
    seq: int
    record_id: str | None
    detail: str

    def line(self) -> str:
        target = f"record {self.record_id} (seq {self.seq})" if self.record_id else f"seq {self.seq}"
        return f"{self.kind}: {target}: {self.detail}"


@dataclass(slots=True)
class ChainReport:
    ok: bool
    records_checked: int
    checkpoints_checked: int
    last_seq: int
    problem: ChainProblem | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verify_chain(conn: Connection, hmac_key: bytes) -> ChainReport:
    """Walk the chain in seq order and report the first altered, deleted or reordered record."""
    checkpoints: dict[int, Any] = {cp.seq: cp for cp in conn.execute(select(Checkpoint.__table__))}
    purged_ids = _ids_named_by_purges(conn)
    expected_seq, prev = 1, GENESIS_HASH
    checked = 0
    # Core rows, not ORM objects: verification walks whole tables and needs no identity map.
    rows = conn.execute(select(AuditRecord.__table__).order_by(AuditRecord.seq).execution_options(yield_per=500))
    for row in rows:
        problem = _check_row(conn, row, expected_seq, prev, purged_ids)
        if problem is None and row.seq in checkpoints:
            problem = _check_checkpoint(checkpoints[row.seq], row, hmac_key)
        if problem is not None:
            return ChainReport(False, checked, 0, expected_seq - 1, problem)
        checked += 1
        expected_seq, prev = row.seq + 1, row.record_hash
    last_seq = expected_seq - 1
    problem = _check_head(conn, last_seq, prev, hmac_key) or _check_dangling_checkpoints(checkpoints, last_seq)
    if problem is not None:
        return ChainReport(False, checked, 0, last_seq, problem)
    return ChainReport(True, checked, len(checkpoints), last_seq)


def _check_row(
    conn: Connection, row: Any, expected_seq: int, prev: str, purged_ids: set[str]
) -> ChainProblem | None:
    if row.seq != expected_seq:
        missing = f"{expected_seq}" if row.seq == expected_seq + 1 else f"{expected_seq}..{row.seq - 1}"
        return ChainProblem("deleted", expected_seq, None, f"seq {missing} missing before record {row.id} (seq {row.seq})")
    if row.prev_hash != prev:
        moved = conn.execute(select(AuditRecord.seq).where(AuditRecord.record_hash == row.prev_hash)).scalar()
        if moved is not None:
            return ChainProblem("reordered", row.seq, row.id, f"prev_hash names seq {moved}, expected seq {row.seq - 1}")
        return ChainProblem("altered", row.seq, row.id, "prev_hash does not match the previous record")
    values = {name: getattr(row, name) for name in HASHED_FIELDS}
    for text_field, digest_field in SENSITIVE_FIELDS.items():
        text = getattr(row, text_field)
        if text is not None and sensitive_digest(text_field, text) != values[digest_field]:
            return ChainProblem("altered", row.seq, row.id, f"{text_field} does not match {digest_field}")
    if content_digest(values) != row.content_digest:
        return ChainProblem("altered", row.seq, row.id, "stored fields do not match content_digest")
    if record_hash(row.seq, row.prev_hash, row.content_digest) != row.record_hash:
        return ChainProblem("altered", row.seq, row.id, "record_hash does not match seq, prev_hash and content")
    if row.purged_at is not None and row.id not in purged_ids:
        return ChainProblem("unauthorised_purge", row.seq, row.id, "content removed without a purge record")
    return None


def _check_checkpoint(cp: Any, row: Any, hmac_key: bytes) -> ChainProblem | None:
    if not hmac.compare_digest(sign_checkpoint(hmac_key, cp.seq, cp.record_hash), cp.signature):
        return ChainProblem("bad_checkpoint", cp.seq, row.id, "checkpoint signature does not verify")
    if cp.record_hash != row.record_hash:
        return ChainProblem("altered", cp.seq, row.id, "record_hash differs from the signed checkpoint (chain rewritten)")
    return None


def _check_head(conn: Connection, last_seq: int, last_hash: str, hmac_key: bytes) -> ChainProblem | None:
    head = conn.execute(select(ChainHead.__table__).where(ChainHead.id == 1)).one_or_none()
    if head is None:
        return None
    if head.signature is not None and not hmac.compare_digest(
            sign_checkpoint(hmac_key, head.seq, head.record_hash), head.signature):
        return ChainProblem("bad_checkpoint", head.seq, None, "chain head signature does not verify")
    if head.seq == last_seq and head.record_hash == last_hash:
        return None
    if head.seq > last_seq:
        return ChainProblem("deleted", last_seq + 1, None, f"chain head is at seq {head.seq} but the last record is seq {last_seq}")
    return ChainProblem("altered", last_seq, None, "chain head does not match the last record")


def _check_dangling_checkpoints(checkpoints: Mapping[int, Any], last_seq: int) -> ChainProblem | None:
    for seq in sorted(s for s in checkpoints if s > last_seq):
        return ChainProblem("deleted", seq, None, f"signed checkpoint names seq {seq} but the chain ends at {last_seq}")
    return None


def _ids_named_by_purges(conn: Connection) -> set[str]:
    query = select(AuditRecord.details).where(AuditRecord.kind == "purge")
    return {rid for details in conn.execute(query).scalars() for rid in _purged(details)}


def _purged(details: Mapping[str, Any] | None) -> Iterable[str]:
    return (details or {}).get("purged_ids", [])
