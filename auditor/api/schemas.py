"""Pydantic schemas of the HTTP API: OpenAI-compatible requests and the compliance API's own responses.

The trail's filters and record views (`auditor.trail.schemas`) are shared with the CLI and the jobs,
so they live with the trail; this module holds what only the HTTP surface speaks."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from auditor.jobs.reaudit import DEFAULT_CHUNK_SIZE, ReauditFilter
from auditor.trail.schemas import AuditRecordOut, CleanText

# -- OpenAI-compatible requests ------------------------------------------------------------------


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: CleanText


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: CleanText | list[ContentPart] | None = None

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

    model: CleanText = Field(min_length=1, max_length=256)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=32_768)
    stop: CleanText | list[CleanText] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    n: int = Field(default=1, ge=1, le=1, description="Only n=1 is supported")
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: CleanText | None = Field(default=None, max_length=256)

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
    prompt: CleanText = Field(max_length=1_000_000)
    logprobs: int | None = Field(default=None, ge=0, le=5)
    response_format: ResponseFormat | None = None
    echo: bool = False


# -- compliance responses ---------------------------------------------------------------------------


class AuditPage(BaseModel):
    data: list[AuditRecordOut]
    next_cursor: str | None


class ChainProblemOut(BaseModel):
    kind: str
    ledger: str = "records"
    seq: int | None            # None for a tenant's reader: seqs reveal the trail's volume
    record_id: str | None
    detail: str


class ChainReportOut(BaseModel):
    ok: bool
    records_checked: int | None   # the counts are for admins only
    checkpoints_checked: int | None
    last_seq: int | None
    problem: ChainProblemOut | None = None
    ledgers: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None


# -- re-audit jobs ----------------------------------------------------------------------------------


class ReauditCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    filter: ReauditFilter | None = None
    import_id: str | None = Field(default=None, max_length=36)
    chunk_size: int = Field(default=DEFAULT_CHUNK_SIZE, ge=1, le=10_000)


class ReauditProgress(BaseModel):
    total: int
    done: int
    failed: int
    not_applicable: int = 0   # records of no domain: scored, nothing to verify
    pending: int
    rate_per_s: float
    eta_s: float | None


class ReauditOut(BaseModel):
    id: str
    object: str = "reaudit"
    status: str
    source: str
    filter: dict[str, Any] | None
    import_id: str | None
    evaluator_version: str
    created_at: datetime
    started_at: datetime
    cancelled_at: datetime | None
    finished_at: datetime | None
    progress: ReauditProgress
    summary: dict[str, Any] | None
