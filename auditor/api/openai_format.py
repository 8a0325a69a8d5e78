"""Translation between OpenAI's wire format and the service: headers -> context, body -> SamplingParams,
Outcome -> response bodies and stream chunks."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import Request

from auditor.api.errors import ApiError
from auditor.api.schemas import ChatCompletionRequest, CompletionRequest
from auditor.auth.principal import Principal
from auditor.serving.inference import Outcome, RequestContext
from auditor.serving.registry import DomainConflict, ModelRegistry, ModelRoute, UnknownModel
from auditor.serving.surface import RequestSurface
from auditor.serving.tools import ToolRequest, ToolsUnsupported, dialect_for
from auditor.settings import Settings
from engine.outputs import TokenLogprob
from engine.sampling_params import SamplingParams

# (text delta or None, finish_reason or None, first chunk?) -> one stream chunk body
ChunkFactory = Callable[[str | None, str | None, bool], dict[str, Any]]

_INTENT = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_REQUEST_ID = re.compile(r"^[\x21-\x7e]{1,128}$")


def resolve_model(models: ModelRegistry, model: str, header_domain: str | None) -> tuple[ModelRoute, str | None]:
    """The route and domain for a request's model id ("auditor-medical", "<model>:medical", a registry id) and
    X-Domain; 404 for unknown models, 400 when the two disagree or name an unknown domain."""
    try:
        return models.resolve(model, header_domain)
    except UnknownModel as exc:
        raise ApiError(404, str(exc), code="model_not_found", param="model") from exc
    except DomainConflict as exc:
        raise ApiError(400, str(exc), code=exc.code) from exc


def header_domain(value: str | None, settings: Settings) -> str | None:
    """X-Domain alone, for endpoints whose model names no domain (embeddings)."""
    domain = value.strip().lower() if value else None
    if domain is not None and domain not in settings.domains:
        raise ApiError(400, f"unknown domain {domain!r}; known: {', '.join(settings.domains)}", code="unknown_domain")
    return domain


def request_context(request: Request, principal: Principal, endpoint: str, *, domain: str | None) -> RequestContext:
    intent = request.headers.get("x-intent")
    if intent is not None and not _INTENT.match(intent):
        raise ApiError(400, "X-Intent must be 1-64 characters of a-z, 0-9, '_', '.', '-'", code="invalid_intent")
    request_id = request.headers.get("x-request-id")
    if request_id is not None and not _REQUEST_ID.match(request_id):
        raise ApiError(400, "X-Request-Id must be 1-128 printable ASCII characters", code="invalid_request_id")
    return RequestContext(principal, endpoint, request_id or str(uuid.uuid4()), intent, domain,
                          client_request_id=request_id is not None)


def request_surface(body: ChatCompletionRequest | CompletionRequest, *, chat_template: str | None) -> RequestSurface:
    """What the request asks beyond prompt and sampling (tools, identifiers, logit bias, echo), checked here so
    that anything this checkpoint cannot honour is a 400 naming the field."""
    surface = RequestSurface(user=body.user, logit_bias=_logit_bias(body.logit_bias), n=body.n)
    if isinstance(body, CompletionRequest):
        surface.echo = body.echo
        return surface
    surface.messages = [m.for_template() for m in body.messages]
    surface.safety_identifier, surface.metadata = body.safety_identifier, body.metadata
    if body.tools:
        try:
            dialect = dialect_for(chat_template)
        except ToolsUnsupported as exc:
            raise ApiError(400, f"tools: {exc}", code="unsupported_parameter", param="tools") from exc
        choice = body.tool_choice.model_dump() if hasattr(body.tool_choice, "model_dump") else body.tool_choice or "auto"
        surface.tools = ToolRequest([t.model_dump(exclude_none=True) for t in body.tools], choice,
                                    parallel=body.parallel_tool_calls is not False, dialect=dialect)
        if surface.tools.active and body.response_format is not None and body.response_format.type != "text":
            raise ApiError(400, "response_format cannot be combined with tools (the calls have their own grammar); "
                           "use tool_choice='none' or drop response_format", code="invalid_parameter",
                           param="response_format")
    return surface


def _logit_bias(values: dict[str, float] | None) -> dict[int, float] | None:
    if not values:
        return None
    try:
        return {int(token): bias for token, bias in values.items()}
    except ValueError:
        raise ApiError(400, "logit_bias keys must be token ids (integers)", code="invalid_parameter",
                       param="logit_bias") from None


def sampling_params(body: ChatCompletionRequest | CompletionRequest, settings: Settings,
                    surface: RequestSurface | None = None) -> SamplingParams:
    if isinstance(body, ChatCompletionRequest):
        max_tokens = body.max_completion_tokens or body.max_tokens
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        if body.top_logprobs is not None and not body.logprobs:
            raise ApiError(400, "top_logprobs requires logprobs=true", code="invalid_parameter", param="top_logprobs")
    else:
        max_tokens, logprobs = body.max_tokens, body.logprobs
    response_format = body.response_format.model_dump(exclude_none=True) if body.response_format else None
    if response_format and response_format["type"] == "json_schema" and not isinstance(response_format.get("json_schema"), dict):
        raise ApiError(400, "response_format.json_schema is required for type json_schema", param="response_format")
    if response_format and response_format["type"] == "text":
        response_format = None
    if isinstance(body, CompletionRequest) and body.echo and logprobs is not None:
        raise ApiError(400, "echo with logprobs would need the prompt's logprobs, which this engine does not compute",
                       code="unsupported_parameter", param="echo")
    extra_args: dict[str, Any] = {}
    if surface is not None:
        if surface.tools is not None and surface.tools.active:
            try:
                response_format = surface.tools.response_format()
            except ToolsUnsupported as exc:
                raise ApiError(400, str(exc), code="invalid_parameter", param="tool_choice") from exc
        if surface.logit_bias:
            extra_args["logit_bias"] = dict(surface.logit_bias)
    return SamplingParams(
        temperature=body.temperature, top_p=body.top_p, seed=body.seed, stop=body.stop_list(),
        max_tokens=max_tokens or settings.default_max_tokens, presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty, logprobs=logprobs, response_format=response_format,
        extra_args=extra_args,
    )


def total_usage(outcomes: list[Outcome]) -> dict[str, int]:
    """Usage of one response: the prompt once (the n choices share it), every choice's completion tokens."""
    prompt = outcomes[0].prompt_tokens if outcomes else 0
    completion = sum(o.completion_tokens for o in outcomes)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _token_entry(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def chat_logprobs(logprobs: list[TokenLogprob] | None) -> dict[str, Any] | None:
    if logprobs is None:
        return None
    return {"content": [
        {**_token_entry(lp.token, lp.logprob), "top_logprobs": [_token_entry(t, v) for _, t, v in lp.top]}
        for lp in logprobs
    ]}


def completion_logprobs(logprobs: list[TokenLogprob] | None) -> dict[str, Any] | None:
    if logprobs is None:
        return None
    offsets, position = [], 0
    for lp in logprobs:
        offsets.append(position)
        position += len(lp.token)
    return {"tokens": [lp.token for lp in logprobs], "token_logprobs": [lp.logprob for lp in logprobs],
            "top_logprobs": [{t: v for _, t, v in lp.top} for lp in logprobs], "text_offset": offsets}


def chat_choice(outcome: Outcome, index: int = 0) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": outcome.text, "refusal": outcome.refusal}
    if outcome.tool_calls:
        message["tool_calls"] = outcome.tool_calls
        message["content"] = outcome.text or None
    return {"index": index, "message": message, "logprobs": chat_logprobs(outcome.logprobs),
            "finish_reason": outcome.finish_reason}


def completion_choice(outcome: Outcome, index: int = 0, echo: str = "") -> dict[str, Any]:
    return {"index": index, "text": echo + outcome.text, "logprobs": completion_logprobs(outcome.logprobs),
            "finish_reason": outcome.finish_reason}


def _body(kind: str, outcomes: list[Outcome], choices: list[dict[str, Any]], model: str, created: int) -> dict[str, Any]:
    """One response for n choices: named by choice 0's audit id; each choice carries its own audit id and summary
    when n > 1 (each is its own record)."""
    first = outcomes[0]
    if len(outcomes) > 1:
        for choice, outcome in zip(choices, outcomes, strict=True):
            choice["audit_id"], choice["audit"] = outcome.audit_id, outcome.audit_summary()
    prefix, object_name = ("chatcmpl", "chat.completion") if kind == "chat" else ("cmpl", "text_completion")
    return {"id": f"{prefix}-{first.audit_id}", "object": object_name, "created": created, "model": model,
            "choices": choices, "usage": total_usage(outcomes), "audit_id": first.audit_id, "audit": first.audit_summary()}


def chat_body(outcomes: list[Outcome], model: str, created: int, echo: str = "") -> dict[str, Any]:
    return _body("chat", outcomes, [chat_choice(o, i) for i, o in enumerate(outcomes)], model, created)


def completion_body(outcomes: list[Outcome], model: str, created: int, echo: str = "") -> dict[str, Any]:
    return _body("completions", outcomes, [completion_choice(o, i, echo) for i, o in enumerate(outcomes)], model,
                 created)


def closing_chunks(make_chunk: ChunkFactory, outcome: Outcome) -> list[dict[str, Any]]:
    """A choice's last chunks, sent after its record's commit: its tool calls (whole, one delta), the refusal
    (chat: what the gate refused or withheld, as OpenAI streams it, in `delta.refusal`), then the finish_reason
    with the choice's logprobs (the gate releases text by sentence, so they come at the end) and the audit
    summary. Legacy completions have no refusal field: their finish_reason alone says it."""
    chunks = []
    chat = make_chunk(None, None, False)["object"] == "chat.completion.chunk"
    if outcome.tool_calls:
        chunk = make_chunk(None, None, False)
        chunk["choices"][0]["delta"] = {"tool_calls": [{"index": i, **call} for i, call in enumerate(outcome.tool_calls)]}
        chunks.append(chunk)
    if chat and outcome.refusal:
        chunk = make_chunk(None, None, False)
        chunk["choices"][0]["delta"] = {"refusal": outcome.refusal}
        chunks.append(chunk)
    final = make_chunk(None, outcome.finish_reason, False)
    if outcome.logprobs is not None:
        final["choices"][0]["logprobs"] = (chat_logprobs if chat else completion_logprobs)(outcome.logprobs)
    final["audit"] = outcome.audit_summary()
    chunks.append(final)
    return chunks


def chat_chunk(audit_id: str, model: str, created: int) -> ChunkFactory:
    """The chunk factory of a chat stream: the first chunk carries the assistant role."""
    def chunk(text: str | None, finish_reason: str | None, first: bool) -> dict[str, Any]:
        delta: dict[str, Any] = {"role": "assistant", "content": text or ""} if first else {}
        if text:
            delta["content"] = text
        return {"id": f"chatcmpl-{audit_id}", "object": "chat.completion.chunk", "created": created, "model": model,
                "audit_id": audit_id,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
    return chunk


def completion_chunk(audit_id: str, model: str, created: int) -> ChunkFactory:
    def chunk(text: str | None, finish_reason: str | None, first: bool) -> dict[str, Any]:
        return {"id": f"cmpl-{audit_id}", "object": "text_completion", "created": created, "model": model,
                "audit_id": audit_id,
                "choices": [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}]}
    return chunk


def sse(payload: dict[str, Any] | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)}\n\n"


def now() -> int:
    return int(time.time())
