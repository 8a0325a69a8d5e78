"""`auditor serve [--host H] [--port P]`: run the API with uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
from typing import TYPE_CHECKING

from auditor.cli import CliError
from auditor.commands.common import guarded, load_settings, open_database
from auditor.logs import configure as configure_logging
from auditor.settings import Settings
from engine.affinity import format_cpus

if TYPE_CHECKING:
    from auditor.settings import Settings
    from engine.core_client import EngineCoreClient

logger = logging.getLogger("auditor")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the OpenAI-compatible audit service")
    parser.add_argument("--host", help="bind address (default: AUDITOR_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: AUDITOR_PORT or 8000)")
    parser.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    # No cyclic GC until ready (the lifespan turns it back on): a start creates millions of long-lived objects
    # (modules, KGs, automata) and almost no cyclic garbage (~1,300 objects), yet each collection its
    # allocations set off rescans them all; this took ~20% of the API process's CPU on a warm start.
    gc.disable()
    try:
        return _serve_with_gc_off(args)
    finally:
        gc.enable()


def _serve_with_gc_off(args: argparse.Namespace) -> int:
    # wordfreq finds its data folder through inspect.stack(), which reads the source of every frame on the stack
    # and scans sys.modules for each: imported first, from this shallow stack, it costs 0.2 s; imported where the
    # validators and the domain detector first import it, deep in the app's import chain, ~1 s.
    import wordfreq  # noqa: F401

    from auditor.serving.engine_loading import (
        EngineLoadError,
        check_engine_settings,
        configure_malloc_for,
        start_engine_core,
    )
    from knowledge_graphs.minilm import check_dtype as check_minilm_dtype

    settings = load_settings()
    configure_malloc_for(settings)   # before uvicorn and the worker threads start allocating
    host, port = args.host or settings.host, args.port or settings.port
    if settings.local_engine:   # a replica that only forwards to upstreams has no engine to check
        try:
            check_engine_settings(settings)
        except ValueError as exc:
            raise CliError(str(exc)) from exc
    _check_model_registry(settings)
    try:
        check_minilm_dtype(settings.embedding_dtype)   # the detector loads after ready: refuse a bad dtype now
    except ValueError as exc:
        raise CliError(f"AUDITOR_EMBEDDING_DTYPE: {exc}") from exc
    # The engine core first: its process loads the model and the KG constraint while this one imports the
    # service and loads the KGs and validators (on two cores, the start takes the longer of the two, not the sum).
    try:
        engine_core = start_engine_core(settings)
    except EngineLoadError as exc:
        raise CliError(str(exc)) from exc
    if engine_core is not None:   # launched already, at this process's priority; from here on this process yields
        engine_core.yield_cpu(settings.api_nice)
    try:
        return _run(settings, host, port, engine_core)
    finally:
        if engine_core is not None:   # the lifespan shut it down already unless the app never started
            asyncio.run(engine_core.shutdown())


def _run(settings: Settings, host: str, port: int, engine_core: EngineCoreClient | None) -> int:
    from auditor.auth.keys import keys_ever_created

    database = open_database(settings)

    def keys_exist() -> bool:
        with database.session() as session:
            return keys_ever_created(session)

    has_keys = guarded(keys_exist)
    database.dispose()
    configure_logging(settings.log_format, level=settings.log_level)
    if engine_core is not None and engine_core.cpus is not None:
        logger.info("engine core on CPUs %s, this process on CPUs %s (AUDITOR_ENGINE_CPUS=%s)",
                    format_cpus(engine_core.cpus.core), format_cpus(engine_core.cpus.api), settings.engine_cpus)
    import uvicorn

    from auditor.serving.deferred_imports import defer

    defer()   # before the validators are imported with the app: see auditor.serving.deferred_imports
    from auditor.app import create_app
    from auditor.auth.principal import LOOPBACK_HOSTS

    if not has_keys and host not in LOOPBACK_HOSTS and settings.environment != "production":
        # Without keys nobody is authenticated: never expose that beyond this machine.
        logger.warning("development mode (no API key yet): binding 127.0.0.1 instead of %s", host)
        host = "127.0.0.1"
    # The app decides development mode from the address it is really bound to.
    app = create_app(settings.model_copy(update={"host": host, "port": port}), engine_core=engine_core)
    # log_config=None: uvicorn's own lines (access, start-up) go through the same handler and format
    uvicorn.run(app, host=host, port=port, log_level=settings.log_level.lower(), log_config=None)
    return 0


def _check_model_registry(settings: Settings) -> None:
    """A registry that cannot be used (bad YAML, missing key variable) is a one-line error, before start-up."""
    from auditor.serving.registry import RegistryError, build_registry, read_entries

    try:
        # engine=None stands in for the local engine here: only the upstream entries are checked
        entries = read_entries(settings.models_file, settings.models)
        upstream_only = {k: v for k, v in entries.items() if v.upstream is not None}
        if upstream_only or not settings.local_engine:
            build_registry(engine=None, entries=upstream_only, domains=settings.domains)
        if not settings.local_engine and len(upstream_only) < len(entries):
            raise RegistryError("AUDITOR_LOCAL_ENGINE is off, yet the model registry names the local engine")
    except RegistryError as exc:
        raise CliError(f"model registry: {exc}") from exc
