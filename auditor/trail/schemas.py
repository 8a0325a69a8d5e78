"""The trail's filters and record views: what the compliance API, the CLI and re-audit jobs select and show."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator


def clean_text(text: str) -> str:
    """Refuse text the store cannot keep: NUL (PostgreSQL text cannot hold it) and lone surrogates such as
    "\\ud800" (not valid Unicode: no UTF-8 encoding exists, so no record could be written)."""
    if "\x00" in text:
        raise ValueError("text must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (lone surrogates such as \\ud800 are not)") from None
    return text


CleanText = Annotated[str, AfterValidator(clean_text)]


def _as_utc(value: datetime) -> datetime:
    """Naive datetimes are UTC (SQLite returns them naive); everything leaves and is compared as aware UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# -- compliance queries -----------------------------------------------------------------------------


class RecordFilter(BaseModel):
    """Which stored records: shared by the compliance queries and re-audit jobs. Unknown fields -> 422."""

    model_config = ConfigDict(extra="forbid")

    since: datetime | None = None
    until: datetime | None = None
    tenant: CleanText | None = Field(default=None, max_length=128, description="Admins only")
    domain: CleanText | None = Field(default=None, max_length=64)
    domain_source: Literal["given", "detected", "none"] | None = Field(
        default=None, description="given: the request named it; detected: found in its text; none: neither")
    intent: CleanText | None = Field(default=None, max_length=64)
    model: CleanText | None = Field(default=None, max_length=256)
    gate_action: Literal["allow", "annotate", "redact", "block", "refuse"] | None = None
    status: Literal["completed", "refused", "blocked", "error"] | None = None
    has_contradicted: bool | None = None
    fer_min: float | None = Field(default=None, ge=0, le=1)
    fer_max: float | None = Field(default=None, ge=0, le=1)
    rule_id: CleanText | None = Field(default=None, min_length=1, max_length=128)
    q: CleanText | None = Field(default=None, min_length=1, max_length=256, description="Text search over claims")

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return _as_utc(value) if value is not None else None


class AuditFilters(RecordFilter):
    kind: Literal["record", "purge"] | None = None
    limit: int = Field(default=50, ge=1, le=500)
    cursor: CleanText | None = Field(default=None, max_length=128)


class ExportFilters(AuditFilters):
    format: Literal["jsonl", "csv"] = "jsonl"
    limit: int = Field(default=500, ge=1, le=500, description="Rows fetched per database round trip")


class EvaluationOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    job_id: str | None
    evaluator_version: str
    kg_version: str | None
    rule_pack_hash: str | None
    status: str
    failure_reason: str | None
    claims: list[Any] | None
    fer: float | None
    citation_confidence: float | None
    joint_score: float | None
    details: dict[str, Any] | None = None   # detected domains and per-domain versions (records that named none)
    created_at: datetime

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return _as_utc(value)


class AuditRecordOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    seq: int
    kind: str
    created_at: datetime
    tenant: str
    key_id: str | None
    request_id: str | None
    endpoint: str | None
    intent: str | None
    domain: str | None
    model_id: str | None
    checkpoint_hash: str | None
    sampling_params: dict[str, Any] | None
    kg_version: str | None
    rule_pack_hash: str | None
    content_mode: str
    prompt: str | None
    prompt_sha256: str | None
    output: str | None
    output_sha256: str | None
    delivered_output: str | None
    delivered_sha256: str | None
    claims: list[Any] | None
    prompt_tokens: int | None
    completion_tokens: int | None
    timings: dict[str, Any] | None
    logprob_summary: dict[str, Any] | None
    kg_events: list[Any] | None
    gate_decisions: list[Any] | None
    gate_action: str | None
    n_supported: int
    n_contradicted: int
    n_unverifiable: int
    fer: float | None
    finish_reason: str | None
    status: str
    error: str | None
    details: dict[str, Any] | None
    purged_at: datetime | None
    prev_hash: str
    record_hash: str
    evaluations: list[EvaluationOut] | None = None

    @field_validator("created_at", "purged_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return _as_utc(value) if value is not None else None
