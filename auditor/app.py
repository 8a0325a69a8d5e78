"""`create_app(settings=None, *, engine=None, ...)`: the FastAPI app. The lifespan opens the audit store
(migrating it when `auto_migrate`), loads the engine, KGs and rule packs once, then marks the app ready."""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import logging
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from prometheus_client import start_http_server

from auditor.alerts.engine import AlertSchedule
from auditor.api import (
    access_log,
    alerts,
    audits,
    chat,
    completions,
    embeddings,
    health,
    holds,
    imports,
    keys,
    kg,
    models,
    reaudits,
    reviews,
    rules,
    trends,
    usage,
)
from auditor.api.deps import Services
from auditor.api.errors import (
    ENGINE_RETRY_AFTER,
    audit_store_unavailable,
    count_error,
    engine_unavailable,
    error_response,
    install_error_handlers,
)
from auditor.api.json_numbers import refuse_non_finite_numbers
from auditor.api.limits import BodySizeLimit
from auditor.api.request_log import RequestLog
from auditor.auth.keys import keys_ever_created
from auditor.auth.principal import AuthGuard
from auditor.console.mount import install_console
from auditor.gate.gate import NoClaimVerifier, Verifier
from auditor.gate.injection import assess_injection
from auditor.gate.pii import min_phone_digits
from auditor.jobs import scoring
from auditor.jobs.domains import install_detector
from auditor.jobs.inprocess import EmbeddedWorker
from auditor.jobs.metrics import ScoringGauges
from auditor.jobs.settings import WorkerSettings
from auditor.jobs.task_queue import TaskQueue, celery_queue
from auditor.kg.live import LiveKnowledgeGraphs
from auditor.packs.source import StorePacks, store_packs
from auditor.serving.deferred_imports import start_loading_deferred
from auditor.serving.embeddings import EmbeddingService
from auditor.serving.engine_loading import start_engine_core
from auditor.serving.inference import AuditUnavailable, BadRequest, EngineUnavailable, InferenceService
from auditor.serving.knowledge import Knowledge, NoKnowledge
from auditor.serving.metrics import ServiceMetrics
from auditor.serving.on_demand import OnDemand
from auditor.serving.registry import ModelRegistry, build_registry, read_entries
from auditor.serving.traffic import LiveTraffic
from auditor.serving.upstream import UpstreamError
from auditor.settings import Settings, get_settings
from auditor.store.database import Database
from auditor.trail.metrics import CurrentVerdictCollector
from auditor.trail.witness import WitnessPublisher, open_witness
from engine.config import EngineConfig
from engine.memory import malloc_trim

logger = logging.getLogger("auditor")


def _load_runtime(settings: Settings, packs: StorePacks, engine_core: Any = None) -> tuple[Any, Verifier, Knowledge, Any]:
    """Engine, validators, KGs and the domain detector for production. Imported here: they pull in the rule
    packs, the KGs and MiniLM (and, with the engine in this process, torch and xgrammar).

    engine_core: the engine core, launched already (its process loads the model and the KG constraint while
    this one loads the KGs, validators and detector); None: the engine runs in this process, or there is none
    (`AUDITOR_LOCAL_ENGINE=false`: a replica that only forwards to upstreams). Both sides read what they build
    from snapshots on disk (`AUDITOR_INDEX_CACHE_DIR`)."""
    from auditor.serving import runtime

    started = time.perf_counter()
    engine = engine_core
    kgs = runtime.load_kgs(settings.domains, snapshot_dir=settings.index_cache_dir)
    loaded_kgs = time.perf_counter()
    if engine is None and settings.local_engine:   # AUDITOR_ENGINE_PROCESS=false: the step loop on a thread here
        engine = runtime.load_engine(settings.resolved_model_path(), kgs, **runtime.engine_options(settings))
    verifier = runtime.RulesVerifier(kgs, packs)
    verifier.warm_up()
    knowledge = runtime.KgKnowledge(kgs)
    knowledge.warm_up()
    assess_injection("")   # builds the injection gate's TR39 fold tables (~0.3 s) before a request waits on them
    loaded_rules = time.perf_counter()
    # Only requests that name no domain need the detector: it loads after ready (`start_loading_deferred`'s
    # first step), and such a request that comes sooner waits for that load (auditor.serving.on_demand).
    detector = OnDemand(functools.partial(runtime.load_detector, kgs, threshold=settings.domain_detection_threshold,
                                          embedding_cache=settings.domain_detection_embedding_cache,
                                          embedding_dtype=settings.embedding_dtype))
    # The KGs, tries, walk records and rule packs live as long as the process: take them out of the
    # cyclic GC's view, or each full collection (set off by allocations mid-decode) rescans them all.
    gc.freeze()
    logger.info("KGs loaded in %.1f s, validators and linkers warmed in %.1f s (the domain detector loads after ready)",
                loaded_kgs - started, loaded_rules - loaded_kgs)
    return engine, verifier, knowledge, detector


