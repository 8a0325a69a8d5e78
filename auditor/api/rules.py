"""Rule packs over HTTP: which pack each domain uses and which versions exist (auditors, admins); reload the
pack files and activate a version, e.g. to roll back (admins). Every process picks a change up within
`AUDITOR_RULE_PACK_REFRESH_S`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from auditor.api.deps import AdminDep, ReaderDep, ServicesDep
from auditor.api.errors import ApiError
from auditor.packs import registry
from auditor.trail.schemas import CleanText

router = APIRouter(prefix="/v1/rules", tags=["rule packs"])


class PackVersionOut(BaseModel):
    domain: str
    version: str
    hash: str
    source: str | None
    registered_at: datetime
    active: bool
    activated_at: datetime | None


class ActivateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: CleanText = Field(min_length=1, max_length=64, description="A registered version, hash or hash prefix")
    reason: CleanText | None = Field(default=None, max_length=2000)


@router.get("")
def list_packs(services: ServicesDep, _reader: ReaderDep) -> dict[str, Any]:
    with services.database.engine.connect() as conn:
        rows = registry.list_versions(conn)
    versions = [PackVersionOut.model_validate(row._asdict()) for row in rows]
    return {"object": "list", "active": {v.domain: {"version": v.version, "hash": v.hash} for v in versions if v.active},
            "data": versions}


@router.post("/reload")
def reload_packs(services: ServicesDep, admin: AdminDep) -> dict[str, Any]:
    """Register and activate the pack files as they are now (also known, older content: this is explicit)."""
    directory = registry.pack_dir(services.settings.rule_pack_dir)
    results = registry.sync_from_dir(services.database, directory, actor=admin, force=True)
    if services.packs is not None:
        services.packs.refresh(force=True)
    return {"directory": str(directory), "results": [r.__dict__ for r in results]}


@router.post("/{domain}/activate")
def activate_pack(domain: str, body: ActivateIn, services: ServicesDep, admin: AdminDep) -> dict[str, Any]:
    try:
        ref = registry.activate(services.database, domain, body.version, actor=admin, reason=body.reason)
    except registry.PackNotFound as exc:
        raise ApiError(404, str(exc), code="pack_not_found", param="version") from exc
    if services.packs is not None:
        services.packs.refresh(force=True)
    return {"domain": domain, **ref.to_dict()}
