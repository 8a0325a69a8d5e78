"""GET /v1/models: the engine's model, one `auditor-<domain>` alias per domain, and the embedding model."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from auditor.api.deps import CallerDep, ServicesDep
from auditor.serving.embeddings import EMBEDDING_MODEL_ID

router = APIRouter(tags=["inference"])


@router.get("/v1/models")
def list_models(services: ServicesDep, _caller: CallerDep) -> dict[str, Any]:
    ids = [services.engine.model_id, *(f"auditor-{domain}" for domain in services.settings.domains),
           EMBEDDING_MODEL_ID]
    return {"object": "list", "data": [{"id": i, "object": "model", "created": 0, "owned_by": "auditor"} for i in ids]}
