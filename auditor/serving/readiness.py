"""What `/ready` says: whether this process can answer, and, when it can, whether anything behind it lags.

Two levels, for two readers:
- unavailable (HTTP 503, `ready: false`): answering is impossible here: not started, the audit store
  unreachable (every answer commits a record first: fail closed), or the engine core restarting. A load
  balancer should stop routing to this instance.
- degraded (HTTP 200, `ready: true`, `status: "degraded"`, `reasons`): answers still flow, but scoring has no
  live worker, the outbox's oldest row waits longer than `AUDITOR_READY_MAX_OUTBOX_AGE_S`, Redis (when
  configured) does not answer, or an upstream's last `AUDITOR_READY_UPSTREAM_FAILURES` requests all failed.
  Taking the instance out would not help (every instance shares the store, the workers and the upstreams):
  alert on it instead.

Costs per call: one connection for `SELECT 1` and three indexed reads; Redis is pinged at most every
`AUDITOR_READY_CACHE_S`; upstream health comes from the requests made anyway (no probe).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from auditor.jobs.heartbeat import newest_beat_age_s
from auditor.jobs.outbox import backlog, oldest_pending_age_s


@dataclass(slots=True)
class Readiness:
    body: dict[str, Any]
    reasons: list[str] = field(default_factory=list)

    @property
    def status_code(self) -> int:
        return 200 if self.body["ready"] else 503


def assess(services: Any) -> Readiness:
    settings = services.settings
    reasons: list[str] = []
    store = _store(services.database)
    engine = "ok" if getattr(services.engine, "available", True) else "restarting"
    ready = services.ready and store == "ok" and engine == "ok"
    if store != "ok":
        reasons.append(f"audit store {store}")
    if engine != "ok":
        reasons.append(f"engine {engine}")
    body: dict[str, Any] = {"ready": ready, "warm": services.warm, "audit_store": store, "engine": engine,
                            "model": services.engine.model_id if services.engine is not None else None}
    if store == "ok":
        body["scoring"], body["outbox"] = _scoring(services, reasons)
    if settings.redis_url is not None:
        body["redis"] = _redis_probe(settings.redis_url, settings.ready_cache_s)
        if body["redis"] != "ok":
            reasons.append(f"redis {body['redis']}")
    upstreams = _upstreams(services, settings.ready_upstream_failures, reasons)
    if upstreams:
        body["upstreams"] = upstreams
    body["status"] = "unavailable" if not ready else "degraded" if reasons else "ok"
    body["reasons"] = reasons
    return Readiness(body, reasons)


def _store(database: Any) -> str:
    try:
        with database.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return "ok"
    except SQLAlchemyError as exc:
        return f"unavailable ({exc.__class__.__name__})"


def _scoring(services: Any, reasons: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    settings = services.settings
    embedded = getattr(services, "scoring_worker", None)
    try:
        with services.database.session() as session:
            depth = backlog(session)
            oldest = oldest_pending_age_s(session)
            beat_age = newest_beat_age_s(session, None if embedded is not None else "celery")
    except SQLAlchemyError as exc:   # SELECT 1 passed a moment ago: report it, keep the level it set
        reasons.append(f"scoring state unreadable ({exc.__class__.__name__})")
        return {"worker": "unknown"}, {}
    scoring: dict[str, Any] = {"mode": "celery" if embedded is None else "embedded",
                               "heartbeat_age_s": None if beat_age is None else round(beat_age, 1)}
    if embedded is not None:   # in this process: its dispatcher thread is the truth, the heartbeat only a trace
        scoring["worker"] = "alive" if embedded.alive else "stopped"
        if not embedded.alive:
            reasons.append("scoring: the embedded worker is not running")
    elif beat_age is None:
        scoring["worker"] = "none"
        reasons.append("scoring: no Celery worker has sent a heartbeat")
    elif beat_age > settings.ready_max_heartbeat_age_s:
        scoring["worker"] = "stale"
        reasons.append(f"scoring: newest Celery worker heartbeat is {beat_age:.0f}s old "
                       f"(limit {settings.ready_max_heartbeat_age_s:g}s)")
    else:
        scoring["worker"] = "alive"
    outbox = {**depth, "oldest_age_s": round(oldest, 1)}
    if oldest > settings.ready_max_outbox_age_s:
        reasons.append(f"outbox: oldest unscored record waits {oldest:.0f}s "
                       f"(limit {settings.ready_max_outbox_age_s:g}s)")
    return scoring, outbox


def _upstreams(services: Any, failures: int, reasons: list[str]) -> dict[str, Any]:
    models = getattr(services, "models", None)
    found: dict[str, Any] = {}
    for backend in models.upstreams() if models is not None else ():
        health = getattr(backend, "health", None)
        if health is None:
            continue
        view = health.view()
        failing = view.consecutive_failures >= failures
        found[backend.model_id] = {"status": "failing" if failing else "ok",
                                   "consecutive_failures": view.consecutive_failures,
                                   "last_failure": view.last_failure}
        if failing:
            reasons.append(f"upstream {backend.model_id}: last {view.consecutive_failures} requests failed "
                           f"({view.last_failure})")
    return found


class _RedisProbe:
    """PING, at most once per `ttl_s` per URL (the answer in between comes from the last one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}
        self._last: dict[str, tuple[float, str]] = {}

    def __call__(self, url: str, ttl_s: float) -> str:
        with self._lock:
            seen = self._last.get(url)
            if seen is not None and time.monotonic() - seen[0] < ttl_s:
                return seen[1]
            client = self._clients.get(url)
            if client is None:
                import redis  # only deployments with a broker have it configured
                client = self._clients[url] = redis.Redis.from_url(url, socket_connect_timeout=0.5,
                                                                   socket_timeout=0.5)
        try:
            client.ping()
            answer = "ok"
        except Exception as exc:   # any failure to answer is "unavailable"; its class says which
            answer = f"unavailable ({exc.__class__.__name__})"
        with self._lock:
            self._last[url] = (time.monotonic(), answer)
        return answer


_redis_probe = _RedisProbe()
