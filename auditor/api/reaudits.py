"""Re-audit jobs over HTTP: create, watch (progress, summary), cancel, resume. Auditors and admins only.

Jobs run on Celery workers when `AUDITOR_REDIS_URL` is set, else on the in-process pool that the app
keeps in `app.state.task_queue`. Creating a job never waits for a worker: with workers or the broker
down, the job is committed and its chunks are sent when they come back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from auditor.api.deps import get_services
from auditor.api.errors import ApiError
from auditor.auth.principal import Principal, authenticate, require_role
from auditor.jobs import reaudit, scoring
from auditor.jobs.settings import WorkerSettings
from auditor.jobs.task_queue import TaskQueue
from auditor.trail import records as audit_log

router = APIRouter(prefix="/v1/reaudits", tags=["re-audit"])


class ReauditCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    filter: reaudit.ReauditFilter | None = None
    import_id: str | None = Field(default=None, max_length=36)
    chunk_size: int = Field(default=reaudit.DEFAULT_CHUNK_SIZE, ge=1, le=10_000)


class ReauditProgress(BaseModel):
    total: int
    done: int
    failed: int
    pending: int
    rate_per_s: float
    eta_s: float | None


class ReauditOut(BaseModel):
    id: str
    object: str = "reaudit"
    status: str
    source: str
    filter: dict[str, Any] | None
    import_id: str | None
    evaluator_version: str
    created_at: datetime
    started_at: datetime
    cancelled_at: datetime | None
    finished_at: datetime | None
    progress: ReauditProgress
    summary: dict[str, Any] | None


def _reader(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
    return require_role(principal, "auditor", "admin")


Reader = Annotated[Principal, Depends(_reader)]


@router.post("", status_code=202, response_model=ReauditOut)
def create_reaudit(request: Request, body: Annotated[dict[str, Any], Body()],
                   principal: Reader) -> ReauditOut:
    spec = _parse(body)
    if spec.filter is not None and spec.filter.tenant not in (None, principal.tenant) and principal.role != "admin":
        raise ApiError(403, "only admins may re-audit other tenants' records", code="insufficient_role",
                       param="filter.tenant")
    services = get_services(request)
    version = _evaluator_version()
    try:
        job_id = reaudit.create_job(services.database, tenant=principal.tenant, tenant_scope=principal.tenant_scope,
                                    evaluator_version=version, filters=spec.filter, import_id=spec.import_id,
                                    chunk_size=spec.chunk_size)
    except reaudit.ReauditNotFound as exc:
        raise ApiError(404, str(exc), code="import_not_found", param="import_id") from exc
    except reaudit.ReauditError as exc:
        raise ApiError(400, str(exc), code="invalid_reaudit") from exc
    reaudit.start_job(services.database, task_queue(request), job_id)
    return _job_out(request, job_id, principal, action="reaudit_create")


@router.get("/{job_id}", response_model=ReauditOut)
def get_reaudit(job_id: str, request: Request, principal: Reader) -> ReauditOut:
    return _job_out(request, job_id, principal)


@router.post("/{job_id}/cancel", response_model=ReauditOut)
def cancel_reaudit(job_id: str, request: Request, principal: Reader) -> ReauditOut:
    with _job_errors():
        reaudit.cancel_job(get_services(request).database, job_id, tenant_scope=principal.tenant_scope)
    return _job_out(request, job_id, principal, action="reaudit_cancel")


@router.post("/{job_id}/resume", response_model=ReauditOut)
def resume_reaudit(job_id: str, request: Request, principal: Reader) -> ReauditOut:
    with _job_errors():
        reaudit.resume_job(get_services(request).database, task_queue(request), job_id,
                           tenant_scope=principal.tenant_scope)
    return _job_out(request, job_id, principal, action="reaudit_resume")


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


def _job_out(request: Request, job_id: str, principal: Principal, *, action: str | None = None) -> ReauditOut:
    """The job with its progress. Changes and reads of a finished job's summary (it quotes records' claims)
    go to the access log; polls of a running job do not, so watching a job cannot flood the log."""
    database = get_services(request).database
    with database.session() as session, _job_errors():
        job = reaudit.get_job(session, job_id, tenant_scope=principal.tenant_scope)
        out = ReauditOut(
            id=job.id, status=job.status, source=job.source, filter=job.filters, import_id=job.import_id,
            evaluator_version=job.evaluator_version, created_at=job.created_at, started_at=job.started_at,
            cancelled_at=job.cancelled_at, finished_at=job.finished_at,
            progress=ReauditProgress(**reaudit.progress_of(session, job)), summary=job.summary,
        )
    if action is not None or out.summary is not None:
        # A write transaction of its own: on SQLite, upgrading the read above to a writer could hit
        # SQLITE_BUSY while workers commit evaluations.
        with database.session(write=True) as session:
            audit_log.log_access(session, key_id=principal.key_id, tenant=principal.tenant, role=principal.role,
                                 action=action or "reaudit_show", target=out.id, filters=out.filter,
                                 result_count=out.progress.total)
    return out


def _evaluator_version() -> str:
    try:
        return scoring.evaluator_version(WorkerSettings().evaluator)
    except scoring.EvaluatorUnavailable as exc:
        raise ApiError(503, f"re-audits are unavailable: {exc}", code="evaluator_unavailable") from exc


def task_queue(request: Request) -> TaskQueue:
    """The app's queue: `app.state.task_queue` if the lifespan set one, else Celery or a lazily started pool."""
    state = request.app.state
    queue = getattr(state, "task_queue", None)
    if queue is None:
        services = get_services(request)
        if services.settings.redis_url:
            queue = _celery_queue(services.settings.redis_url)
        else:
            from auditor.jobs.inprocess import InProcessTaskQueue

            spec = WorkerSettings().evaluator
            queue = InProcessTaskQueue(services.database, lambda: scoring.load_evaluator(spec))
        state.task_queue = queue
    return queue


@lru_cache(maxsize=4)
def _celery_queue(redis_url: str) -> TaskQueue:
    from celery import Celery

    from auditor.jobs.worker import CeleryTaskQueue, configure

    return CeleryTaskQueue(configure(Celery("auditor-api"), redis_url=redis_url, settings=WorkerSettings()))
