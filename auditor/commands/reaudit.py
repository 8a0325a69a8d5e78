"""`auditor reaudit start|watch|cancel|resume`: re-score stored records under the current rule packs/KGs.

    auditor reaudit start --domain legal --since 2026-06-01      # records matching a filter
    auditor reaudit start --import-id 1b2c...                    # an imported JSONL (see `auditor import`)

`start` follows the job with a progress bar and prints its summary (`--detach` returns at once; that
needs workers, i.e. AUDITOR_REDIS_URL). Without a broker the job runs in this process.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from auditor.cli import CliError
from auditor.commands.common import guarded, load_settings, open_database
from auditor.jobs import reaudit, scoring
from auditor.jobs.settings import WorkerSettings
from auditor.jobs.task_queue import TaskQueue
from auditor.settings import Settings
from auditor.store.database import Database

CLI_TENANT = "cli"   # the operator acts as admin over all tenants
_FILTER_OPTIONS = ("since", "until", "tenant", "domain", "intent", "model", "gate_action", "status",
                   "has_contradicted", "fer_min", "fer_max", "rule_id", "q")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("reaudit", help="re-score stored or imported outputs and report what changed")
    actions = parser.add_subparsers(dest="action", required=True)
    start = actions.add_parser("start", help="start a job over a record filter or an import")
    for option in _FILTER_OPTIONS:
        start.add_argument(f"--{option.replace('_', '-')}", dest=option, default=None)
    start.add_argument("--import-id", default=None, help="re-audit the records of one `auditor import`")
    start.add_argument("--chunk-size", type=int, default=reaudit.DEFAULT_CHUNK_SIZE)
    start.add_argument("--detach", action="store_true", help="return once the job is queued (needs workers)")
    start.add_argument("--json", action="store_true", help="print the final job (with summary) as JSON")
    start.set_defaults(func=_start)
    for name, func, text in (("watch", _watch, "follow a job's progress"), ("cancel", _cancel, "cancel a job"),
                             ("resume", _resume, "resume a cancelled or stalled job")):
        sub = actions.add_parser(name, help=text)
        sub.add_argument("job_id")
        sub.add_argument("--json", action="store_true")
        sub.set_defaults(func=func)


def _start(args: argparse.Namespace) -> int:
    settings = load_settings()
    filters = _filters(args)
    if (filters is None) == (args.import_id is None):
        raise CliError("give filter options (e.g. --domain legal) or --import-id, not both and not neither")
    if args.detach and not settings.redis_url:
        raise CliError("--detach needs workers (AUDITOR_REDIS_URL); without a broker the job runs in this process")
    database = open_database(settings)
    queue = _queue(settings, database)
    try:
        version = scoring.evaluator_version(_evaluator_spec())
        job_id = guarded(reaudit.create_job, database, tenant=CLI_TENANT, tenant_scope=None,
                         evaluator_version=version, filters=filters, import_id=args.import_id,
                         chunk_size=args.chunk_size)
    except (reaudit.ReauditError, scoring.EvaluatorUnavailable) as exc:
        raise CliError(str(exc)) from exc
    reaudit.start_job(database, queue, job_id)
    print(f"re-audit job {job_id}")
    if args.detach:
        return 0
    return _follow(database, job_id, as_json=args.json)


def _watch(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    return _follow(database, args.job_id, as_json=args.json)


def _cancel(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    try:
        guarded(reaudit.cancel_job, database, args.job_id, tenant_scope=None)
    except reaudit.ReauditError as exc:
        raise CliError(str(exc)) from exc
    print(f"re-audit job {args.job_id} cancelled (resume with `auditor reaudit resume {args.job_id}`)")
    return 0


def _resume(args: argparse.Namespace) -> int:
    settings = load_settings()
    database = open_database(settings)
    try:
        guarded(reaudit.resume_job, database, _queue(settings, database), args.job_id, tenant_scope=None)
    except reaudit.ReauditError as exc:
        raise CliError(str(exc)) from exc
    return _follow(database, args.job_id, as_json=args.json)


def _filters(args: argparse.Namespace) -> reaudit.ReauditFilter | None:
    given = {name: getattr(args, name) for name in _FILTER_OPTIONS if getattr(args, name) is not None}
    if not given:
        return None
    try:
        return reaudit.ReauditFilter.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "filter"
        raise CliError(f"{option}: {first['msg']}") from None


def _evaluator_spec() -> str:

    return WorkerSettings().evaluator


def _queue(settings: Settings, database: Database) -> TaskQueue:
    if settings.redis_url:
        from celery import Celery

        from auditor.jobs.worker import CeleryTaskQueue, configure

        return CeleryTaskQueue(configure(Celery("auditor-cli"), redis_url=settings.redis_url,
                                         settings=WorkerSettings()))
    from auditor.jobs.inprocess import InProcessTaskQueue

    spec = _evaluator_spec()
    return InProcessTaskQueue(database, lambda: scoring.load_evaluator(spec))


def _follow(database: Database, job_id: str, *, as_json: bool, poll_s: float = 0.5) -> int:
    console = Console(stderr=True)
    columns = (TextColumn("[bold]re-audit"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]:.1f} rec/s, {task.fields[failed]} failed"), TimeRemainingColumn())
    try:
        with Progress(*columns, console=console, transient=False) as bar:
            task = None
            while True:
                job, progress = _snapshot(database, job_id)
                if task is None:
                    task = bar.add_task("re-audit", total=progress["total"], rate=0.0, failed=0)
                finished = progress["done"] + progress["failed"] + progress.get("not_applicable", 0)
                bar.update(task, completed=finished, rate=progress["rate_per_s"],
                           failed=progress["failed"])
                if job["status"] != "running":
                    break
                time.sleep(poll_s)
    except KeyboardInterrupt:
        console.print(f"stopped watching; the job goes on where workers run it. "
                      f"Cancel with `auditor reaudit cancel {job_id}`")
        return 130
    if as_json:
        print(json.dumps({**job, "progress": progress}, default=str, indent=2))
    else:
        _print_summary(job)
    return 0


def _snapshot(database: Database, job_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    with database.session() as session:
        try:
            job = reaudit.get_job(session, job_id, tenant_scope=None)
        except reaudit.ReauditNotFound as exc:
            raise CliError(str(exc)) from exc
        progress = reaudit.progress_of(session, job)
        return {"id": job.id, "status": job.status, "summary": job.summary}, progress


def _print_summary(job: dict[str, Any]) -> None:
    summary = job["summary"]
    if summary is None:
        print(f"job {job['id']}: {job['status']}")
        return
    before, after = summary["fer_before"], summary["fer_after"]
    records = summary["records"]
    print(f"job {job['id']}: {job['status']}; {records['done']} re-scored, {records['failed']} failed, "
          f"{records.get('not_applicable', 0)} of no domain (not applicable)")
    print(f"FER mean before {before['mean']} (n={before['scored']}) -> after {after['mean']} (n={after['scored']})")
    print(f"claims whose verdict changed: {summary['verdict_changes']['total']}")
    print(f"records whose gate action would now differ: {summary['gate_action_changes']['total']} "
          f"{summary['gate_action_changes']['by_transition']}")
