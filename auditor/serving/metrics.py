"""Prometheus metrics on a per-app registry (not the global one, so tests can build many apps)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _EngineStatsCollector(Collector):
    """Reads `engine.stats()` at scrape time and exposes each numeric value as a gauge."""

    def __init__(self, stats: Callable[[], dict[str, object]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            stats = self._stats()
        except Exception:  # a scrape must not fail because the engine is shutting down
            return
        for name, value in sorted(stats.items()):
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield GaugeMetricFamily(f"auditor_engine_{name}", f"engine stat {name}", value=float(value))


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._engine_collector: _EngineStatsCollector | None = None
        self.requests = Counter("auditor_requests", "Inference requests by endpoint and outcome status",
                                ["endpoint", "status"], registry=self.registry)
        self.gate_decisions = Counter("auditor_gate_decisions", "Safety-gate decisions",
                                      ["stage", "action"], registry=self.registry)
        self.verdicts = Counter("auditor_claim_verdicts", "Inline claim verdicts", ["verdict"], registry=self.registry)
        self.ttft = Histogram("auditor_time_to_first_token_seconds", "Time to first released token",
                              buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.e2e = Histogram("auditor_e2e_request_latency_seconds", "End-to-end request latency",
                             buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.audit_write = Histogram("auditor_audit_write_seconds", "Time to commit one audit record",
                                     buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
                                     registry=self.registry)
        self.audit_failures = Counter("auditor_audit_write_failures", "Audit records that could not be committed",
                                      registry=self.registry)

    def watch_engine(self, stats: Callable[[], dict[str, object]]) -> None:
        """Expose `stats()` at scrape time; a restarted lifespan replaces the previous engine's collector."""
        if self._engine_collector is not None:
            self.registry.unregister(self._engine_collector)
        self._engine_collector = _EngineStatsCollector(stats)
        self.registry.register(self._engine_collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)
