"""The trail's filters and record views: what the compliance API, the CLI and re-audit jobs select and show."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator


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


_RELATIVE = re.compile(r"^\s*(\d{1,6})\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_moment(value: Any) -> Any:
    """A moment as the filters accept it: an ISO date or time (naive means UTC), or a span back from now
    such as "30m", "12h", "1d", "2w"."""
    if isinstance(value, str):
        match = _RELATIVE.match(value)
        if match:
            return datetime.now(UTC) - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    return value


Moment = Annotated[datetime, BeforeValidator(parse_moment)]
GateActionName = Literal["allow", "annotate", "redact", "block", "refuse"]


class RecordFilter(BaseModel):
    """Which stored records: shared by the compliance queries, exports, holds and re-audit jobs. Verdict
    fields (contradicted, FER, actions, claims text) are the current verdicts (`auditor.trail.verdicts`);
    `since`/`until` are when the output was produced (an import's own timestamp). Unknown fields -> 422."""

    model_config = ConfigDict(extra="forbid")

    since: Moment | None = Field(default=None, description="Produced at or after: ISO time or a span back (12h, 1d)")
    until: Moment | None = Field(default=None, description="Produced before: ISO time or a span back (12h, 1d)")
    recorded_since: Moment | None = Field(default=None, description="Written to the trail at or after (import time)")
    recorded_until: Moment | None = Field(default=None, description="Written to the trail before")
    tenant: CleanText | None = Field(default=None, max_length=128, description="Admins only")
    domain: CleanText | None = Field(default=None, max_length=64)
    domain_source: Literal["given", "detected", "none"] | None = Field(
        default=None, description="given: the request named it; detected: found in its text; none: neither")
    intent: CleanText | None = Field(default=None, max_length=64)
    model: CleanText | None = Field(default=None, max_length=256)
    endpoint: CleanText | None = Field(default=None, max_length=32, description="chat, completions or import")
    gate_action: GateActionName | None = Field(default=None, description="What the gate did (imports had none)")
    verdict_action: GateActionName | None = Field(default=None, description="What the current verdicts ask for")
    status: Literal["completed", "refused", "blocked", "error"] | None = None
    has_contradicted: bool | None = None
    fabrication: bool | None = Field(default=None, description="A claim cites a reference no index holds "
                                     "(a possible fabrication, or absent inside an index's complete coverage)")
    severity: Literal["low", "medium", "high", "critical"] | None = Field(
        default=None, description="Highest severity among broken rules, at least this")
    fer_min: float | None = Field(default=None, ge=0, le=1)
    fer_max: float | None = Field(default=None, ge=0, le=1)
    rule_id: CleanText | None = Field(default=None, min_length=1, max_length=128)
    rule_pack: CleanText | None = Field(default=None, min_length=8, max_length=64,
                                        description="Current verdicts made under this rule-pack hash (or prefix)")
    stale: bool | None = Field(default=None, description="Current verdicts made under another pack than the active one")
    reviewed: bool | None = Field(default=None, description="The current verdicts have a review")
    q: CleanText | None = Field(default=None, min_length=1, max_length=256, description="Text search over claims")
    kg_older_than: str | None = Field(default=None, pattern=r"^[0-9a-f]{16}$",
                                      description="Current verdicts made under a KG version older than this one, "
                                                  "or citing a fact its domain's current version withdrew")
    kg_withdrawn: bool | None = Field(default=None, description="Current verdicts cite an imported KG fact that its "
                                      "domain's current version no longer holds (rolled back or replaced)")

    @field_validator("since", "until", "recorded_since", "recorded_until")
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
    seq: int | None = None
    record_id: str | None = None
    job_id: str | None
    evaluator_version: str
    kg_version: str | None
    rule_pack_hash: str | None
    rule_pack_version: str | None = None
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


class PackRefOut(BaseModel):
    version: str | None
    hash: str | None
    active: bool


class CurrentVerdicts(BaseModel):
    """A record's current verdicts (see `auditor.trail.verdicts`) and where they come from."""

    source: str                        # evaluation | inline | none
    evaluation_id: str | None
    evaluated_at: datetime | None
    evaluator_version: str | None
    rule_pack: PackRefOut | None
    kg_version: str | None
    n_supported: int
    n_contradicted: int
    n_unverifiable: int
    n_fabrication: int = 0             # claims citing a reference no index holds (verdicts.is_fabrication)
    fer: float | None
    citation_confidence: float | None
    joint_score: float | None
    verdict_action: str | None         # what the verdicts ask the gate to do
    max_severity: str | None
    min_confidence: float | None
    had_gate: bool                     # False for imports: no gate action to compare with
    reviewed: bool
    disputed: int
    claims: list[Any] | None = None
    # The verdicts cite an imported KG fact the current version no longer holds: re-judge them
    # (`auditor kg reaudit --withdrawn`). The reason names the rollback or import that withdrew it.
    kg_stale: bool = False
    kg_stale_reason: str | None = None

    @field_validator("evaluated_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return _as_utc(value) if value is not None else None


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
    occurred_at: datetime | None = None
    current: CurrentVerdicts | None = None
    evaluations: list[EvaluationOut] | None = None
    reviews: list[dict[str, Any]] | None = None
    holds: list[dict[str, Any]] | None = None

    @field_validator("created_at", "purged_at", "occurred_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return _as_utc(value) if value is not None else None


# -- the access log ----------------------------------------------------------------------------------


class AccessLogFilters(BaseModel):
    """Which access-log entries: by who (key, tenant, role), which record, when and what kind of read."""

    model_config = ConfigDict(extra="forbid")

    key_id: CleanText | None = Field(default=None, max_length=64, description="What did this key read")
    tenant: CleanText | None = Field(default=None, max_length=128, description="Readers of this tenant (admins)")
    role: CleanText | None = Field(default=None, max_length=16)
    record_id: CleanText | None = Field(default=None, max_length=64, description="Who read this record")
    action: CleanText | None = Field(default=None, max_length=32,
                                     description="list, show, export, bundle, verify, denied, access_log, ...")
    since: Moment | None = None
    until: Moment | None = None
    limit: int = Field(default=50, ge=1, le=500)
    cursor: int | None = Field(default=None, ge=1, le=2**63 - 1)

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return _as_utc(value) if value is not None else None


class AccessEntryOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    seq: int | None
    at: datetime
    key_id: str | None
    tenant: str
    role: str
    action: str
    target: str | None
    filters: dict[str, Any] | None
    result_count: int | None
    record_ids: list[Any] | None

    @field_validator("at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return _as_utc(value)
