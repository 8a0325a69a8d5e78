"""`auditor reaudit start|list|watch|cancel|resume`: re-score stored records under the active rule packs/KGs.

    auditor reaudit start --domain legal --since 30d              # records matching a filter
    auditor reaudit start --import-id 1b2c...                     # an imported JSONL (see `auditor import`)
    auditor reaudit list [--status running]

`start` names the rule packs the job pins before it starts, follows the job with a progress bar and
prints its summary (`--detach` returns at once; that needs workers, i.e. AUDITOR_REDIS_URL). Without a
broker the job runs in this process. With `--json`, stdout holds the final job as JSON and nothing else.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from auditor.cli import CliError
from auditor.commands.common import (
    add_json_flag,
    guarded,
    load_settings,
    open_database,
    print_json,
    print_table,
)
from auditor.commands.filters import add_record_filters, build_filter, record_filter_values
from auditor.jobs import reaudit, scoring
from auditor.jobs.settings import WorkerSettings
from auditor.jobs.task_queue import TaskQueue
from auditor.packs.source import pins_now, store_packs
from auditor.settings import Settings
from auditor.store.database import Database
from auditor.trail.access_log import CliOperator

CLI_TENANT = "cli"   # the operator acts as admin over all tenants


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("reaudit", help="re-score stored or imported outputs and report what changed")
    actions = parser.add_subparsers(dest="action", required=True)
    start = actions.add_parser("start", help="start a job over a record filter or an import")
    add_record_filters(start, title="which records (or --import-id)")
    start.add_argument("--import-id", default=None, help="re-audit the records of one `auditor import`")
    start.add_argument("--chunk-size", type=int, default=reaudit.DEFAULT_CHUNK_SIZE,
                       help=f"records per task (default {reaudit.DEFAULT_CHUNK_SIZE})")
    start.add_argument("--detach", action="store_true", help="return once the job is queued (needs workers)")
    add_json_flag(start, "the finished job (with its summary)")
    start.set_defaults(func=_start)
    listing = actions.add_parser("list", help="jobs, newest first")
    listing.add_argument("--status", choices=("running", "cancelled", "done"), help="only jobs in this state")
    listing.add_argument("--limit", type=int, default=20, help="jobs to show, 1-100 (default 20)")
    add_json_flag(listing, "the jobs")
    listing.set_defaults(func=_list)
    for name, func, text in (("watch", _watch, "follow a job's progress to its summary"),
                             ("cancel", _cancel, "stop handing out a job's work (scored records keep their evaluations)"),
                             ("resume", _resume, "resume a cancelled or stalled job")):
        sub = actions.add_parser(name, help=text)
        sub.add_argument("job_id", help="the job id (see `auditor reaudit list`)")
        add_json_flag(sub, "the job")
        sub.set_defaults(func=func)


def _start(args: argparse.Namespace) -> int:
    settings = load_settings()
    filters = build_filter(reaudit.ReauditFilter, args) if record_filter_values(args) else None
    if (filters is None) == (args.import_id is None):
        raise CliError("give filter options (e.g. --domain legal) or --import-id, not both and not neither")
    if args.detach and not settings.redis_url:
        raise CliError("--detach needs workers (AUDITOR_REDIS_URL); without a broker the job runs in this process")
    database = open_database(settings)
    spec = _evaluator_spec()
    packs = store_packs(database, settings)
    queue = _queue(settings, database, packs)
    try:
        version = scoring.evaluator_version(spec)
        pins = guarded(pins_now, packs, spec)
        job_id = guarded(reaudit.create_job, database, tenant=CLI_TENANT, tenant_scope=None,
                         evaluator_version=version, filters=filters, import_id=args.import_id,
                         chunk_size=args.chunk_size, rule_packs=pins)
    except (reaudit.ReauditError, scoring.EvaluatorUnavailable) as exc:
        raise CliError(str(exc)) from exc
    named = ", ".join(f"{domain} {pin['version']} ({pin['hash'][:12]})" for domain, pin in pins.items())
    print(f"re-audit job {job_id}: judging with {named or f'evaluator {version}'}",
          file=sys.stderr if args.json else sys.stdout)
    reaudit.start_job(database, queue, job_id)
    if args.detach:
        if args.json:
            print_json(_job(database, job_id))
        return 0
    return _follow(database, job_id, as_json=args.json)


def _list(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 100:
        raise CliError("--limit must be between 1 and 100")
    database = open_database(load_settings())
    jobs, _ = guarded(reaudit.list_jobs, database, CliOperator(), status=args.status, limit=args.limit)
    if args.json:
        print_json(jobs)
        return 0
    print_table(("id", "created", "status", "source", "filter", "packs", "done/total", "failed"),
                [(j["id"], j["created_at"], j["status"] + (" (planning)" if j["planning"] else ""), j["source"],
                  _describe_filter(j), ", ".join(f"{d} {p['version']}" for d, p in j["rule_packs"].items()) or None,
                  f"{j['progress']['done']}/{j['progress']['total']}", j["progress"]["failed"]) for j in jobs],
                empty="no re-audit jobs" + (f" {args.status}" if args.status else "") + " yet")
    return 0


def _describe_filter(job: dict[str, Any]) -> str:
    if job["import_id"]:
        return f"import {job['import_id']}"
    return " ".join(f"{k}={v}" for k, v in (job["filter"] or {}).items()) or "(all records)"


def _watch(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    return _follow(database, args.job_id, as_json=args.json)


def _cancel(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    try:
        guarded(reaudit.cancel_job, database, args.job_id, tenant_scope=None)
    except reaudit.ReauditError as exc:
        raise CliError(str(exc)) from exc
    if args.json:
        print_json(_job(database, args.job_id))
    else:
        print(f"re-audit job {args.job_id} cancelled (resume with `auditor reaudit resume {args.job_id}`)")
    return 0


def _resume(args: argparse.Namespace) -> int:
    settings = load_settings()
    database = open_database(settings)
    try:
        guarded(reaudit.resume_job, database, _queue(settings, database, store_packs(database, settings)),
                args.job_id, tenant_scope=None)
    except reaudit.ReauditError as exc:
        raise CliError(str(exc)) from exc
    return _follow(database, args.job_id, as_json=args.json)


def _evaluator_spec() -> str:
    return WorkerSettings().evaluator


def _queue(settings: Settings, database: Database, packs: Any) -> TaskQueue:
    if settings.redis_url:
        from celery import Celery

        from auditor.jobs.worker import CeleryTaskQueue, configure

        return CeleryTaskQueue(configure(Celery("auditor-cli"), redis_url=settings.redis_url,
                                         settings=WorkerSettings()))
    from auditor.commands.kg import follow_store_once
    from auditor.jobs.inprocess import InProcessTaskQueue

    follow_store_once(database, settings)     # the job runs here: judge with the store's current KG versions
    spec = _evaluator_spec()
    return InProcessTaskQueue(database, lambda: scoring.load_evaluator(spec, packs=packs))


def _job(database: Database, job_id: str) -> dict[str, Any]:
    try:
        return guarded(reaudit.job_view, database, CliOperator(), job_id)
    except reaudit.ReauditNotFound as exc:
        raise CliError(str(exc)) from exc


def _follow(database: Database, job_id: str, *, as_json: bool, poll_s: float = 0.5) -> int:
    console = Console(stderr=True)
    columns = (TextColumn("[bold]re-audit"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]:.1f} rec/s, {task.fields[failed]} failed{task.fields[planning]}"),
               TimeRemainingColumn())
    try:
        with Progress(*columns, console=console, transient=False) as bar:
            task = None
            while True:
                job, progress = _snapshot(database, job_id)
                planning = " (still selecting records)" if progress["planning"] else ""
                if task is None:
                    task = bar.add_task("re-audit", total=progress["total"], rate=0.0, failed=0, planning=planning)
                finished = progress["done"] + progress["failed"] + progress.get("not_applicable", 0)
                bar.update(task, total=progress["total"], completed=finished,
                           rate=progress["rate_per_s"], failed=progress["failed"], planning=planning)
                if job["status"] != "running":
                    break
                time.sleep(poll_s)
    except KeyboardInterrupt:
        console.print(f"stopped watching; the job goes on where workers run it. "
                      f"Cancel with `auditor reaudit cancel {job_id}`")
        return 130
    view = _job(database, job_id)   # the read of the summary is logged
    if as_json:
        print_json(view)
    else:
        _print_summary(view)
    return 0


def _snapshot(database: Database, job_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    with database.session() as session:
        try:
            job = reaudit.get_job(session, job_id, tenant_scope=None)
        except reaudit.ReauditNotFound as exc:
            raise CliError(str(exc)) from exc
        progress = reaudit.progress_of(session, job)
        return {"id": job.id, "status": job.status}, progress


def _print_summary(job: dict[str, Any]) -> None:
    summary = job["summary"]
    if summary is None:
        print(f"job {job['id']}: {job['status']}")
        return
    before, after = summary["fer_before"], summary["fer_after"]
    records = summary["records"]
    packs = ", ".join(f"{d} {p['version']} ({p['hash'][:12]})" for d, p in (summary.get("rule_packs") or {}).items())
    print(f"job {job['id']}: {job['status']}; {records['done']} re-scored, {records['failed']} failed, "
          f"{records.get('not_applicable', 0)} of no domain (not applicable)"
          + (f"; packs {packs}" if packs else f"; evaluator {', '.join(summary['evaluator_versions'])}"))
    print(f"FER mean before {before['mean']} (n={before['scored']}) -> after {after['mean']} (n={after['scored']})")
    print(f"claims whose verdict changed: {summary['verdict_changes']['total']}")
    for cause, count in (summary.get("failures") or {}).get("by_cause", {}).items():   # older jobs have none
        print(f"failed ({count}): {cause}")
    gates = summary["gate_action_changes"]
    print(f"records whose gate action would now differ: {gates['total']} {gates['by_transition']}"
          + (f" ({gates['no_gate']} imported, never gated)" if gates.get("no_gate") else ""))
