"""`auditor engine-core --address ADDR`: run the engine core on its own, for several API processes to share
(each started with AUDITOR_ENGINE_ADDRESS=ADDR). Restarting it when it dies is the supervisor's job (systemd,
Kubernetes); the API processes fail their requests in flight and reconnect when it answers again."""

from __future__ import annotations

import argparse
import logging

from auditor.cli import CliError
from auditor.commands.common import load_settings
from auditor.logs import configure as configure_logging


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("engine-core", help="run the engine core on its own, for API processes to share")
    parser.add_argument("--address", help="ZeroMQ address to serve on (default: AUDITOR_ENGINE_ADDRESS), "
                        "e.g. ipc:///run/auditor/engine")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import zmq

    from auditor.serving.engine_loading import (
        EngineRecipe,
        check_engine_settings,
        engine_cpu_split,
        with_core_threads,
    )
    from engine.affinity import pin_this_process
    from engine.core_proc import EngineCoreProc

    settings = load_settings()
    address = args.address or settings.engine_address
    if not address:
        raise CliError("give --address or set AUDITOR_ENGINE_ADDRESS (e.g. ipc:///run/auditor/engine)")
    path = settings.resolved_model_path()
    if not path.is_dir():
        raise CliError(f"no model at {path}: set AUDITOR_MODEL_PATH to a Hugging Face-style model folder")
    try:
        check_engine_settings(settings)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    configure_logging(settings.log_format, level=settings.log_level)
    cpus = engine_cpu_split(settings)   # the API processes that share this core run on the others
    if cpus is not None:
        pin_this_process(cpus.core)
    engine = EngineRecipe(with_core_threads(settings, cpus))()
    try:
        core = EngineCoreProc(engine, address)
    except zmq.ZMQError as exc:   # a bad or busy address
        raise CliError(f"cannot serve on {address}: {exc}") from exc
    logging.getLogger("auditor").info("engine core serving on %s", address)
    return core.run()
