"""POST /v1/chat/completions (OpenAI-compatible, streaming or not)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from auditor.api.deps import get_services
from auditor.api.openai_format import chat_body, now, request_context, sampling_params
from auditor.api.streaming import event_stream, start_stream
from auditor.auth.principal import Principal, authenticate, require_role
from auditor.trail.schemas import ChatCompletionRequest

router = APIRouter(tags=["inference"])


@router.post("/v1/chat/completions")
async def create_chat_completion(
    body: ChatCompletionRequest, request: Request, principal: Annotated[Principal, Depends(authenticate)]
) -> Any:
    require_role(principal, "client", "admin")
    services = get_services(request)
    context = request_context(request, principal, "chat", body.model, engine_model_id=services.engine.model_id,
                              settings=services.settings)
    messages = [{"role": m.role, "content": m.text()} for m in body.messages]
    prepared = await run_in_threadpool(  # PII scan + KG linking: CPU work
        services.inference.prepare, context, messages=messages, params=sampling_params(body, services.settings))
    headers = {"X-Audit-Id": prepared.audit_id, "X-Request-Id": context.request_id}
    created = now()
    if body.stream:
        await services.inference.probe_store()

        def chunk(text: str | None, finish_reason: str | None, first: bool) -> dict[str, Any]:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if text:
                delta["content"] = text
            return {"id": f"chatcmpl-{prepared.audit_id}", "object": "chat.completion.chunk", "created": created,
                    "model": body.model, "audit_id": prepared.audit_id,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}

        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        first, rest = await start_stream(services.inference, prepared)
        return StreamingResponse(event_stream(first, rest, chunk, include_usage=include_usage),
                                 media_type="text/event-stream", headers=headers)
    outcome = await services.inference.complete(prepared)
    return JSONResponse(chat_body(outcome, body.model, created), headers=headers)
