"""`create_app(settings=None, *, engine=None, ...)`: the FastAPI app. The lifespan opens the audit store
(migrating it when `auto_migrate`), loads the engine, KGs and rule packs once, then marks the app ready."""

from __future__ import annotations

import gc
import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from auditor.api import audits, chat, completions, health, models, reaudits
from auditor.api.deps import Services
from auditor.api.errors import audit_store_unavailable, error_response, install_error_handlers
from auditor.api.limits import BodySizeLimit
from auditor.auth.keys import any_active_key
from auditor.gate.gate import NoClaimVerifier, Verifier
from auditor.jobs import scoring
from auditor.jobs.inprocess import EmbeddedWorker
from auditor.jobs.settings import WorkerSettings
from auditor.jobs.task_queue import TaskQueue, celery_queue
from auditor.serving.inference import AuditUnavailable, BadRequest, InferenceService
from auditor.serving.knowledge import Knowledge, NoKnowledge
from auditor.serving.metrics import ServiceMetrics
from auditor.settings import Settings, get_settings
from auditor.store.database import Database

logger = logging.getLogger("auditor")


def _load_runtime(settings: Settings) -> tuple[Any, Verifier, Knowledge]:
    """Engine, validators and KGs for production. Imported here: they pull in torch, xgrammar and the KGs."""
    from auditor.serving import runtime

    kgs = runtime.load_kgs(settings.domains)
    engine = runtime.load_engine(settings.resolved_model_path(), kgs)
    verifier = runtime.RulesVerifier(kgs)
    verifier.warm_up()
    # The KGs, tries, walk records and rule packs live as long as the process: take them out of the
    # cyclic GC's view, or each full collection (set off by allocations mid-decode) rescans them all.
    gc.freeze()
    return engine, verifier, runtime.KgKnowledge(kgs)


def create_app(settings: Settings | None = None, *, engine: Any = None, verifier: Verifier | None = None,
               knowledge: Knowledge | None = None) -> FastAPI:
    settings = settings or get_settings()
    metrics = ServiceMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        database = Database(settings.database_url, sqlite_synchronous=settings.sqlite_synchronous)
        if settings.auto_migrate:
            await anyio.to_thread.run_sync(database.upgrade)
        loaded_engine, loaded_verifier, loaded_knowledge = engine, verifier, knowledge
        if engine is None:
            loaded_engine, loaded_verifier, loaded_knowledge = await anyio.to_thread.run_sync(_load_runtime, settings)
            await loaded_engine.start()
        metrics.watch_engine(loaded_engine.stats)
        inference = InferenceService(engine=loaded_engine, database=database, settings=settings, metrics=metrics,
                                     verifier=loaded_verifier or NoClaimVerifier(),
                                     knowledge=loaded_knowledge or NoKnowledge())
        # Embedded default: no broker, so scoring and re-audits run on an in-process pool fed by the outbox.
        embedded: EmbeddedWorker | None = None
        if settings.redis_url is None:
            spec = WorkerSettings().evaluator
            embedded = EmbeddedWorker(database, lambda: scoring.load_evaluator(spec)).start()
            task_queue: TaskQueue = embedded.queue
        else:
            task_queue = celery_queue(settings.redis_url)
        app.state.services = Services(settings, database, loaded_engine, inference, metrics, task_queue)
        with database.session() as session:
            if not any_active_key(session):
                logger.warning("development mode: no API keys configured, requests are not authenticated; "
                               "serve on 127.0.0.1 only (create keys with `auditor keys create`)")
        app.state.services.ready = True
        try:
            yield
        finally:
            app.state.services.ready = False
            if embedded is not None:
                embedded.stop()
            shutdown = getattr(loaded_engine, "shutdown", None)
            if engine is None and callable(shutdown):
                await shutdown() if inspect.iscoroutinefunction(shutdown) else shutdown()
            database.dispose()

    app = FastAPI(title="Hallucination auditor", version="0.1.0", lifespan=lifespan,
                  description="OpenAI-compatible inference with audit IDs, a safety gate and a tamper-evident audit log")
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    install_error_handlers(app)

    @app.exception_handler(AuditUnavailable)
    async def _audit_unavailable(_request: Request, _exc: AuditUnavailable) -> JSONResponse:
        error = audit_store_unavailable()
        return error_response(error.status_code, error.message, error.code)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        # Still a bug when it happens, but the client gets the OpenAI shape and the log gets the traceback.
        logger.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal error; the request was recorded if it reached the model", "internal_error")

    @app.exception_handler(BadRequest)
    async def _bad_request(_request: Request, exc: BadRequest) -> JSONResponse:
        return error_response(400, str(exc), exc.code, exc.param)

    for router in (chat.router, completions.router, models.router, audits.router, reaudits.router, health.router):
        app.include_router(router)
    return app
