"""The KG versions over HTTP: `GET /v1/kg/versions` (the history, current marked) and `POST /v1/kg/reload`
(follow the store now instead of within AUDITOR_KG_REFRESH_S). Imports, diffs and rollbacks are CLI
commands (`auditor kg ...`): they are operator actions on the store, not API traffic."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Query

from auditor.api.deps import AdminDep, ReaderDep, ServicesDep
from auditor.api.errors import ApiError
from auditor.kg.versions import list_versions

router = APIRouter(tags=["knowledge"])


@router.get("/v1/kg/versions")
def kg_versions(services: ServicesDep, _reader: ReaderDep,
                domain: str | None = Query(default=None, max_length=64)) -> dict[str, Any]:
    return {"object": "list", "data": [asdict(v) for v in list_versions(services.database, domain=domain)]}


@router.post("/v1/kg/reload")
def kg_reload(services: ServicesDep, _admin: AdminDep) -> dict[str, Any]:
    """Load the store's current KG versions now; answers once every changed domain is being served."""
    if services.kg is None:
        raise ApiError(404, "this process does not follow KG versions", code="not_found")
    changed = services.kg.refresh()
    return {"changed": changed, "domains": services.kg.versions()}
