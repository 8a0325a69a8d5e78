"""POST /v1/chat/completions (OpenAI-compatible, streaming or not)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from auditor.api.deps import ClientDep, ServicesDep
from auditor.api.errors import ApiError
from auditor.api.generation import respond
from auditor.api.openai_format import chat_body, chat_chunk
from auditor.api.schemas import ChatCompletionRequest
from auditor.serving.tools import ToolsUnsupported, template_messages

router = APIRouter(tags=["inference"])


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request, services: ServicesDep,
                                 client: ClientDep) -> Any:
    try:
        messages = template_messages([m.for_template() for m in body.messages])
    except ToolsUnsupported as exc:
        raise ApiError(400, str(exc), code="invalid_parameter", param="messages") from exc
    return await respond(services, request, client, endpoint="chat", body=body, inputs={"messages": messages},
                         make_chunk=chat_chunk, make_body=chat_body)
