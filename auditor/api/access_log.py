"""GET /v1/access-log: who read which records, and what a key read (auditors: their tenant; admins: all)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from auditor.api.deps import DatabaseDep, ReaderDep
from auditor.api.errors import ApiError
from auditor.trail.access_log import read_log
from auditor.trail.schemas import AccessEntryOut, AccessLogFilters

router = APIRouter(tags=["compliance"])


class AccessLogPage(BaseModel):
    object: str = "list"
    data: list[AccessEntryOut]
    next_cursor: int | None


@router.get("/v1/access-log", response_model=AccessLogPage)
def access_log(filters: Annotated[AccessLogFilters, Query()], database: DatabaseDep, reader: ReaderDep) -> AccessLogPage:
    try:
        entries, cursor = read_log(database, reader, filters)
    except PermissionError as exc:
        raise ApiError(403, str(exc), code="insufficient_role", param="tenant") from exc
    return AccessLogPage(data=entries, next_cursor=cursor)
