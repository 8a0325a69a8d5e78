"""Legal holds over HTTP (admins only): place, list, show, release. Placing and releasing are chained events."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from auditor.api.deps import AdminDep, DatabaseDep
from auditor.api.errors import ApiError
from auditor.trail import holds
from auditor.trail.holds import HoldIn, HoldOut
from auditor.trail.schemas import CleanText

router = APIRouter(prefix="/v1/holds", tags=["legal holds"])


class HoldList(BaseModel):
    object: str = "list"
    data: list[HoldOut]


class ReleaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: CleanText = Field(min_length=1, max_length=2000)


@contextmanager
def _hold_errors() -> Iterator[None]:
    try:
        yield
    except holds.RecordsNotFound as exc:
        raise ApiError(404, str(exc), code="audit_not_found", param="scope.records") from exc
    except holds.HoldNotFound as exc:
        raise ApiError(404, str(exc), code="hold_not_found") from exc
    except holds.HoldConflict as exc:
        raise ApiError(409, str(exc), code="hold_released") from exc
    except holds.HoldError as exc:
        raise ApiError(400, str(exc), code="invalid_hold") from exc


@router.post("", status_code=201, response_model=HoldOut)
def place_hold(body: HoldIn, database: DatabaseDep, admin: AdminDep) -> HoldOut:
    with _hold_errors():
        return holds.place_hold(database, admin, body)


@router.get("", response_model=HoldList)
def list_holds(database: DatabaseDep, _admin: AdminDep,
               matter_id: Annotated[str | None, Query(max_length=128)] = None,
               include_released: bool = False) -> HoldList:
    return HoldList(data=holds.list_holds(database, matter_id=matter_id, include_released=include_released))


@router.get("/{hold_id}", response_model=HoldOut)
def show_hold(hold_id: int, database: DatabaseDep, _admin: AdminDep) -> HoldOut:
    with _hold_errors():
        return holds.get_hold(database, hold_id)


@router.post("/{hold_id}/release", response_model=HoldOut)
def release_hold(hold_id: int, body: ReleaseIn, database: DatabaseDep, admin: AdminDep) -> HoldOut:
    with _hold_errors():
        return holds.release_hold(database, admin, hold_id, reason=body.reason)
