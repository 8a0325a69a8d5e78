"""API keys over HTTP (admins only): create (the plaintext is returned once), list, revoke."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from auditor.api.deps import AdminDep, DatabaseDep
from auditor.api.errors import ApiError
from auditor.auth.keys import ApiKeyError, Role, create_key, list_keys, revoke_key
from auditor.trail.schemas import CleanText

router = APIRouter(prefix="/v1/keys", tags=["keys"])


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tenant: CleanText = Field(min_length=1, max_length=128)
    role: Role
    name: CleanText | None = Field(default=None, max_length=128)


class KeyOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: str
    tenant: str
    role: str
    name: str | None
    prefix: str
    created_at: datetime
    revoked_at: datetime | None


class CreatedKey(KeyOut):
    key: str = Field(description="The key itself: shown this once, stored only as a hash")


class KeyList(BaseModel):
    object: str = "list"
    data: list[KeyOut]


@router.post("", status_code=201, response_model=CreatedKey)
def create(body: KeyIn, database: DatabaseDep, _admin: AdminDep) -> CreatedKey:
    with database.session(write=True) as session:
        try:
            key, plaintext = create_key(session, tenant=body.tenant, role=body.role, name=body.name)
        except ApiKeyError as exc:
            raise ApiError(400, str(exc), code="invalid_key") from exc
        return CreatedKey(**KeyOut.model_validate(key).model_dump(), key=plaintext)


@router.get("", response_model=KeyList)
def list_all(database: DatabaseDep, _admin: AdminDep, tenant: Annotated[str | None, Query(max_length=128)] = None,
             include_revoked: bool = False) -> KeyList:
    with database.session() as session:
        return KeyList(data=[KeyOut.model_validate(k) for k in list_keys(session, tenant=tenant,
                                                                         include_revoked=include_revoked)])


@router.post("/{key_id}/revoke", response_model=KeyOut)
def revoke(key_id: str, database: DatabaseDep, _admin: AdminDep) -> KeyOut:
    with database.session(write=True) as session:
        try:
            return KeyOut.model_validate(revoke_key(session, key_id[:64]))
        except ApiKeyError as exc:
            raise ApiError(404, str(exc), code="key_not_found") from exc
