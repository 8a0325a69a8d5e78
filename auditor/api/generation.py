"""The handler both inference routes share: context -> prepare (gate, KG) -> stream or complete -> response.

Chat and legacy completions differ only in how the input reaches the engine (messages or a prompt)
and in their wire shapes, which the routes pass in. The model registry picks the backend (the local
engine or an upstream) and the domain the model id implies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from auditor.api.deps import Services
from auditor.api.openai_format import ChunkFactory, now, request_context, resolve_model, sampling_params
from auditor.api.schemas import ChatCompletionRequest, CompletionRequest
from auditor.api.streaming import event_stream, start_stream
from auditor.auth.principal import Principal
from auditor.serving.inference import Outcome, Prepared
from auditor.serving.regenerate import complete_with_regeneration, with_correction

# (audit id, model, created) -> the route's chunk factory; (outcome, model, created) -> the response body
ChunkMaker = Callable[[str, str, int], ChunkFactory]
BodyMaker = Callable[[Outcome, str, int], dict[str, Any]]


async def respond(services: Services, request: Request, principal: Principal, *, endpoint: str,
                  body: ChatCompletionRequest | CompletionRequest, inputs: dict[str, Any],
                  make_chunk: ChunkMaker, make_body: BodyMaker) -> JSONResponse | StreamingResponse:
    route, domain = resolve_model(services.models, body.model, request.headers.get("x-domain"))
    context = request_context(request, principal, endpoint, domain=domain)

    async def prepare(request_inputs: dict[str, Any]) -> Prepared:
        return await run_in_threadpool(  # PII scan + KG linking: CPU work
            services.inference.prepare, context, params=sampling_params(body, services.settings), route=route,
            **request_inputs)

    prepared = await prepare(inputs)
    created = now()
    if body.stream:
        if route.regenerate_on_block:
            prepared.details["regeneration"] = {"applied": False, "reason": "streamed sentences cannot be taken back"}
        headers = {"X-Audit-Id": prepared.audit_id, "X-Request-Id": context.request_id}
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        first, rest = await start_stream(services.inference, prepared)
        chunks = event_stream(first, rest, make_chunk(prepared.audit_id, body.model, created), include_usage=include_usage)
        return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)
    if route.regenerate_on_block:
        outcome = await complete_with_regeneration(
            services.inference, prepared, retries=route.regenerate_on_block,
            reprepare=lambda correction: prepare(with_correction(inputs, correction)))
    else:
        outcome = await services.inference.complete(prepared)
    headers = {"X-Audit-Id": outcome.audit_id, "X-Request-Id": context.request_id}
    return JSONResponse(make_body(outcome, body.model, created), headers=headers)
