"""The Celery app (`auditor.jobs.worker:celery_app`) and its two tasks. Tasks are thin: they take ids, reload
state through the service layer (`auditor.jobs.scoring`, `auditor.jobs.reaudit_chunks`) and are safe to run twice.

Broker and result backend: `AUDITOR_REDIS_URL`. Tuning: `AUDITOR_WORKER_*` (see `WorkerSettings`).
Every worker also runs, in a daemon thread of its main process, the outbox dispatcher and the
re-audit sweeper (`AUDITOR_WORKER_DISPATCH_INTERVAL_S=0` turns that off): dispatchers in several
workers are safe (SKIP LOCKED), and with workers up, scoring needs no other process.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_init, worker_process_init, worker_ready, worker_shutdown

from auditor.alerts.engine import AlertSchedule
from auditor.jobs import reaudit, reaudit_chunks, scoring, task_logging  # noqa: F401 - connects its signals
from auditor.jobs.domains import shared_detector
from auditor.jobs.heartbeat import HeartbeatThread
from auditor.jobs.outbox import acknowledge_hook, dispatch_once
from auditor.jobs.settings import WorkerSettings, worker_settings
from auditor.kg.errors import KgIntegrityError
from auditor.kg.live import LiveKnowledgeGraphs
from auditor.packs.source import store_packs
from auditor.settings import get_settings
from auditor.store.database import Database
from auditor.trail.segments import recover_interrupted_streams
from auditor.trail.witness import WitnessPublisher, open_witness

logger = logging.getLogger("auditor.jobs.worker")

SCORE_TASK = "auditor.score_record"
CHUNK_TASK = "auditor.reaudit_chunk"


def backoff_s(retries: int, *, cap: int) -> int:
    """Exponential backoff: 1, 2, 4, ... seconds, capped."""
    return min(cap, 2 ** retries)


def configure(app: Celery, *, redis_url: str | None, settings: WorkerSettings) -> Celery:
    app.conf.update(
        broker_url=redis_url, result_backend=redis_url,
        task_default_queue=settings.queue,
        task_acks_late=True,                 # a task killed mid-run is delivered again
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,        # one message reserved per process: a dead worker strands one
        task_serializer="json", result_serializer="json", accept_content=["json"],
        result_expires=3600,
        broker_transport_options={"visibility_timeout": settings.visibility_timeout_s},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return app


_SETTINGS = worker_settings()
celery_app = configure(Celery("auditor"), redis_url=get_settings().redis_url, settings=_SETTINGS)


# -- per-process resources: the database engine and the evaluator load once per worker process --------


@dataclass(slots=True)
class _Resources:
    pid: int
    database: Database
    evaluator: scoring.Evaluator
    kgs: LiveKnowledgeGraphs | None = None   # this process's KG versions, following the store (imports)


_resources: _Resources | None = None
_resources_lock = threading.Lock()


def resources() -> _Resources:
    """This process's database and evaluator. After a fork the evaluator (plain data, loaded once in the
    parent) is kept and the database engine is rebuilt: connections must not cross processes."""
    global _resources
    with _resources_lock:
        if _resources is None:
            evaluator = scoring.load_evaluator(_SETTINGS.evaluator)
            warm_up = getattr(evaluator, "warm_up", None)
            if _SETTINGS.warm_up and callable(warm_up):
                try:
                    warm_up()
                    shared_detector()   # records that name no domain are detected: load MiniLM now, not mid-task
                except Exception:   # a domain that cannot load fails its records later, with the reason
                    logger.exception("evaluator warm-up failed")
            fresh = _Resources(os.getpid(), _open_database(), evaluator)
            fresh.kgs = _follow_kg_versions(fresh.database)   # a KG that fails its check: no resources, no scoring
            _resources = fresh
        elif _resources.pid != os.getpid():   # threads do not survive a fork: each child follows on its own
            fresh = _Resources(os.getpid(), _open_database(), _resources.evaluator)
            fresh.kgs = _follow_kg_versions(fresh.database)
            _resources = fresh
        else:
            return _resources
        # The evaluator judges with the store's active rule packs, refreshed every few seconds in every
        # process (after a fork too: each child reads the store through its own engine).
        use_packs = getattr(_resources.evaluator, "use_packs", None)
        if callable(use_packs):
            use_packs(store_packs(_resources.database, get_settings()))
        return _resources


def _follow_kg_versions(database: Database) -> LiveKnowledgeGraphs | None:
    """Score with the store's current KG versions (imports, rollbacks), followed every AUDITOR_KG_REFRESH_S."""
    settings = get_settings()
    live = LiveKnowledgeGraphs(database, settings.domains, refresh_s=settings.kg_refresh_s)
    try:
        live.refresh()
    except KgIntegrityError:   # a doctored KG version: never score with the packaged KG in its place
        live.stop()
        raise
    except Exception:   # the store may not be migrated yet: the follower thread retries
        logger.exception("could not load the KG versions in the store; scoring with the packaged KGs for now")
    return live.start()


