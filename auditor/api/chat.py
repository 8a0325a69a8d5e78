"""POST /v1/chat/completions (OpenAI-compatible, streaming or not)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from auditor.api.deps import ClientDep, ServicesDep
from auditor.api.generation import respond
from auditor.api.openai_format import chat_body, chat_chunk
from auditor.api.schemas import ChatCompletionRequest

router = APIRouter(tags=["inference"])


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request, services: ServicesDep,
                                 client: ClientDep) -> Any:
    messages = [{"role": m.role, "content": m.text()} for m in body.messages]
    return await respond(services, request, client, endpoint="chat", body=body, inputs={"messages": messages},
                         make_chunk=chat_chunk, make_body=chat_body)
