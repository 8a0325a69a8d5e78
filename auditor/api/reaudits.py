"""Re-audit jobs over HTTP: create, list, watch (progress, summary), cancel, resume. Auditors and admins only.

Jobs run on Celery workers when `AUDITOR_REDIS_URL` is set, else on the in-process pool the app keeps
(`Services.task_queue`). Creating a job never waits for a worker and never collects record ids: the
response names the rule packs the job pins, and its records are frozen in the background.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query
from pydantic import ValidationError

from auditor.api.deps import ReaderDep, Services, ServicesDep
from auditor.api.errors import ApiError
from auditor.api.schemas import ReauditCreate, ReauditList, ReauditOut
from auditor.auth.principal import Principal
from auditor.jobs import reaudit, scoring
from auditor.jobs.settings import WorkerSettings
from auditor.packs.source import pins_now
from auditor.trail.access_log import log_denied

router = APIRouter(prefix="/v1/reaudits", tags=["re-audit"])


@router.post("", status_code=202, response_model=ReauditOut)
def create_reaudit(body: Annotated[dict[str, Any], Body()], services: ServicesDep, reader: ReaderDep) -> ReauditOut:
    spec = _parse(body)
    if spec.filter is not None and spec.filter.tenant not in (None, reader.tenant) and reader.role != "admin":
        reason = "only admins may re-audit other tenants' records"
        log_denied(services.database, reader, target=f"reaudit_create:tenant={spec.filter.tenant}", reason=reason)
        raise ApiError(403, reason, code="insufficient_role", param="filter.tenant")
    spec_name = WorkerSettings().evaluator
    try:
        job_id = reaudit.create_job(services.database, tenant=reader.tenant, tenant_scope=reader.tenant_scope,
                                    evaluator_version=_evaluator_version(), filters=spec.filter,
                                    import_id=spec.import_id, chunk_size=spec.chunk_size,
                                    rule_packs=pins_now(services.packs, spec_name))
    except reaudit.ReauditNotFound as exc:
        raise ApiError(404, str(exc), code="import_not_found", param="import_id") from exc
    except reaudit.ReauditError as exc:
        raise ApiError(400, str(exc), code="invalid_reaudit") from exc
    reaudit.start_job(services.database, services.task_queue, job_id)
    return _job_out(services, job_id, reader, action="reaudit_create")


@router.get("", response_model=ReauditList)
def list_reaudits(services: ServicesDep, reader: ReaderDep,
                  status: Annotated[Literal["running", "cancelled", "done"] | None, Query()] = None,
                  limit: Annotated[int, Query(ge=1, le=100)] = 20,
                  cursor: Annotated[str | None, Query(max_length=36, description="next_cursor of the last page")] = None,
                  ) -> ReauditList:
    with _job_errors():
        jobs, next_cursor = reaudit.list_jobs(services.database, reader, status=status, limit=limit, before=cursor)
    return ReauditList(data=[ReauditOut.model_validate(job) for job in jobs], next_cursor=next_cursor)


@router.get("/{job_id}", response_model=ReauditOut)
def get_reaudit(job_id: str, services: ServicesDep, reader: ReaderDep) -> ReauditOut:
    return _job_out(services, job_id, reader)


@router.post("/{job_id}/cancel", response_model=ReauditOut)
def cancel_reaudit(job_id: str, services: ServicesDep, reader: ReaderDep) -> ReauditOut:
    with _job_errors():
        reaudit.cancel_job(services.database, job_id, tenant_scope=reader.tenant_scope)
    return _job_out(services, job_id, reader, action="reaudit_cancel")


@router.post("/{job_id}/resume", response_model=ReauditOut)
def resume_reaudit(job_id: str, services: ServicesDep, reader: ReaderDep) -> ReauditOut:
    with _job_errors():
        reaudit.resume_job(services.database, services.task_queue, job_id, tenant_scope=reader.tenant_scope)
    return _job_out(services, job_id, reader, action="reaudit_resume")


def _parse(body: dict[str, Any]) -> ReauditCreate:
    """422 in the OpenAI error shape, naming the offending field (e.g. an unknown filter field)."""
    try:
        spec = ReauditCreate.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"])
        if first["type"] == "extra_forbidden":
            known = ", ".join(reaudit.ReauditFilter.model_fields) if param.startswith("filter.") else \
                ", ".join(ReauditCreate.model_fields)
            raise ApiError(422, f"unknown field {param!r} (known: {known})", code="unknown_field",
                           param=param) from None
        raise ApiError(422, f"{param or 'body'}: {first['msg']}", code="invalid_parameter", param=param or None) from None
    if (spec.filter is None) == (spec.import_id is None):
        raise ApiError(422, "give exactly one of 'filter' (stored records) or 'import_id' (an imported JSONL)",
                       code="invalid_parameter", param="filter")
    return spec


@contextmanager
def _job_errors() -> Iterator[None]:
    try:
        yield
    except reaudit.ReauditNotFound as exc:
        raise ApiError(404, str(exc), code="reaudit_not_found") from exc
    except reaudit.ReauditConflict as exc:
        raise ApiError(409, str(exc), code="reaudit_finished") from exc


def _job_out(services: Services, job_id: str, reader: Principal, *, action: str | None = None) -> ReauditOut:
    with _job_errors():
        return ReauditOut.model_validate(reaudit.job_view(services.database, reader, job_id, action=action))


def _evaluator_version() -> str:
    try:
        return scoring.evaluator_version(WorkerSettings().evaluator)
    except scoring.EvaluatorUnavailable as exc:
        raise ApiError(503, f"re-audits are unavailable: {exc}", code="evaluator_unavailable") from exc
