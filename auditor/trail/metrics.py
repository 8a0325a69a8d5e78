"""Prometheus gauges over the current verdicts, per domain and model, computed at scrape time from the view:
what the trail currently believes about the last hour's outputs (imports by their own time), so re-audits
and reviews show up on the dashboards the same way they do in `GET /v1/trends`."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.schemas import RecordFilter
from auditor.trail.trends import window_by_group

logger = logging.getLogger("auditor.metrics")
WINDOW = timedelta(hours=1)
_LABELS = ["domain", "model", "window"]
_GAUGES = {
    "records": "Records produced in the window",
    "fer": "Pooled factual error rate of the current verdicts (contradicted / verified claims)",
    "mean_fer": "Mean per-record factual error rate of the current verdicts",
    "contradicted_rate": "Share of records with a contradicted claim",
    "block_rate": "Share of records blocked or refused (by the gate or by their current verdicts)",
    "critical": "Records whose contradicted claims broke a critical rule",
}


class CurrentVerdictCollector(Collector):
    def __init__(self, database: Database) -> None:
        self.database = database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            now = utcnow()
            with self.database.engine.connect() as conn:
                points = window_by_group(conn, RecordFilter(), since=now - WINDOW, until=now, group_by=["domain", "model"])
        except Exception:   # a scrape must not fail because the store is briefly away
            logger.exception("current-verdict metrics unavailable")
            return
        families = {name: GaugeMetricFamily(f"auditor_current_{name}", text, labels=_LABELS) for name, text in _GAUGES.items()}
        claims = GaugeMetricFamily("auditor_current_claims", "Claims of the current verdicts by verdict",
                                   labels=[*_LABELS, "verdict"])
        for point in points:
            labels = [point["domain"] or "", point["model"] or "", "1h"]
            for name, family in families.items():
                if point[name] is not None:
                    family.add_metric(labels, float(point[name]))
            for verdict, count in point["claims"].items():
                claims.add_metric([*labels, verdict], float(count))
        yield from families.values()
        yield claims
