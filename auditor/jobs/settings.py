"""Settings of the scoring / re-audit machinery (env prefix AUDITOR_WORKER_), kept apart from
`auditor.jobs.worker` so the API and CLI can read them without importing Celery."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AUDITOR_WORKER_", extra="ignore")

    evaluator: str = "rules"                  # "rules" or "module:factory"
    warm_up: bool = True                      # load every domain's KG and pack when the worker starts
    queue: str = "auditor"
    dispatch_interval_s: float = 1.0          # 0: no dispatcher/sweeper thread in this worker
    dispatch_batch: int = 500
    heartbeat_interval_s: float = Field(10.0, gt=0)   # how often each worker writes its heartbeat row (/ready)
    embedded_max_lag_s: float = 10.0          # embedded default: scoring waits this long at most while requests run
    embedded_busy_share: float = Field(0.25, gt=0, le=1)   # ... and takes at most this share of a CPU meanwhile
    redeliver_after_s: float = 300.0          # outbox rows unacknowledged this long are published again
    chunk_stall_after_s: float = 300.0        # a started chunk with no heartbeat this long is re-enqueued
    chunk_queued_after_s: float = 3600.0      # an enqueued chunk never started this long is re-enqueued
    stream_recovery_after_s: float = 300.0    # a stream's committed segments idle this long, with no record: recovered
    visibility_timeout_s: int = 3600          # Redis: unacknowledged messages come back after this
    score_soft_time_limit_s: int = 60
    chunk_soft_time_limit_s: int = 600
    max_retries: int = 5
    retry_backoff_max_s: int = 60


def worker_settings() -> WorkerSettings:
    return WorkerSettings()
