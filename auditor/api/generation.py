"""The handler both inference routes share: context -> prepare (gate, KG) -> stream or complete -> response.

Chat and legacy completions differ only in how the input reaches the engine (messages or a prompt)
and in their wire shapes, which the routes pass in. With n > 1 each choice is its own audited request
(`auditor.serving.choices`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from auditor.api.deps import Services
from auditor.api.openai_format import ChunkFactory, now, request_context, request_surface, sampling_params
from auditor.api.schemas import ChatCompletionRequest, CompletionRequest
from auditor.api.streaming import event_stream, start_stream
from auditor.auth.principal import Principal
from auditor.serving.choices import fork_choices, run_choices
from auditor.serving.inference import Outcome

# (audit id, model, created) -> the route's chunk factory; (outcomes, model, created, echo) -> the response body
ChunkMaker = Callable[[str, str, int], ChunkFactory]
BodyMaker = Callable[[list[Outcome], str, int, str], dict[str, Any]]


async def respond(services: Services, request: Request, principal: Principal, *, endpoint: str,
                  body: ChatCompletionRequest | CompletionRequest, inputs: dict[str, Any],
                  make_chunk: ChunkMaker, make_body: BodyMaker) -> JSONResponse | StreamingResponse:
    context = request_context(request, principal, endpoint, body.model, engine_model_id=services.engine.model_id,
                              settings=services.settings)
    surface = request_surface(body, chat_template=getattr(services.engine.tokenizer, "chat_template", None))
    prepared = await run_in_threadpool(  # PII scan + KG linking: CPU work
        services.inference.prepare, context, params=sampling_params(body, services.settings, surface),
        surface=surface, **inputs)
    choices = fork_choices(prepared, body.n)
    headers = {"X-Audit-Id": prepared.audit_id, "X-Request-Id": context.request_id}
    if body.n > 1:
        headers["X-Audit-Ids"] = ",".join(choice.audit_id for choice in choices)
    created = now()
    echo = body.prompt if isinstance(body, CompletionRequest) and body.echo else ""
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        streams = await run_choices(choices, lambda choice: start_stream(services.inference, choice))
        chunks = event_stream(streams, make_chunk(prepared.audit_id, body.model, created), include_usage=include_usage,
                              echo=echo)
        return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)
    outcomes = await run_choices(choices, services.inference.complete)
    return JSONResponse(make_body(outcomes, body.model, created, echo), headers=headers)
