"""FastAPI dependencies: what the lifespan built once (the services), the database, and the caller.

Routers declare what they need (`ServicesDep`, `DatabaseDep`, `ClientDep`, `ReaderDep`, ...) and get it
injected; tests build apps with their own Settings and fakes through the same objects."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from auditor.api.errors import ApiError
from auditor.auth.principal import AuthenticationError, AuthGuard, Principal, RoleNotAllowed, require_role
from auditor.jobs.task_queue import TaskQueue
from auditor.kg.live import LiveKnowledgeGraphs
from auditor.logs import bind
from auditor.packs.source import StorePacks
from auditor.serving.embeddings import EmbeddingService
from auditor.serving.inference import InferenceService
from auditor.serving.metrics import ServiceMetrics
from auditor.serving.registry import ModelRegistry
from auditor.settings import Settings
from auditor.store.database import Database
from auditor.trail.access_log import log_denied


@dataclass(slots=True)
class Services:
    settings: Settings
    database: Database
    engine: Any
    inference: InferenceService
    metrics: ServiceMetrics
    task_queue: TaskQueue
    auth: AuthGuard
    packs: StorePacks | None = None
    ready: bool = False
    embeddings: EmbeddingService | None = None
    models: ModelRegistry | None = None     # served model ids -> the local engine or an upstream
    kg: LiveKnowledgeGraphs | None = None   # the KG versions this process serves, following the store
    warming: threading.Thread | None = None  # loads what ready did not wait for; warm once it has ended
    scoring_worker: Any = None               # the embedded worker (its `alive` read by /ready); None with Celery

    @property
    def warm(self) -> bool:
        return self.ready and (self.warming is None or not self.warming.is_alive())


# async: FastAPI runs a plain `def` dependency on a worker thread, and a thread hop costs milliseconds of
# latency under load for what is an attribute read
async def get_services(request: Request) -> Services:
    return request.app.state.services


async def get_settings_dep(services: Annotated[Services, Depends(get_services)]) -> Settings:
    return services.settings


async def get_database(services: Annotated[Services, Depends(get_services)]) -> Database:
    return services.database


ServicesDep = Annotated[Services, Depends(get_services)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
DatabaseDep = Annotated[Database, Depends(get_database)]


def authenticate(request: Request, services: ServicesDep) -> Principal:
    """The caller, or 401. Runs in a worker thread (it queries the database)."""
    with services.database.session() as session:
        try:
            principal = services.auth.principal_for(session, _bearer_token(request.headers.get("authorization")))
        except AuthenticationError as exc:
            raise ApiError(401, str(exc), code=exc.code) from exc
    bind(tenant=principal.tenant)   # every line of this request names the tenant (auditor.logs)
    return principal


def _bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


CallerDep = Annotated[Principal, Depends(authenticate)]


def _role(*roles: str, trail_read: bool = False) -> Any:
    # async: the check itself is a set lookup, not worth a worker-thread hop on every request; only the
    # refusal's access-log write goes to a thread
    async def check(principal: CallerDep, request: Request, services: ServicesDep) -> Principal:
        try:
            return require_role(principal, *roles)
        except RoleNotAllowed as exc:
            if trail_read:   # a refused read of the trail is itself part of who-tried-to-read-what
                await run_in_threadpool(log_denied, services.database, principal, target=request.url.path,
                                        reason=str(exc))
            raise ApiError(403, str(exc), code="insufficient_role") from exc
    return Depends(check)


ClientDep = Annotated[Principal, _role("client", "admin")]        # may run inference
ReaderDep = Annotated[Principal, _role("auditor", "admin", trail_read=True)]   # may read the trail, run re-audits
ReviewerDep = Annotated[Principal, _role("reviewer", "auditor", "admin", trail_read=True)]   # review queue, records
AdminDep = Annotated[Principal, _role("admin", trail_read=True)]
