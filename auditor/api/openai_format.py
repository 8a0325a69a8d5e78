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


def request_context(request: Request, principal: Principal, endpoint: str, *, domain: str | None) -> RequestContext:
    intent = request.headers.get("x-intent")
    if intent is not None and not _INTENT.match(intent):
        raise ApiError(400, "X-Intent must be 1-64 characters of a-z, 0-9, '_', '.', '-'", code="invalid_intent")
    request_id = request.headers.get("x-request-id")
    if request_id is not None and not _REQUEST_ID.match(request_id):
        raise ApiError(400, "X-Request-Id must be 1-128 printable ASCII characters", code="invalid_request_id")
    return RequestContext(principal, endpoint, request_id or str(uuid.uuid4()), intent, domain)


def sampling_params(body: ChatCompletionRequest | CompletionRequest, settings: Settings) -> SamplingParams:
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
    return SamplingParams(
        temperature=body.temperature, top_p=body.top_p, seed=body.seed, stop=body.stop_list(),
        max_tokens=max_tokens or settings.default_max_tokens, presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty, logprobs=logprobs, response_format=response_format,
    )


def usage(outcome: Outcome) -> dict[str, int]:
    return {"prompt_tokens": outcome.prompt_tokens, "completion_tokens": outcome.completion_tokens,
            "total_tokens": outcome.prompt_tokens + outcome.completion_tokens}


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


def chat_body(outcome: Outcome, model: str, created: int) -> dict[str, Any]:
    refused = outcome.status == "refused"
    message = {"role": "assistant", "content": outcome.text, "refusal": outcome.text if refused else None}
    return {
        "id": f"chatcmpl-{outcome.audit_id}", "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": chat_logprobs(outcome.logprobs),
                     "finish_reason": outcome.finish_reason}],
        "usage": usage(outcome), "audit_id": outcome.audit_id, "audit": outcome.audit_summary(),
    }


def completion_body(outcome: Outcome, model: str, created: int) -> dict[str, Any]:
    return {
        "id": f"cmpl-{outcome.audit_id}", "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": outcome.text, "logprobs": completion_logprobs(outcome.logprobs),
                     "finish_reason": outcome.finish_reason}],
        "usage": usage(outcome), "audit_id": outcome.audit_id, "audit": outcome.audit_summary(),
    }


def chat_chunk(audit_id: str, model: str, created: int) -> ChunkFactory:
    """The chunk factory of a chat stream: the first chunk carries the assistant role."""
    def chunk(text: str | None, finish_reason: str | None, first: bool) -> dict[str, Any]:
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
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