def _start_task_queue(settings: Settings, database: Database, stack: AsyncExitStack, packs: StorePacks,
                      traffic: LiveTraffic) -> tuple[TaskQueue, EmbeddedWorker | None]:
    """Embedded default: no broker, so scoring and re-audits run on an in-process pool fed by the outbox."""
    if settings.redis_url is not None:
        return celery_queue(settings.redis_url), None
    worker_settings = WorkerSettings()
    spec = worker_settings.evaluator
    embedded = EmbeddedWorker(database, lambda: scoring.load_evaluator(spec, packs=packs),
                              redeliver_after_s=worker_settings.redeliver_after_s,
                              chunk_stall_after_s=worker_settings.chunk_stall_after_s,
                              stream_recovery_after_s=worker_settings.stream_recovery_after_s,
                              alerts=AlertSchedule.from_settings(settings), packs=packs,
                              busy=traffic.busy, max_lag_s=worker_settings.embedded_max_lag_s,
                              busy_share=worker_settings.embedded_busy_share,
                              heartbeat_interval_s=worker_settings.heartbeat_interval_s).start()
    stack.callback(embedded.stop)
    return embedded.queue, embedded


async def _trim_memory_periodically(interval_s: float) -> None:
    """Per-request allocations (validators, SQL, JSON) fragment the heap: hand freed pages back now and then,
    or RSS only ever grows under sustained load."""
    while True:
        await anyio.sleep(interval_s)
        await anyio.to_thread.run_sync(malloc_trim)


async def _open_model_registry(settings: Settings, engine: Any, stack: AsyncExitStack,
                               metrics: ServiceMetrics) -> ModelRegistry:
    """Routes for the local engine and the configured upstreams, whose pooled clients close with the app."""
    entries = read_entries(settings.models_file, settings.models)
    models = build_registry(engine=engine, entries=entries, domains=settings.domains)
    for upstream in models.upstreams():
        await upstream.start()
        stack.push_async_callback(upstream.aclose)
        upstream.health.listeners.append(functools.partial(metrics.observe_upstream, upstream.model_id))
    return models


def _follow_kg_versions(settings: Settings, database: Database, engine: Any, verifier: Any,
                       knowledge: Any) -> LiveKnowledgeGraphs:
    """Serve the store's current KG versions (imports, rollbacks) from start-up on, and follow them."""
    from auditor.serving.runtime import kg_listeners
    from knowledge_graphs import packaged_kg

    started_with = dict(getattr(knowledge, "kgs", None) or {})   # overlays go on the KGs this process loaded
    live = LiveKnowledgeGraphs(database, settings.domains, refresh_s=settings.kg_refresh_s,
                               listeners=kg_listeners(engine, verifier, knowledge),
                               packaged=lambda domain: started_with.get(domain) or packaged_kg(domain))
    live.refresh()
    return live.start()


async def _shutdown_engine(engine: Any) -> None:
    shutdown = getattr(engine, "shutdown", None)
    if callable(shutdown):
        await shutdown() if inspect.iscoroutinefunction(shutdown) else shutdown()


