"""`auditor worker`: a Celery worker for scoring and re-audit jobs (needs AUDITOR_REDIS_URL).

Each worker also dispatches the outbox and sweeps stalled re-audit chunks (`--no-dispatch` to leave
that to other workers). Scale out by starting more workers, on more machines.
"""

from __future__ import annotations

import argparse
import os

from auditor.cli import CliError
from auditor.commands.common import load_settings, open_database


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("worker", help="run a Celery worker (scoring, re-audit jobs)")
    parser.add_argument("--concurrency", type=int, default=None, help="worker processes (default: CPU count)")
    parser.add_argument("--pool", choices=("prefork", "solo", "threads"), default="prefork",
                        help="Celery execution pool (default prefork: one process per concurrency slot)")
    parser.add_argument("--loglevel", default="info", help="debug, info, warning or error (default info)")
    parser.add_argument("--hostname", default=None, help="node name, e.g. scoring1@%%h")
    parser.add_argument("--no-dispatch", action="store_true",
                        help="do not run the outbox dispatcher / re-audit sweeper in this worker")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    settings = load_settings()
    if not settings.redis_url:
        raise CliError("AUDITOR_REDIS_URL is not set: without a broker, scoring runs in-process in `auditor serve`")
    if args.concurrency is not None and args.concurrency < 1:
        raise CliError("--concurrency must be at least 1")
    open_database(settings).dispose()   # migrate (when enabled) before any task touches the schema
    if args.no_dispatch:
        os.environ["AUDITOR_WORKER_DISPATCH_INTERVAL_S"] = "0"   # read when auditor.jobs.worker is imported
    from auditor.jobs.worker import celery_app

    argv = ["worker", f"--loglevel={args.loglevel}", f"--pool={args.pool}"]
    if args.concurrency is not None:
        argv.append(f"--concurrency={args.concurrency}")
    if args.hostname:
        argv.append(f"--hostname={args.hostname}")
    celery_app.worker_main(argv=argv)
    return 0
