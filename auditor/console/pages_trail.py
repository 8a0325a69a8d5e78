"""Console pages over the trail: search, a record, the review queue and reviewing, bundles, chain status.
Every read goes through `auditor.trail.reads` / `reviews` / `access_log`, so each is access-logged as over the API."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from auditor.api import audits as audits_api
from auditor.api.deps import ServicesDep
from auditor.console.auth import FormDep, UserDep, allow
from auditor.console.highlight import segments
from auditor.console.rendering import FormProblem, model_from, problems_shown, render
from auditor.trail import reads, reviews
from auditor.trail.access_log import read_log
from auditor.trail.bundle import BundleFilters
from auditor.trail.reviews import QueueFilters, ReviewIn
from auditor.trail.schemas import AccessLogFilters, AuditFilters
from auditor.trail.verification import chain_status
from auditor.trail.witness import WitnessError, open_witness

router = APIRouter(prefix="/console")
READERS = ("auditor", "admin")
REVIEWERS = ("reviewer", "auditor", "admin")


@router.get("", include_in_schema=False)
def home(user: UserDep) -> RedirectResponse:
    return RedirectResponse("/console/reviews" if user.role == "reviewer" else "/console/records", status_code=303)


@router.get("/records", response_class=HTMLResponse, include_in_schema=False)
def search(request: Request, user: UserDep, services: ServicesDep) -> HTMLResponse:
    reader = allow(user, services.database, request, *READERS)
    params = dict(request.query_params)
    errors: list[str] = []
    rows: list[Any] = []
    next_cursor = None
    with problems_shown(errors):
        filters = model_from(AuditFilters, params)
        rows, next_cursor = reads.list_page(services.database, reader, filters)
    next_params = {k: v for k, v in params.items() if v and k != "cursor"}
    return render(request, "records.html", user, params=params, rows=rows, errors=errors,
                  next_url=f"/console/records?{_query({**next_params, 'cursor': next_cursor})}" if next_cursor else None,
                  first_url=f"/console/records?{_query(next_params)}" if params.get("cursor") else None,
                  bundle_url=f"/console/bundle?{_query(_bundle_params(next_params))}")


@router.get("/records/{record_id}", response_class=HTMLResponse, include_in_schema=False)
def record(record_id: str, request: Request, user: UserDep, services: ServicesDep) -> HTMLResponse:
    reader = allow(user, services.database, request, *REVIEWERS)
    notice = "Your review was recorded (a chained event)." if request.query_params.get("reviewed") else None
    return _record_page(request, user, services, reader, record_id[:64], notice=notice)


def _record_page(request: Request, user: Any, services: Any, reader: Any, record_id: str, *,
                 errors: list[str] | None = None, notice: str | None = None) -> HTMLResponse:
    errors = list(errors or [])
    try:
        shown = reads.show_record(services.database, reader, record_id)
    except reads.RecordNotFound as exc:
        return render(request, "error.html", user, status_code=404, message=str(exc))
    claims = (shown.current.claims if shown.current and shown.current.claims is not None else shown.claims) or []
    readers: list[Any] = []
    if user.role in READERS:   # who read it: the access log is the auditors' and admins' (itself a logged read)
        with problems_shown(errors):
            readers, _ = read_log(services.database, reader, AccessLogFilters(record_id=record_id, limit=50))
    return render(request, "record.html", user, record=shown, claims=claims,
                  segments=segments(shown.output, claims), readers=readers, errors=errors, notice=notice,
                  verdict_ref=(shown.current.evaluation_id or "inline") if shown.current else None)


@router.post("/records/{record_id}/reviews", response_class=HTMLResponse, include_in_schema=False)
def review(record_id: str, request: Request, user: UserDep, form: FormDep, services: ServicesDep) -> Response:
    """The review form: one decision per claim (blank = not reviewed), an optional note and missed claim."""
    reviewer = allow(user, services.database, request, *REVIEWERS)
    errors: list[str] = []
    with problems_shown(errors):
        body = _review_body(form)
        reviews.submit_review(services.database, reviewer, record_id[:64], body)
        return RedirectResponse(f"/console/records/{record_id[:64]}?reviewed=1#reviews", status_code=303)
    return _record_page(request, user, services, reviewer, record_id[:64], errors=errors)


def _review_body(form: dict[str, str]) -> ReviewIn:
    items: list[dict[str, Any]] = []
    for name, decision in sorted(form.items()):
        if name.startswith("decision_") and decision:
            index = name.removeprefix("decision_")
            if not index.isdigit():
                raise FormProblem(f"unknown field {name!r}")
            items.append({"claim_index": int(index), "decision": decision,
                          "note": form.get(f"note_{index}") or None})
    if form.get("missed_text"):
        items.append({"decision": "false_negative", "text": form["missed_text"]})
    if not items:
        raise FormProblem("choose a decision for at least one claim (or name a missed claim)")
    return model_from(ReviewIn, {"claims": items, "note": form.get("note"), "evaluation_id": form.get("evaluation_id")})


@router.get("/reviews", response_class=HTMLResponse, include_in_schema=False)
def review_queue(request: Request, user: UserDep, services: ServicesDep) -> HTMLResponse:
    reviewer = allow(user, services.database, request, *REVIEWERS)
    params = dict(request.query_params)
    errors: list[str] = []
    rows: list[Any] = []
    next_cursor = None
    with problems_shown(errors):
        filters = model_from(QueueFilters, params)
        rows, next_cursor = reviews.review_queue(services.database, reviewer, filters,
                                                 default_min_confidence=services.settings.review_min_confidence)
    rest = {k: v for k, v in params.items() if v and k != "cursor"}
    return render(request, "queue.html", user, params=params, rows=rows, errors=errors,
                  next_url=f"/console/reviews?{_query({**rest, 'cursor': next_cursor})}" if next_cursor else None)


@router.get("/bundle", include_in_schema=False)
def bundle(request: Request, user: UserDep, services: ServicesDep) -> Response:
    """The regulator bundle of the search's filters, as the API makes it (a logged read of every record in it)."""
    reader = allow(user, services.database, request, *READERS)
    errors: list[str] = []
    with problems_shown(errors):
        filters = model_from(BundleFilters, dict(request.query_params))
        return audits_api.export_bundle(filters, services.database, reader)
    return render(request, "error.html", user, status_code=400, message="; ".join(errors))


