"""/health (200 once ready), /ready (ready and the audit store reachable), /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from auditor.api.deps import ServicesDep, authenticate
from auditor.api.errors import ApiError

router = APIRouter(tags=["operations"])


@router.get("/health")
def health(request: Request) -> JSONResponse:
    services = getattr(request.app.state, "services", None)
    ready = services is not None and services.ready
    body: dict[str, object] = {"status": "ok" if ready else "starting"}
    kv_cache = getattr(services.engine, "kv_cache_settings", None) if ready else None
    if kv_cache is not None:   # outputs depend on the KV cache's precision: say which one serves them
        body["kv_cache"] = kv_cache
    allocator = getattr(services.engine, "allocator", None) if ready else None
    if allocator is not None:   # the engine core's malloc (an operator reading its memory needs to know which)
        body["engine_allocator"] = allocator
    cpus = getattr(services.engine, "core_cpus", None) if ready else None
    if cpus is not None:   # the CPUs the engine core runs on (`engine.affinity`): what its speed depends on
        body["engine_cpus"] = cpus
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/ready")
def ready(services: ServicesDep) -> JSONResponse:
    try:
        with services.database.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        store = "ok"
    except SQLAlchemyError as exc:
        store = f"unavailable ({exc.__class__.__name__})"
    engine = "ok" if getattr(services.engine, "available", True) else "restarting"
    ok = services.ready and store == "ok" and engine == "ok"
    model = services.engine.model_id if services.engine is not None else None
    # warm: everything loaded after ready (deferred imports, validator registries) is in; until then a request
    # that needs one of them waits for it, and is served the same
    return JSONResponse({"ready": ok, "warm": services.warm, "audit_store": store, "engine": engine, "model": model},
                        status_code=200 if ok else 503)


@router.get("/metrics")
def metrics(request: Request, services: ServicesDep) -> Response:
    """Prometheus text. `AUDITOR_METRICS_ACCESS`: "key" (the default), "open", or "off" (served only by the
    separate listener on `AUDITOR_METRICS_HOST:AUDITOR_METRICS_PORT`). With "key", a `metrics` key (a Prometheus
    scraper's) and an admin key read every series; a tenant's auditor key reads the series of its own tenant
    among those labelled by tenant (usage, cost), and every series that has no tenant label."""
    access = services.settings.metrics_access
    if access == "off":
        raise ApiError(404, "metrics are served on the separate metrics listener", code="not_found")
    tenant = None
    if access == "key":
        principal = authenticate(request, services)
        if principal.role not in ("auditor", "admin", "metrics"):
            raise ApiError(403, f"role {principal.role!r} may not read metrics (needs metrics, auditor or admin)",
                           code="insufficient_role")
        tenant = principal.tenant if principal.role == "auditor" else None
    return Response(services.metrics.render(tenant=tenant), media_type=CONTENT_TYPE_LATEST)