def _open_database() -> Database:
    settings = get_settings()
    return Database.from_settings(settings)


@worker_init.connect
def _load_before_fork(**_: Any) -> None:
    resources()   # KGs and packs load once in the parent; prefork children inherit them


@worker_process_init.connect
def _reopen_in_child(**_: Any) -> None:
    resources()


# -- tasks ---------------------------------------------------------------------------------------


# ignore_result: the evaluation row is the result; thousands of per-record results would only fill Redis.
@celery_app.task(name=SCORE_TASK, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
                 max_retries=_SETTINGS.max_retries, soft_time_limit=_SETTINGS.score_soft_time_limit_s,
                 time_limit=_SETTINGS.score_soft_time_limit_s + 30)
def score_record_task(self: Task, record_id: str, outbox_id: int | None = None) -> dict[str, Any]:
    """Score one record (live scoring, from the outbox)."""
    res = resources()
    request = scoring.ScoreRequest(record_id, None, [acknowledge_hook(outbox_id)])
    try:
        outcome = scoring.score_record(res.database, res.evaluator, request)
    except Exception as exc:   # SoftTimeLimitExceeded included: retried like any transient failure
        if self.request.retries >= self.max_retries:
            reason = f"gave up after {self.request.retries + 1} attempts: {_describe(exc)}"
            outcome = scoring.record_failure(res.database, request, evaluator_version=res.evaluator.version,
                                             reason=reason)
        else:
            countdown = backoff_s(self.request.retries, cap=_SETTINGS.retry_backoff_max_s)
            raise self.retry(exc=exc, countdown=countdown) from exc
    return {"evaluation_id": outcome.evaluation_id, "status": outcome.status, "created": outcome.created}


@celery_app.task(name=CHUNK_TASK, bind=True, acks_late=True, reject_on_worker_lost=True,
                 max_retries=_SETTINGS.max_retries, soft_time_limit=_SETTINGS.chunk_soft_time_limit_s,
                 time_limit=_SETTINGS.chunk_soft_time_limit_s + 60)
def reaudit_chunk_task(self: Task, job_id: str, chunk: int) -> dict[str, Any]:
    """Score the pending records of one re-audit chunk."""
    res = resources()
    progress = reaudit_chunks.ChunkProgress()
    retry = reaudit_chunks.RecordRetry(fatal=(SoftTimeLimitExceeded,))
    try:
        reaudit_chunks.run_chunk(res.database, res.evaluator, job_id=job_id, chunk=chunk, retry=retry,
                                 progress=progress, queue=CeleryTaskQueue())
    except SoftTimeLimitExceeded:
        # The record being scored ran the chunk out of time: fail it, go on with the rest.
        if progress.current_record_id is not None:
            reaudit_chunks.fail_record(
                res.database, res.evaluator.version, job_id=job_id, record_id=progress.current_record_id,
                reason=f"SoftTimeLimitExceeded: exceeded the soft time limit of {_SETTINGS.chunk_soft_time_limit_s}s")
        raise self.retry(countdown=0, max_retries=self.max_retries + 1) from None
    except Exception as exc:
        if self.request.retries >= self.max_retries:
            reaudit_chunks.fail_pending_in_chunk(
                res.database, res.evaluator.version, job_id=job_id, chunk=chunk,
                reason=f"chunk failed {self.request.retries + 1} times: {_describe(exc)}")
            return {"cancelled": False, "done": progress.done, "failed": progress.failed,
                    "not_applicable": progress.not_applicable}
        countdown = backoff_s(self.request.retries, cap=_SETTINGS.retry_backoff_max_s)
        raise self.retry(exc=exc, countdown=countdown) from exc
    return {"cancelled": progress.cancelled, "done": progress.done, "failed": progress.failed,
            "not_applicable": progress.not_applicable,
            "already": progress.already}


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


