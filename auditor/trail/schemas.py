"""Pydantic schemas of the HTTP API: OpenAI-compatible requests, audit summaries, compliance queries."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# -- OpenAI-compatible requests ------------------------------------------------------------------


def _no_nul(text: str) -> str:
    # PostgreSQL text cannot hold NUL; refuse it at the door rather than fail the audit write later.
    if "\x00" in text:
        raise ValueError("text must not contain NUL characters")
    return text


def _as_utc(value: datetime) -> datetime:
    """Naive datetimes are UTC (SQLite returns them naive); everything leaves and is compared as aware UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str

    _check_text = field_validator("text")(_no_nul)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    @field_validator("content")
    @classmethod
    def _check_content(cls, value: str | list[ContentPart] | None) -> str | list[ContentPart] | None:
        return _no_nul(value) if isinstance(value, str) else value

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(BaseModel):
    include_usage: bool = False


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class _GenerationRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=256)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=32_768)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    n: int = Field(default=1, ge=1, le=1, description="Only n=1 is supported")
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, max_length=256)

    @field_validator("stop")
    @classmethod
    def _bounded_stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop takes at most 4 non-empty strings")
        return value

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=32_768)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None


class CompletionRequest(_GenerationRequest):
    prompt: str = Field(max_length=1_000_000)
    logprobs: int | None = Field(default=None, ge=0, le=5)

    _check_prompt = field_validator("prompt")(_no_nul)
    response_format: ResponseFormat | None = None
    echo: bool = False


# -- audit summaries returned with every response --------------------------------------------------


class ClaimCounts(BaseModel):
    supported: int = 0
    contradicted: int = 0
    unverifiable: int = 0


class AuditSummary(BaseModel):
    gate_action: str
    claims: ClaimCounts
    fer: float | None = None
    annotations: list[str] = Field(default_factory=list)


# -- compliance queries -----------------------------------------------------------------------------


class RecordFilter(BaseModel):
    """Which stored records: shared by the compliance queries and re-audit jobs. Unknown fields -> 422."""

    model_config = ConfigDict(extra="forbid")

    since: datetime | None = None
    until: datetime | None = None
    tenant: str | None = Field(default=None, max_length=128, description="Admins only")
    domain: str | None = Field(default=None, max_length=64)
    intent: str | None = Field(default=None, max_length=64)
    model: str | None = Field(default=None, max_length=256)
    gate_action: Literal["allow", "annotate", "redact", "block", "refuse"] | None = None
    status: Literal["completed", "refused", "blocked", "error"] | None = None
    has_contradicted: bool | None = None
    fer_min: float | None = Field(default=None, ge=0, le=1)
    fer_max: float | None = Field(default=None, ge=0, le=1)
    rule_id: str | None = Field(default=None, min_length=1, max_length=128)
    q: str | None = Field(default=None, min_length=1, max_length=256, description="Text search over claims")

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return _as_utc(value) if value is not None else None


class AuditFilters(RecordFilter):
    kind: Literal["record", "purge"] | None = None
    limit: int = Field(default=50, ge=1, le=500)
    cursor: str | None = Field(default=None, max_length=128)


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


class AuditPage(BaseModel):
    data: list[AuditRecordOut]
    next_cursor: str | None


class ChainProblemOut(BaseModel):
    kind: str
    seq: int
    record_id: str | None
    detail: str


class ChainReportOut(BaseModel):
    ok: bool
    records_checked: int
    checkpoints_checked: int
    last_seq: int
    problem: ChainProblemOut | None = None
