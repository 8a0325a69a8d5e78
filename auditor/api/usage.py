"""`GET /v1/usage`: cost and token usage per tenant, intent and model over the compliance filters
(`auditor.serving.usage`). Auditor and admin keys; a tenant's reader sees its own tenant; every read is logged."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from auditor.api.deps import DatabaseDep, ReaderDep
from auditor.api.errors import ApiError
from auditor.serving.usage import UsageFilters, usage_summary
from auditor.trail.access_log import TenantNotAllowed

router = APIRouter(prefix="/v1/usage", tags=["compliance"])


@router.get("")
def usage(filters: Annotated[UsageFilters, Query()], database: DatabaseDep, reader: ReaderDep) -> dict[str, Any]:
    try:
        return usage_summary(database, reader, filters)
    except TenantNotAllowed as exc:
        raise ApiError(403, str(exc), code="insufficient_role", param="tenant") from exc
