"""The embedded default: no broker configured, so background work runs on a thread pool in this process.

Same service functions as the Celery tasks (`scoring.score_record`, `reaudit_chunks.run_chunk`), same
retry-then-fail policy. What a restart loses (queued work in memory) comes back the same way it does
after a Redis restart: the outbox re-publishes unacknowledged rows and the sweeper re-enqueues chunks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from auditor.alerts.engine import AlertSchedule
from auditor.jobs import heartbeat, reaudit, reaudit_chunks, scoring
from auditor.jobs.outbox import acknowledge_hook, dispatch_once
from auditor.logs import log_context
from auditor.packs.source import StorePacks
from auditor.store.database import Database
from auditor.trail.segments import recover_interrupted_streams

logger = logging.getLogger("auditor.tasks")
_MAX_PACE_S = 5.0   # one slow task (a long text) must not park a worker for long


class InProcessTaskQueue:
    """A `TaskQueue` backed by a thread pool. The evaluator loads once, on first use."""

    def __init__(self, database: Database, evaluator_factory: Callable[[], scoring.Evaluator], *,
                 workers: int = 2, retry_delays_s: tuple[float, ...] = (0.5, 2.0, 8.0),
                 pace: Callable[[float, float], None] | None = None) -> None:
        """`pace(cpu_s, waited_s)` runs on the worker thread after each scoring task: what the task took of
        this thread's CPU and how long it had waited in the queue (it may sleep to hold scoring back)."""
        self.workers = workers
        self._pace = pace
        self.database = database
        self._evaluator_factory = evaluator_factory
        self._evaluator: scoring.Evaluator | None = None
        self._evaluator_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="auditor-task")
        self._retry_delays_s = retry_delays_s
        self._futures: set[Future[None]] = set()
        self._futures_lock = threading.Lock()

    @property
    def evaluator(self) -> scoring.Evaluator:
        with self._evaluator_lock:
            if self._evaluator is None:
                self._evaluator = self._evaluator_factory()
            return self._evaluator

    def enqueue_score(self, outbox_id: int, record_id: str) -> None:
        self._submit(self._score_paced, time.monotonic(), outbox_id, record_id)

    def enqueue_chunk(self, job_id: str, chunk: int) -> None:
        self._submit(self._chunk, job_id, chunk)

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        """Block until every submitted task has finished (tests, CLI)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._futures_lock:
                pending = [f for f in self._futures if not f.done()]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} background task(s) still running after {timeout_s}s")
            time.sleep(0.02)

    def shutdown(self, *, wait: bool = True) -> None:
        self._executor.shutdown(wait=wait, cancel_futures=not wait)

    def _submit(self, fn: Callable[..., None], *args: object) -> None:
        future = self._executor.submit(fn, *args)
        with self._futures_lock:
            self._futures = {f for f in self._futures if not f.done()} | {future}

    def _score_paced(self, submitted: float, outbox_id: int, record_id: str) -> None:
        waited, cpu = time.monotonic() - submitted, time.thread_time()
        with log_context(audit_id=record_id):   # this thread's lines name the record it scores
            self._score(outbox_id, record_id)
        if self._pace is not None:
            self._pace(time.thread_time() - cpu, waited)

    def _score(self, outbox_id: int, record_id: str) -> None:
        request = scoring.ScoreRequest(record_id, None, [acknowledge_hook(outbox_id)])
        for attempt in range(len(self._retry_delays_s) + 1):
            try:
                scoring.score_record(self.database, self.evaluator, request)
                return
            except Exception as exc:
                if attempt == len(self._retry_delays_s):
                    scoring.record_failure(self.database, request, evaluator_version=self.evaluator.version,
                                           reason=f"gave up after {attempt + 1} attempts: {type(exc).__name__}: {exc}")
                    return
                logger.warning("scoring %s failed (attempt %d): %s", record_id, attempt + 1, exc)
                time.sleep(self._retry_delays_s[attempt])

    def _chunk(self, job_id: str, chunk: int) -> None:
        with log_context(job_id=job_id):
            self._run_chunk(job_id, chunk)

    def _run_chunk(self, job_id: str, chunk: int) -> None:
        try:
            reaudit_chunks.run_chunk(self.database, self.evaluator, job_id=job_id, chunk=chunk,
                                     retry=reaudit_chunks.RecordRetry(delays_s=self._retry_delays_s), queue=self)
        except Exception:   # the sweeper re-enqueues a chunk whose heartbeat stops
            logger.exception("re-audit %s chunk %d failed", job_id, chunk)


class EmbeddedWorker:
    """The in-process pool plus a thread that dispatches the outbox and sweeps stalled re-audit chunks.

    The app's lifespan starts one when `settings.redis_url` is None and stops it on shutdown."""

    def __init__(self, database: Database, evaluator_factory: Callable[[], scoring.Evaluator], *,
                 workers: int = 2, interval_s: float = 0.5, redeliver_after_s: float = 300.0,
                 chunk_stall_after_s: float = 300.0, stream_recovery_after_s: float = 300.0,
                 alerts: AlertSchedule | None = None, packs: StorePacks | None = None,
                 busy: Callable[[], bool] | None = None, max_lag_s: float = 0.0, busy_share: float = 1.0,
                 heartbeat_interval_s: float = 10.0) -> None:
        """`busy` (the API's live requests), `max_lag_s` and `busy_share`: scoring shares this process's CPU and
        GIL with the requests, so while they are in flight it is held back, and it catches up when they pause.
        It is dispatched at most once per max_lag_s, and the tasks then take at most `busy_share` of a CPU
        (each worker sleeps after a task in proportion to the CPU it took), so a dispatch is spread out instead
        of landing on the requests as one burst. A task that waited max_lag_s in the queue no longer sleeps:
        scoring then runs flat out, so its lag stays near twice max_lag_s however long the traffic lasts.
        Records stay in the outbox meanwhile, so nothing is lost; max_lag_s 0 dispatches every pass."""
        if not 0.0 < busy_share <= 1.0:
            raise ValueError(f"busy_share must be in (0, 1], got {busy_share}")
        self.busy = busy
        self.maintenance_interval_s = max(interval_s, 5.0)
        self.max_lag_s = max_lag_s
        self.busy_share = busy_share
        self._last_dispatch = time.monotonic()
        self.queue = InProcessTaskQueue(database, evaluator_factory, workers=workers, pace=self._pace)
        self.alerts = alerts
        self.packs = packs
        self.database = database
        self.interval_s = interval_s
        self.redeliver_after_s = redeliver_after_s
        self.chunk_stall_after_s = chunk_stall_after_s
        self.stream_recovery_after_s = stream_recovery_after_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.worker_id = heartbeat.worker_id("embedded")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="auditor-embedded-dispatcher", daemon=True)

    @property
    def alive(self) -> bool:
        """Whether the dispatcher thread runs: without it nothing moves the outbox to the pool (`/ready`)."""
        return self._thread.is_alive() and not self._stop.is_set()

    def start(self) -> EmbeddedWorker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        # Let a pass in progress finish (its statements are bounded by the store's timeouts): the database is
        # disposed right after, and a pass still running then would open a new connection behind its back.
        if self._thread.ident is not None:   # started
            self._thread.join(timeout=60)
        self.queue.shutdown(wait=True)
        try:
            heartbeat.forget(self.database, self.worker_id)
        except Exception:   # the store may be gone at shutdown: the row then goes stale instead
            logger.warning("could not remove the embedded worker's heartbeat", exc_info=True)

    def run_once(self, *, maintenance: bool = True) -> None:
        if self._may_dispatch():
            dispatch_once(self.database, self.queue.enqueue_score, redeliver_after_s=self.redeliver_after_s)
        if self.packs is not None:   # the rule-pack file watch runs even while nothing is being judged
            self.packs.refresh()
        if not maintenance:
            return
        # Queued-but-never-started chunks live in this process's memory: only a restart loses them,
        # and then their heartbeat is as stale as their enqueue time, so one threshold serves both.
        reaudit.requeue_stalled(self.database, self.queue, stall_after_s=self.chunk_stall_after_s,
                                queued_after_s=self.chunk_stall_after_s * 4)
        recover_interrupted_streams(self.database, idle_for_s=self.stream_recovery_after_s)
        if self.alerts is not None:
            self.alerts.run(self.database)

    def _pace(self, cpu_s: float, waited_s: float) -> None:
        """After a task: while requests run and scoring is not behind, sleep so the workers together take
        at most busy_share of a CPU (the stop event ends the sleep at shutdown)."""
        if self.busy_share >= 1.0 or self.busy is None or not self.busy() or waited_s >= self.max_lag_s:
            return
        self._stop.wait(min(cpu_s * (self.queue.workers / self.busy_share - 1.0), _MAX_PACE_S))

    def _may_dispatch(self) -> bool:
        now = time.monotonic()
        if self.busy is not None and self.busy() and now - self._last_dispatch < self.max_lag_s:
            return False
        self._last_dispatch = now
        return True

    def _beat(self) -> None:
        try:
            heartbeat.beat(self.database, self.worker_id, "embedded")
        except Exception:   # shows as a growing heartbeat age; the next beat retries
            logger.warning("embedded worker heartbeat failed", exc_info=True)

    def _loop(self) -> None:
        last_maintenance = float("-inf")
        self._beat()
        last_beat = time.monotonic()
        while not self._stop.wait(self.interval_s):
            if time.monotonic() - last_beat >= self.heartbeat_interval_s:   # from this loop: it beats while it runs
                self._beat()
                last_beat = time.monotonic()
            # The sweeps' thresholds are minutes and alert rules are due every 30 s by default (a failed alert
            # is retried at the next sweep, so at least 5 s apart): looking every pass would only take SQLite's
            # writer lock (and the GIL) from requests every half second.
            maintenance = time.monotonic() - last_maintenance >= self.maintenance_interval_s
            last_maintenance = time.monotonic() if maintenance else last_maintenance
            try:
                self.run_once(maintenance=maintenance)
            except Exception:
                logger.exception("embedded outbox dispatch failed")
