"""Prometheus gauges of the scoring machinery, read from the store at scrape time: the outbox backlog and its
oldest row's age, the newest worker heartbeat's age per kind, and the progress of running re-audit jobs.

Every API process reads the same store, so every instance exports the same values: chart them unaggregated
(or with max), not summed."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from auditor.jobs.heartbeat import age_s
from auditor.jobs.models import ReauditChunk, ReauditJob, WorkerHeartbeat
from auditor.jobs.outbox import backlog, oldest_pending_age_s
from auditor.store.database import Database

logger = logging.getLogger("auditor.metrics")


class ScoringGauges(Collector):
    def __init__(self, database: Database) -> None:
        self.database = database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            with self.database.session() as session:
                depth = backlog(session)
                oldest = oldest_pending_age_s(session)
                beats = session.execute(select(WorkerHeartbeat.kind, func.max(WorkerHeartbeat.beat_at))
                                        .group_by(WorkerHeartbeat.kind)).all()
                running = session.execute(select(func.count()).select_from(ReauditJob)
                                          .where(ReauditJob.status == "running")).scalar_one()
                chunks_total, chunks_done = session.execute(
                    select(func.count(), func.count(ReauditChunk.finished_at))
                    .join(ReauditJob, ReauditJob.id == ReauditChunk.job_id)
                    .where(ReauditJob.status == "running")).one()
        except Exception:   # a scrape must not fail because the store is briefly away (/ready says so)
            logger.warning("scoring metrics unavailable", exc_info=True)
            return
        outbox = GaugeMetricFamily("auditor_outbox_depth", "Scoring work waiting in the outbox: not yet "
                                   "published, and published but not yet scored", labels=["state"])
        for state, count in sorted(depth.items()):
            outbox.add_metric([state], float(count))
        yield outbox
        yield GaugeMetricFamily("auditor_outbox_oldest_age_seconds", "Age of the oldest outbox row not yet scored "
                                "(0: none waits)", value=oldest)
        heartbeat = GaugeMetricFamily("auditor_worker_heartbeat_age_seconds", "Seconds since the newest heartbeat of "
                                      "a scoring worker, by kind (celery, embedded); absent: none ever beat",
                                      labels=["kind"])
        for kind, newest in sorted(beats):
            heartbeat.add_metric([kind], age_s(newest))
        yield heartbeat
        yield GaugeMetricFamily("auditor_reaudit_jobs_running", "Re-audit jobs running", value=float(running))
        chunks = GaugeMetricFamily("auditor_reaudit_chunks", "Chunks of the running re-audit jobs, by state "
                                   "(done, total)", labels=["state"])
        chunks.add_metric(["done"], float(chunks_done))
        chunks.add_metric(["total"], float(chunks_total))
        yield chunks
