"""The handler both inference routes share: context -> prepare (gate, KG) -> stream or complete -> response.

Chat and legacy completions differ only in how the input reaches the engine (messages or a prompt)
and in their wire shapes, which the routes pass in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from auditor.api.deps import Services
from auditor.api.openai_format import ChunkFactory, now, request_context, sampling_params
from auditor.api.schemas import ChatCompletionRequest, CompletionRequest
from auditor.api.streaming import event_stream, start_stream
from auditor.auth.principal import Principal
from auditor.serving.inference import Outcome

# (audit id, model, created) -> the route's chunk factory; (outcome, model, created) -> the response body
ChunkMaker = Callable[[str, str, int], ChunkFactory]
BodyMaker = Callable[[Outcome, str, int], dict[str, Any]]


async def respond(services: Services, request: Request, principal: Principal, *, endpoint: str,
                  body: ChatCompletionRequest | CompletionRequest, inputs: dict[str, Any],
                  make_chunk: ChunkMaker, make_body: BodyMaker) -> JSONResponse | StreamingResponse:
    context = request_context(request, principal, endpoint, body.model, engine_model_id=services.engine.model_id,
                              settings=services.settings)
    prepared = await run_in_threadpool(  # PII scan + KG linking: CPU work
        services.inference.prepare, context, params=sampling_params(body, services.settings), **inputs)
    headers = {"X-Audit-Id": prepared.audit_id, "X-Request-Id": context.request_id}
    created = now()
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        first, rest = await start_stream(services.inference, prepared)
        chunks = event_stream(first, rest, make_chunk(prepared.audit_id, body.model, created), include_usage=include_usage)
        return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)
    outcome = await services.inference.complete(prepared)
    return JSONResponse(make_body(outcome, body.model, created), headers=headers)
