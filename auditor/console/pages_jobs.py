"""Console pages for re-audit jobs (start from a filter or an import, watch progress, read the before/after
summary) and the trends chart. Jobs are created through the API's own route function, so the console and
the API validate, pin rule packs, log and enqueue in one place."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from auditor.api import reaudits as reaudits_api
from auditor.api.deps import ServicesDep
from auditor.console.auth import FormDep, UserDep, allow
from auditor.console.chart import trend_chart
from auditor.console.rendering import model_from, problems_shown, render
from auditor.jobs import reaudit
from auditor.trail import trends

router = APIRouter(prefix="/console")
READERS = ("auditor", "admin")
TREND_METRICS = {"fer": "Factual error rate (contradicted / verified claims)",
                 "contradicted_rate": "Share of answers with a contradicted claim",
                 "block_rate": "Share of answers blocked or refused", "records": "Answers audited"}


@router.get("/reaudits", response_class=HTMLResponse, include_in_schema=False)
def jobs(request: Request, user: UserDep, services: ServicesDep) -> HTMLResponse:
    reader = allow(user, services.database, request, *READERS)
    return _jobs_page(request, user, services, reader, errors=[], form={})


def _jobs_page(request: Request, user: Any, services: Any, reader: Any, *, errors: list[str],
               form: dict[str, str], status_code: int = 200) -> HTMLResponse:
    rows: list[Any] = []
    with problems_shown(errors):
        rows, _ = reaudit.list_jobs(services.database, reader, limit=50)
    return render(request, "reaudits.html", user, jobs=rows, errors=errors, form=form, status_code=status_code)


@router.post("/reaudits", include_in_schema=False)
def start_job(request: Request, user: UserDep, form: FormDep, services: ServicesDep) -> Response:
    reader = allow(user, services.database, request, *READERS)
    errors: list[str] = []
    import_id = form.pop("import_id", "").strip()
    criteria = {name: value for name, value in form.items() if value and name in reaudit.ReauditFilter.model_fields}
    body: dict[str, Any] = {"import_id": import_id} if import_id else {"filter": criteria}
    with problems_shown(errors):
        job = reaudits_api.create_reaudit(body, services, reader)
        return RedirectResponse(f"/console/reaudits/{job.id}", status_code=303)
    return _jobs_page(request, user, services, reader, errors=errors, form=form, status_code=400)


@router.get("/reaudits/{job_id}", response_class=HTMLResponse, include_in_schema=False)
def job(job_id: str, request: Request, user: UserDep, services: ServicesDep) -> HTMLResponse:
    return _job_view(job_id, request, user, services, "reaudit.html")


@router.get("/reaudits/{job_id}/progress", response_class=HTMLResponse, include_in_schema=False)
def job_progress(job_id: str, request: Request, user: UserDep, services: ServicesDep) -> HTMLResponse:
    """The progress fragment console.js polls while a job runs (a poll is not logged; see `job_view`)."""
    return _job_view(job_id, request, user, services, "_progress.html")


def _job_view(job_id: str, request: Request, user: Any, services: Any, template: str) -> HTMLResponse:
    reader = allow(user, services.database, request, *READERS)
    try:
        view = reaudit.job_view(services.database, reader, job_id[:64])
    except reaudit.ReauditNotFound as exc:
        return render(request, "error.html", user, status_code=404, message=str(exc))
    return render(request, template, user, job=view)


@router.get("/trends", response_class=HTMLResponse, include_in_schema=False)
def trend_page(request: Request, user: UserDep, services: ServicesDep) -> HTMLResponse:
    reader = allow(user, services.database, request, *READERS)
    params = dict(request.query_params)
    metric = params.pop("metric", "fer")
    metric = metric if metric in TREND_METRICS else "fer"
    errors: list[str] = []
    result = None
    with problems_shown(errors):
        query = model_from(trends.TrendQuery, params)
        result = trends.read_trends(services.database, reader, query)
    chart = trend_chart(result, metric) if result else None
    return render(request, "trends.html", user, params=params, metric=metric, metrics=TREND_METRICS,
                  result=result, chart=chart, errors=errors)
