"""POST /v1/completions (OpenAI's legacy text completions, streaming or not)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from auditor.api.deps import ClientDep, ServicesDep
from auditor.api.generation import respond
from auditor.api.openai_format import completion_body, completion_chunk
from auditor.api.schemas import CompletionRequest

router = APIRouter(tags=["inference"])


@router.post("/v1/completions")
async def create_completion(body: CompletionRequest, request: Request, services: ServicesDep, client: ClientDep) -> Any:
    return await respond(services, request, client, endpoint="completions", body=body, inputs={"prompt": body.prompt},
                         make_chunk=completion_chunk, make_body=completion_body)
