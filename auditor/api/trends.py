"""GET /v1/trends: FER, contradicted and block rates and claim counts per domain/model/intent/tenant, by hour
or day, over the current verdicts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from auditor.api.deps import DatabaseDep, ReaderDep
from auditor.api.errors import ApiError
from auditor.trail import trends
from auditor.trail.access_log import TenantNotAllowed

router = APIRouter(tags=["compliance"])


@router.get("/v1/trends")
def get_trends(query: Annotated[trends.TrendQuery, Query()], database: DatabaseDep, reader: ReaderDep) -> dict[str, Any]:
    try:
        return trends.read_trends(database, reader, query)
    except TenantNotAllowed as exc:
        raise ApiError(403, str(exc), code="insufficient_role", param="tenant") from exc
    except trends.TrendError as exc:
        raise ApiError(400, str(exc), code="invalid_parameter", param="since") from exc
