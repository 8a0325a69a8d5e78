"""Pydantic schemas of the HTTP API: OpenAI-compatible requests and the compliance API's own responses.

The trail's filters and record views (`auditor.trail.schemas`) are shared with the CLI and the jobs,
so they live with the trail; this module holds what only the HTTP surface speaks."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from auditor.jobs.reaudit import DEFAULT_CHUNK_SIZE, ReauditFilter
from auditor.trail.schemas import AuditRecordOut, CleanText
from auditor.trail.storable import CleanJson, clean_json

# -- OpenAI-compatible requests ------------------------------------------------------------------
# Every model forbids fields it does not declare: a field this service does not honour gets a 400 that names
# it (docs/openai_compatibility.md lists each field of OpenAI's API and what happens to it).

_TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ContentPart(_Strict):
    type: Literal["text"]
    text: CleanText


class FunctionCall(_Strict):
    name: str = Field(pattern=_TOOL_NAME)
    arguments: CleanText = Field(max_length=100_000)


class ToolCall(_Strict):
    id: CleanText = Field(min_length=1, max_length=128)
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: CleanText | list[ContentPart] | None = None
    name: str | None = Field(default=None, pattern=_TOOL_NAME)
    tool_calls: list[ToolCall] | None = Field(default=None, max_length=64)
    tool_call_id: CleanText | None = Field(default=None, min_length=1, max_length=128)
    refusal: CleanText | None = None          # the SDK echoes it back on assistant turns

    @model_validator(mode="after")
    def _tool_fields_fit_the_role(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("tool_calls belong to assistant messages")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        if self.tool_call_id and self.role != "tool":
            raise ValueError("tool_call_id belongs to tool messages")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    def for_template(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role, "content": self.text()}
        if self.name:
            message["name"] = self.name
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            message["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        return message


class FunctionDefinition(_Strict):
    name: str = Field(pattern=_TOOL_NAME)
    description: CleanText | None = Field(default=None, max_length=10_000)
    parameters: CleanJson | None = None
    strict: bool | None = None


class ToolDefinition(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class _FunctionName(_Strict):
    name: str = Field(pattern=_TOOL_NAME)


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: _FunctionName


class StreamOptions(_Strict):
    include_usage: bool = False


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: CleanJson | None = None

    @model_validator(mode="after")
    def _storable_extras(self) -> ResponseFormat:
        clean_json(self.model_extra or {})   # extra fields are allowed, and stored like the rest
        return self


class _GenerationRequest(_Strict):
    model: CleanText = Field(min_length=1, max_length=256)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=32_768)
    stop: CleanText | list[CleanText] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    n: int = Field(default=1, ge=1, le=8)
    logit_bias: dict[str, float] | None = Field(default=None, max_length=300)
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
    tools: list[ToolDefinition] | None = Field(default=None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[CleanText, CleanText] | None = Field(default=None, max_length=16)
    safety_identifier: CleanText | None = Field(default=None, max_length=256)
    # Every request is recorded in the audit trail: store=false cannot be honoured (400), store=true is.
    store: bool | None = None
    service_tier: Literal["auto", "default"] | None = None
    modalities: list[Literal["text"]] | None = None

    @field_validator("store")
    @classmethod
    def _always_stored(cls, value: bool | None) -> bool | None:
        if value is False:
            raise ValueError("every request is recorded in the audit trail; store=false cannot be honoured")
        return value

    @field_validator("metadata")
    @classmethod
    def _bounded_metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value and any(len(k) > 64 or len(v) > 512 for k, v in value.items()):
            raise ValueError("metadata keys are at most 64 characters and values at most 512")
        return value

    @model_validator(mode="after")
    def _tool_choice_names_an_offered_tool(self) -> ChatCompletionRequest:
        if self.tool_choice is not None and self.tool_choice != "none" and not self.tools:
            raise ValueError("tool_choice needs tools")
        if isinstance(self.tool_choice, NamedToolChoice) and self.tools and \
                self.tool_choice.function.name not in {t.function.name for t in self.tools}:
            raise ValueError(f"tool_choice names {self.tool_choice.function.name!r}, which is not among the tools")
        if self.tools and len({t.function.name for t in self.tools}) < len(self.tools):
            raise ValueError("tools must have distinct function names")
        return self


class CompletionRequest(_GenerationRequest):
    prompt: CleanText = Field(max_length=1_000_000)
    logprobs: int | None = Field(default=None, ge=0, le=5)
    response_format: ResponseFormat | None = None
    echo: bool = False


class EmbeddingRequest(_Strict):
    model: CleanText = Field(min_length=1, max_length=256)
    input: CleanText | list[CleanText] = Field(max_length=2048)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: CleanText | None = Field(default=None, max_length=256)

    def inputs(self) -> list[str]:
        texts = [self.input] if isinstance(self.input, str) else list(self.input)
        if not texts or any(not text for text in texts):
            raise ValueError("input must be a non-empty string or a non-empty list of non-empty strings")
        return texts


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
    total: int                 # records frozen so far (final once planning is false)
    done: int
    failed: int
    not_applicable: int = 0   # records of no domain: scored, nothing to verify
    pending: int
    rate_per_s: float
    eta_s: float | None
    planning: bool = False


class ReauditOut(BaseModel):
    id: str
    object: str = "reaudit"
    status: str
    source: str
    filter: dict[str, Any] | None
    import_id: str | None
    evaluator_version: str
    rule_packs: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="domain -> {version, hash}: the packs the job judges with, pinned at creation")
    max_seq: int | None = None
    planning: bool = False
    created_at: datetime
    started_at: datetime
    cancelled_at: datetime | None
    finished_at: datetime | None
    progress: ReauditProgress
    summary: dict[str, Any] | None


class ReauditList(BaseModel):
    object: str = "list"
    data: list[ReauditOut]
    next_cursor: str | None
