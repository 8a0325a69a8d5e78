"""/health (200 once ready), /ready (503 unless the store and engine answer; "degraded" with reasons when scoring,
Redis or an upstream lags: `auditor.serving.readiness`), /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from auditor.api.deps import ServicesDep, authenticate
from auditor.api.errors import ApiError
from auditor.serving.readiness import assess

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
    """503 when this instance cannot answer (not started, audit store or engine down); 200 otherwise, with
    `status` "ok", or "degraded" and its `reasons` when scoring lags or Redis or an upstream fails
    (`auditor.serving.readiness`). `warm`: everything loaded after ready (deferred imports, validator
    registries) is in; until then a request that needs one of them waits for it, and is served the same."""
    readiness = assess(services)
    return JSONResponse(readiness.body, status_code=readiness.status_code)


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