# -- publishing ------------------------------------------------------------------------------------


class CeleryTaskQueue:
    """The `TaskQueue` of a deployment with a broker: sends task names and ids, nothing else."""

    def __init__(self, app: Celery = celery_app, *, queue: str | None = None) -> None:
        self.app = app
        self.queue = queue or app.conf.task_default_queue

    def enqueue_score(self, outbox_id: int, record_id: str) -> None:
        # retry=False: a broker that is down must fail fast; the outbox keeps the work.
        self.app.send_task(SCORE_TASK, kwargs={"record_id": record_id, "outbox_id": outbox_id},
                           queue=self.queue, retry=False)

    def enqueue_chunk(self, job_id: str, chunk: int) -> None:
        self.app.send_task(CHUNK_TASK, kwargs={"job_id": job_id, "chunk": chunk}, queue=self.queue, retry=False)


# -- the dispatcher/sweeper thread -------------------------------------------------------------------


class Dispatcher:
    """Runs outbox dispatch and the re-audit sweeper every `interval_s` until stopped."""

    def __init__(self, database: Database, queue: Any, settings: WorkerSettings,
                 witness: WitnessPublisher | None = None) -> None:
        self.database, self.queue, self.settings, self.witness = database, queue, settings, witness
        self.alerts = AlertSchedule.from_settings(get_settings())
        self.packs = store_packs(database, get_settings())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="auditor-dispatcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def run_once(self) -> None:
        dispatch_once(self.database, self.queue.enqueue_score, batch_size=self.settings.dispatch_batch,
                      redeliver_after_s=self.settings.redeliver_after_s)
        reaudit.requeue_stalled(self.database, self.queue, stall_after_s=self.settings.chunk_stall_after_s,
                                queued_after_s=self.settings.chunk_queued_after_s)
        recover_interrupted_streams(self.database, idle_for_s=self.settings.stream_recovery_after_s)
        self.packs.refresh()   # the rule-pack file watch, also while no task runs
        self.alerts.run(self.database)
        if self.witness is not None:
            self.witness.publish_once()

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.dispatch_interval_s):
            try:
                self.run_once()
            except Exception:   # the database or broker may be briefly away; the next pass retries
                logger.exception("outbox dispatch / re-audit sweep failed")


_dispatcher: Dispatcher | None = None
_heartbeat: HeartbeatThread | None = None


@worker_ready.connect
def _start_heartbeat(**_: Any) -> None:
    """Tell the API processes (`/ready`) that scoring has a live worker, whether or not this one dispatches."""
    global _heartbeat
    _heartbeat = HeartbeatThread(_open_database(), "celery", interval_s=_SETTINGS.heartbeat_interval_s).start()


@worker_shutdown.connect
def _stop_heartbeat(**_: Any) -> None:
    if _heartbeat is not None:
        _heartbeat.stop()


@worker_ready.connect
def _start_dispatcher(**_: Any) -> None:
    global _dispatcher
    if _SETTINGS.dispatch_interval_s <= 0:
        return
    database, address = _open_database(), get_settings().chain_witness
    witness = WitnessPublisher(database, open_witness(address)) if address else None
    _dispatcher = Dispatcher(database, CeleryTaskQueue(), _SETTINGS, witness)
    _dispatcher.start()


@worker_shutdown.connect
def _stop_dispatcher(**_: Any) -> None:
    if _dispatcher is not None:
        _dispatcher.stop()
