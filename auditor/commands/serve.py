"""`auditor serve [--host H] [--port P]`: run the API with uvicorn."""

from __future__ import annotations

import argparse
import logging

from auditor.cli import CliError
from auditor.commands.common import guarded, load_settings, open_database

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
    if not model_path.is_dir():
        raise CliError(f"no model at {model_path}: set AUDITOR_MODEL_PATH to a Hugging Face-style model folder")
    from auditor.serving.runtime import check_engine_settings

    try:
        check_engine_settings(settings)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
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
