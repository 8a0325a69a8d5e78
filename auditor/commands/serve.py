"""`auditor serve [--host H] [--port P]`: run the API with uvicorn."""

from __future__ import annotations

import argparse
import logging

from auditor.cli import CliError
from auditor.commands.common import guarded, load_settings, open_database
from auditor.settings import Settings

logger = logging.getLogger("auditor")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the OpenAI-compatible audit service")
    parser.add_argument("--host", help="bind address (default: AUDITOR_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: AUDITOR_PORT or 8000)")
    parser.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from auditor.app import create_app
    from auditor.auth.keys import keys_ever_created
    from auditor.auth.principal import LOOPBACK_HOSTS

    settings = load_settings()
    host, port = args.host or settings.host, args.port or settings.port
    model_path = settings.resolved_model_path()
    if settings.local_engine and not model_path.is_dir():
        raise CliError(f"no model at {model_path}: set AUDITOR_MODEL_PATH to a Hugging Face-style model folder")
    from auditor.serving.runtime import check_engine_settings

    if settings.local_engine:   # a replica that only forwards to upstreams has no engine to check
        try:
            check_engine_settings(settings)
        except ValueError as exc:
            raise CliError(str(exc)) from exc
    _check_model_registry(settings)
    database = open_database(settings)

    def keys_exist() -> bool:
        with database.session() as session:
            return keys_ever_created(session)

    has_keys = guarded(keys_exist)
    database.dispose()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not has_keys and host not in LOOPBACK_HOSTS and settings.environment != "production":
        # Without keys nobody is authenticated: never expose that beyond this machine.
        logger.warning("development mode (no API key yet): binding 127.0.0.1 instead of %s", host)
        host = "127.0.0.1"
    # The app decides development mode from the address it is really bound to.
    uvicorn.run(create_app(settings.model_copy(update={"host": host, "port": port})), host=host, port=port,
                log_level="info")
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