@router.get("/chain", response_class=HTMLResponse, include_in_schema=False)
def chain(request: Request, user: UserDep, services: ServicesDep) -> HTMLResponse:
    allow(user, services.database, request, *READERS)
    return render(request, "chain.html", user, report=None, witness=bool(services.settings.chain_witness), errors=[],
                  status=chain_status(services.database))


@router.post("/chain/verify", response_class=HTMLResponse, include_in_schema=False)
def verify_now(request: Request, user: UserDep, form: FormDep, services: ServicesDep) -> HTMLResponse:
    reader = allow(user, services.database, request, *READERS)
    settings = services.settings
    use_witness = form.get("witness") == "on" and bool(settings.chain_witness)
    errors: list[str] = []
    report = None
    try:
        full = reads.verify(services.database, reader, hmac_key=settings.hmac_key.get_secret_value().encode(),
                            witness=open_witness(settings.chain_witness) if use_witness else None,
                            mode="incremental" if form.get("mode") == "incremental" else "full")
        report = reads.scoped_report(services.database, reader, full)
    except WitnessError as exc:
        errors.append(f"the chain witness is unavailable: {exc}")
    return render(request, "chain.html", user, report=report, witness=bool(settings.chain_witness), errors=errors,
                  mode=form.get("mode") or "full", used_witness=use_witness, status=chain_status(services.database))


def _bundle_params(params: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in params.items() if k in BundleFilters.model_fields}


def _query(params: dict[str, Any]) -> str:
    return urlencode({k: v for k, v in params.items() if v not in (None, "")})
