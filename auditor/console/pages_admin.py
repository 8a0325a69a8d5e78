"""Admin pages: legal holds (place from a record list or a filter, release) and API keys (create, revoke).
Both go through the same service functions as the API (`auditor.trail.holds`, `auditor.auth.keys`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from auditor.api.deps import ServicesDep
from auditor.auth.keys import ROLES, create_key, list_keys, revoke_key
from auditor.console.auth import FormDep, UserDep, allow
from auditor.console.rendering import FormProblem, model_from, problems_shown, render
from auditor.trail import holds
from auditor.trail.holds import HoldIn
from auditor.trail.schemas import RecordFilter

router = APIRouter(prefix="/console")


@router.get("/holds", response_class=HTMLResponse, include_in_schema=False)
def hold_list(request: Request, user: UserDep, services: ServicesDep) -> HTMLResponse:
    allow(user, services.database, request, "admin")
    return _holds_page(request, user, services, errors=[], form=dict(request.query_params))


def _holds_page(request: Request, user: Any, services: Any, *, errors: list[str], form: dict[str, str],
                notice: str | None = None, status_code: int = 200) -> HTMLResponse:
    rows = holds.list_holds(services.database, include_released=True)
    return render(request, "holds.html", user, holds=rows, errors=errors, form=form, notice=notice,
                  status_code=status_code)


@router.post("/holds", include_in_schema=False)
def place_hold(request: Request, user: UserDep, form: FormDep, services: ServicesDep) -> Response:
    admin = allow(user, services.database, request, "admin")
    errors: list[str] = []
    with problems_shown(errors):
        body = model_from(HoldIn, {"matter_id": form.get("matter_id"), "reason": form.get("reason"),
                                   "scope": _scope(form)})
        hold = holds.place_hold(services.database, admin, body)
        return RedirectResponse(f"/console/holds?placed={hold.id}", status_code=303)
    return _holds_page(request, user, services, errors=errors, form=form, status_code=400)


def _scope(form: dict[str, str]) -> dict[str, Any]:
    records = [part.strip() for part in form.get("records", "").replace(",", " ").split() if part.strip()]
    if records:
        return {"records": records}
    if form.get("tenant"):
        return {"tenant": form["tenant"]}
    criteria = {k.removeprefix("filter_"): v for k, v in form.items() if k.startswith("filter_") and v}
    if not criteria:
        raise FormProblem("a hold needs a scope: record ids, a tenant, or at least one filter field")
    return {"filter": model_from(RecordFilter, criteria).model_dump(exclude_none=True, mode="json")}


@router.post("/holds/{hold_id}/release", include_in_schema=False)
def release_hold(hold_id: int, request: Request, user: UserDep, form: FormDep, services: ServicesDep) -> Response:
    admin = allow(user, services.database, request, "admin")
    errors: list[str] = []
    with problems_shown(errors):
        if not form.get("reason", "").strip():
            raise FormProblem("give the reason for releasing the hold")
        holds.release_hold(services.database, admin, hold_id, reason=form["reason"].strip())
        return RedirectResponse(f"/console/holds?released={hold_id}", status_code=303)
    return _holds_page(request, user, services, errors=errors, form={}, status_code=400)


@router.get("/keys", response_class=HTMLResponse, include_in_schema=False)
def keys(request: Request, user: UserDep, services: ServicesDep) -> HTMLResponse:
    allow(user, services.database, request, "admin")
    return _keys_page(request, user, services, errors=[])


def _keys_page(request: Request, user: Any, services: Any, *, errors: list[str], created: Any = None,
               plaintext: str | None = None, status_code: int = 200) -> HTMLResponse:
    with services.database.session() as session:
        rows = [dict(id=k.id, tenant=k.tenant, role=k.role, name=k.name, prefix=k.prefix, created_at=k.created_at,
                     revoked_at=k.revoked_at) for k in list_keys(session, include_revoked=True)]
    return render(request, "keys.html", user, keys=rows, roles=ROLES, errors=errors, created=created,
                  plaintext=plaintext, status_code=status_code)


@router.post("/keys", include_in_schema=False)
def create(request: Request, user: UserDep, form: FormDep, services: ServicesDep) -> Response:
    allow(user, services.database, request, "admin")
    errors: list[str] = []
    with problems_shown(errors):
        with services.database.session(write=True) as session:
            key, plaintext = create_key(session, tenant=form.get("tenant", "").strip(), role=form.get("role", ""),
                                        name=form.get("name") or None)
            created = {"id": key.id, "tenant": key.tenant, "role": key.role}
        # Shown once, in this response only (no redirect: the key must not travel in a URL).
        return _keys_page(request, user, services, errors=[], created=created, plaintext=plaintext, status_code=201)
    return _keys_page(request, user, services, errors=errors, status_code=400)


@router.post("/keys/{key_id}/revoke", include_in_schema=False)
def revoke(key_id: str, request: Request, user: UserDep, form: FormDep, services: ServicesDep) -> Response:
    allow(user, services.database, request, "admin")
    errors: list[str] = []
    with problems_shown(errors):
        with services.database.session(write=True) as session:
            revoke_key(session, key_id[:64])
        return RedirectResponse("/console/keys", status_code=303)
    return _keys_page(request, user, services, errors=errors, status_code=404)