def _warn_about_authentication(database: Database, auth: AuthGuard, host: str) -> None:
    with database.session() as session:
        if keys_ever_created(session):
            return
    if auth.development_allowed:
        logger.warning("development mode: no API key has been created, requests are not authenticated "
                       "(bound to %s; create keys with `auditor keys create`)", host)
    else:
        logger.error("no API key has been created: every request gets 401 until one is "
                     "(`auditor keys create --tenant T --role admin`)")


def create_app(settings: Settings | None = None, *, engine: Any = None, verifier: Verifier | None = None,
               knowledge: Knowledge | None = None, detector: Any = None, engine_core: Any = None) -> FastAPI:
    """`engine`, `verifier`, `knowledge`, `detector`: injected parts (tests; an engine passed in is started, not
    shut down); with no engine, all four load in the lifespan. engine_core: an engine-core client launched
    already, which the lifespan waits for, uses and shuts down."""
    settings = settings or get_settings()
    metrics = ServiceMetrics(intents=settings.metrics_intents if settings.metrics_intents is not None
                             else EngineConfig().intent_priorities, max_tenants=settings.metrics_max_tenants,
                             max_models=settings.metrics_max_models)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Every resource registers its cleanup as soon as it exists, so a startup that fails half-way
        # (a model that will not load, a store that will not migrate) leaks no thread, pool or engine.
        async with AsyncExitStack() as stack:
            began = time.perf_counter()
            core = engine_core
            if engine is None and core is None:   # first: the core loads while this process does the rest
                core = await anyio.to_thread.run_sync(start_engine_core, settings)
            if core is not None:   # ours from here on, even if loading the rest fails
                stack.push_async_callback(_shutdown_engine, core)
            database = Database.from_settings(settings)
            stack.callback(database.dispose)
            if settings.auto_migrate:
                await anyio.to_thread.run_sync(
                    functools.partial(database.upgrade, hmac_key=settings.hmac_key.get_secret_value().encode()))
            packs = store_packs(database, settings)
            store_ready = time.perf_counter()
            loaded_engine, loaded_verifier, loaded_knowledge, loaded_detector = engine, verifier, knowledge, detector
            if engine is None:
                loaded_engine, loaded_verifier, loaded_knowledge, loaded_detector = await anyio.to_thread.run_sync(
                    _load_runtime, settings, packs, core)
                if loaded_engine is not None and loaded_engine is not core:
                    stack.push_async_callback(_shutdown_engine, loaded_engine)
            runtime_ready = time.perf_counter()
            if callable(getattr(loaded_engine, "start", None)):   # an engine passed in is started, not shut down
                await loaded_engine.start()
            engine_ready = time.perf_counter()
            if loaded_detector is not None:   # the embedded worker scores with the same detector
                install_detector(loaded_detector)
            if loaded_engine is not None:
                metrics.watch_engine(loaded_engine.stats)
            verdict_gauges = CurrentVerdictCollector(database)
            metrics.registry.register(verdict_gauges)
            stack.callback(metrics.registry.unregister, verdict_gauges)
            scoring_gauges = ScoringGauges(database)
            metrics.registry.register(scoring_gauges)
            stack.callback(metrics.registry.unregister, scoring_gauges)
            models = await _open_model_registry(settings, loaded_engine, stack, metrics)
            live_kgs = await anyio.to_thread.run_sync(_follow_kg_versions, settings, database, loaded_engine,
                                                      loaded_verifier, loaded_knowledge)
            stack.callback(live_kgs.stop)
            inference = InferenceService(engine=loaded_engine, database=database, settings=settings, metrics=metrics,
                                         verifier=loaded_verifier or NoClaimVerifier(),
                                         knowledge=loaded_knowledge or NoKnowledge(), detector=loaded_detector)
            stack.callback(inference.committer.stop)
            task_queue, scoring_worker = _start_task_queue(settings, database, stack, packs, inference.traffic)
            if settings.chain_witness:
                publisher = WitnessPublisher(database, open_witness(settings.chain_witness),
                                             interval_s=settings.witness_interval_s).start()
                stack.callback(publisher.stop)
            if settings.metrics_port is not None:   # a listener of its own, e.g. on an internal interface
                server, _thread = start_http_server(settings.metrics_port, addr=settings.metrics_host,
                                                    registry=metrics.registry)
                stack.callback(server.shutdown)
            auth = AuthGuard(environment=settings.environment, bind_host=settings.host)
            services = Services(settings, database, loaded_engine, inference, metrics, task_queue, auth, packs,
                                models=models, kg=live_kgs, scoring_worker=scoring_worker)
            services.embeddings = EmbeddingService(database=database, settings=settings, metrics=metrics)
            app.state.services = services
            await anyio.to_thread.run_sync(_warn_about_authentication, database, auth, settings.host)
            if settings.malloc_trim_interval_s:
                trimmer = asyncio.create_task(_trim_memory_periodically(settings.malloc_trim_interval_s))
                stack.callback(trimmer.cancel)
            # What ready did not wait for loads now, on a thread, once this process's ready path is done (so it takes
            # neither the GIL from that path nor a CPU from the engine core while it still loads): the domain
            # detector, the PII screen's phone metadata, what `auditor serve` deferred (simple-icd-10-cm,
            # eyecite), then the validators' big registries (the ICD-10-CM index, the drug dictionary). A request
            # that needs one of them first waits for the same load and is served as it would be later. /ready says
            # "warm" once all is done.
            services.warming = start_loading_deferred(
                first=[*([loaded_detector.get] if isinstance(loaded_detector, OnDemand) else []), min_phone_digits],
                then=getattr(loaded_verifier, "warm_registries", None))
            services.ready = True
            gc.enable()   # `auditor serve` starts with it off: see auditor.commands.serve
            logger.info("ready %.1f s after startup began: audit store %.1f s, KGs and validators %.1f s, then "
                        "%.1f s waiting for the engine", time.perf_counter() - began, store_ready - began,
                        runtime_ready - store_ready, engine_ready - runtime_ready)
            try:
                yield
            finally:
                services.ready = False

    app = FastAPI(title="Hallucination auditor", version="0.1.0", lifespan=lifespan,
                  dependencies=[Depends(refuse_non_finite_numbers)],
                  description="OpenAI-compatible inference with audit IDs, a safety gate and a tamper-evident audit log")
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestLog)   # outermost: its context covers the whole request, refusals of size included
    install_error_handlers(app)

    @app.exception_handler(AuditUnavailable)
    async def _audit_unavailable(request: Request, _exc: AuditUnavailable) -> JSONResponse:
        error = audit_store_unavailable()
        count_error(request, error.status_code, error.code)
        return error_response(error.status_code, error.message, error.code)

    @app.exception_handler(EngineUnavailable)
    async def _engine_unavailable(request: Request, exc: EngineUnavailable) -> JSONResponse:
        error = engine_unavailable(str(exc))
        count_error(request, error.status_code, error.code)
        return error_response(error.status_code, error.message, error.code, headers=ENGINE_RETRY_AFTER)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Still a bug when it happens, but the client gets the OpenAI shape and the log gets the traceback.
        logger.exception("unhandled error", exc_info=exc)
        count_error(request, 500, "internal_error")
        return error_response(500, "internal error; the request was recorded if it reached the model", "internal_error")

    @app.exception_handler(UpstreamError)
    async def _upstream_failed(_request: Request, exc: UpstreamError) -> JSONResponse:
        headers = {**exc.headers, **({"X-Audit-Id": exc.audit_id} if exc.audit_id else {})}
        return error_response(exc.status_code, exc.message, exc.code, headers=headers or None)

    @app.exception_handler(BadRequest)
    async def _bad_request(request: Request, exc: BadRequest) -> JSONResponse:
        count_error(request, 400, exc.code)
        return error_response(400, str(exc), exc.code, exc.param)

    for router in (chat.router, completions.router, embeddings.router, models.router, audits.router, reaudits.router,
                   health.router, reviews.router, holds.router, keys.router, access_log.router, trends.router,
                   rules.router, alerts.router, imports.router, kg.router, usage.router):
        app.include_router(router)
    install_console(app)
    return app
