"""GET /v1/models: the engine's model, plus one `auditor-<domain>` alias per domain."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from auditor.api.deps import get_request_settings, get_services
from auditor.auth.principal import Principal, authenticate
from auditor.settings import Settings

router = APIRouter(tags=["inference"])


@router.get("/v1/models")
def list_models(request: Request, settings: Annotated[Settings, Depends(get_request_settings)],
                _principal: Annotated[Principal, Depends(authenticate)]) -> dict[str, Any]:
    model_id = get_services(request).engine.model_id
    ids = [model_id, *(f"auditor-{domain}" for domain in settings.domains)]
    return {"object": "list", "data": [{"id": i, "object": "model", "created": 0, "owned_by": "auditor"} for i in ids]}
