"""POST /v1/embeddings (OpenAI-compatible) on the bundled MiniLM; every call is an audit record."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from auditor.api.deps import ClientDep, ServicesDep
from auditor.api.errors import ApiError
from auditor.api.openai_format import request_context
from auditor.api.schemas import EmbeddingRequest
from auditor.serving.embeddings import EMBEDDING_MODEL_ID

router = APIRouter(tags=["inference"])


@router.post("/v1/embeddings")
async def create_embeddings(body: EmbeddingRequest, request: Request, services: ServicesDep,
                            client: ClientDep) -> Any:
    if body.model != EMBEDDING_MODEL_ID:
        raise ApiError(404, f"the embedding model {body.model!r} does not exist; this service embeds with "
                       f"{EMBEDDING_MODEL_ID!r}", code="model_not_found", param="model")
    try:
        texts = body.inputs()
    except ValueError as exc:
        raise ApiError(400, str(exc), code="invalid_parameter", param="input") from exc
    context = request_context(request, client, "embeddings", services.engine.model_id,
                              engine_model_id=services.engine.model_id, settings=services.settings)
    result = await services.embeddings.embed(context, texts, encoding_format=body.encoding_format,
                                             dimensions=body.dimensions, user=body.user)
    data = [{"object": "embedding", "index": i, "embedding": vector} for i, vector in enumerate(result.vectors)]
    return JSONResponse({"object": "list", "data": data, "model": EMBEDDING_MODEL_ID,
                         "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
                         "audit_id": result.audit_id}, headers={"X-Audit-Id": result.audit_id})
