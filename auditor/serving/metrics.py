"""Prometheus metrics on a per-app registry (not the global one, so tests can build many apps).

The golden signals per intent (latency: TTFT, inter-token latency, end to end, engine queue time; traffic:
requests and tokens in and out; errors by kind; saturation: the engine core's KV usage, queue depth per
priority class and preemptions), what the gate and validators did (gate actions, claim verdicts, FER), and
cost (`auditor.serving.cost`). `deploy/grafana/auditor-dashboard.json` charts exactly these names, and a test
checks that every name it queries is exported.

Label values come from a bounded set: X-Intent is free-form, so only the configured intents get their own
label (any other reads "other"); tenants and models are labelled first come, first served, up to a cap.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from auditor.serving.cost import Usage

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
_FER_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

OTHER = "other"     # the label of any value outside the bounded set
NO_INTENT = "none"  # a request without X-Intent

# Engine stats that are maps: one gauge family each, keyed by this label.
_MAP_STATS = {"num_requests_waiting_by_priority": "priority", "num_requests_running_by_priority": "priority",
              "finish_reasons": "reason", "kg_constraint_views": "domain", "kg_constraint_view_bytes": "domain",
              "kg_constraint_memo_bytes": "domain", "kg_constraint_budget_bytes": "domain"}


class BoundedLabel:
    """Label values for a free-form string: the allowed values pass, the first `cap` others seen pass too (when a
    cap is given), everything else reads "other". Keeps a scrape's series count bounded whatever clients send."""

    def __init__(self, allowed: Iterable[str] = (), *, cap: int = 0, missing: str = NO_INTENT) -> None:
        self._seen = set(allowed)
        self._cap = len(self._seen) + cap
        self._missing = missing
        self._lock = threading.Lock()

    def __call__(self, value: str | None) -> str:
        if value is None or value == "":
            return self._missing
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) < self._cap and value != OTHER:
                self._seen.add(value)
                return value
        return OTHER


@dataclass(slots=True)
class RequestObservation:
    """What one finished (or failed) inference request contributes to the metrics."""

    endpoint: str
    status: str
    intent: str | None
    tenant: str
    model: str | None
    e2e_s: float
    ttft_s: float | None
    queue_s: float | None
    token_gaps: list[float] = field(default_factory=list)
    decisions: list[tuple[str, str]] = field(default_factory=list)   # (stage, action) of every gate decision
    gate_action: str = "allow"
    claim_counts: dict[str, int] = field(default_factory=dict)
    fer: float | None = None
    usage: Usage | None = None


class _EngineStatsCollector(Collector):
    """Reads `engine.stats()` at scrape time: each number as a gauge `auditor_engine_<name>`, each map of
    numbers (queue depth per priority class, finish reasons) as a gauge family with one label."""

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
            elif isinstance(value, dict) and name in _MAP_STATS:
                family = GaugeMetricFamily(f"auditor_engine_{name}", f"engine stat {name}", labels=[_MAP_STATS[name]])
                for key, number in sorted(value.items(), key=lambda item: str(item[0])):
                    if isinstance(number, int | float) and not isinstance(number, bool):
                        family.add_metric([str(key)], float(number))
                yield family


class _TenantView:
    """A registry as one tenant may read it: series labelled with another tenant (or "other", which sums other
    tenants, or none) left out; series without a tenant label kept."""

    def __init__(self, registry: CollectorRegistry, tenant: str) -> None:
        self._registry, self._tenant = registry, tenant

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if not any("tenant" in sample.labels for sample in family.samples):
                yield family
                continue
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [s for s in family.samples if s.labels.get("tenant", self._tenant) == self._tenant]
            yield kept


class ServiceMetrics:
    def __init__(self, *, intents: Iterable[str] = (), max_tenants: int = 100, max_models: int = 20) -> None:
        self.registry = CollectorRegistry()
        self.intent_label = BoundedLabel(intents)
        self.tenant_label = BoundedLabel(cap=max_tenants, missing="")
        self.model_label = BoundedLabel(cap=max_models, missing="")
        self._engine_collector: _EngineStatsCollector | None = None
        registry = self.registry
        # traffic and outcomes
        self.requests = Counter("auditor_requests", "Inference requests by endpoint and outcome status",
                                ["endpoint", "status"], registry=registry)
        self.prompt_tokens = Counter("auditor_prompt_tokens", "Prompt tokens the engine took in, by intent",
                                     ["intent"], registry=registry)
        self.completion_tokens = Counter("auditor_completion_tokens", "Tokens the engine generated, by intent",
                                         ["intent"], registry=registry)
        self.errors = Counter("auditor_errors", "Error answers and failed requests by kind (the OpenAI error code, "
                              "or client_disconnected) and HTTP status", ["kind", "status"], registry=registry)
        # latency, per intent
        self.ttft = Histogram("auditor_time_to_first_token_seconds", "Time to first released token, by intent",
                              ["intent"], buckets=_LATENCY_BUCKETS, registry=registry)
        self.itl = Histogram("auditor_inter_token_latency_seconds", "Time between consecutive generated tokens in "
                             "the engine, by intent", ["intent"], buckets=_TOKEN_GAP_BUCKETS, registry=registry)
        self.e2e = Histogram("auditor_e2e_request_latency_seconds", "End-to-end request latency, by intent",
                             ["intent"], buckets=_LATENCY_BUCKETS, registry=registry)
        self.queue_time = Histogram("auditor_engine_queue_time_seconds", "Time a request waited in the engine's "
                                    "priority queue before its first step, by intent", ["intent"],
                                    buckets=_LATENCY_BUCKETS, registry=registry)
        # the gate and the validators
        self.gate_decisions = Counter("auditor_gate_decisions", "Safety-gate decisions (one request may have several)",
                                      ["stage", "action"], registry=registry)
        self.gate_actions = Counter("auditor_gate_actions", "Requests by the strongest gate action taken on them",
                                    ["intent", "action"], registry=registry)
        self.verdicts = Counter("auditor_claim_verdicts", "Inline claim verdicts", ["intent", "verdict"],
                                registry=registry)
        self.fer = Histogram("auditor_fer", "Factual error rate of each request with verified claims "
                             "(contradicted / (supported + contradicted))", ["intent"], buckets=_FER_BUCKETS,
                             registry=registry)
        # the audit store
        self.audit_write = Histogram("auditor_audit_write_seconds", "Time to commit one audit record",
                                     buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
                                     registry=registry)
        self.audit_failures = Counter("auditor_audit_write_failures", "Audit records that could not be committed",
                                      registry=registry)
        # cost (auditor.serving.cost)
        usage_labels = ["tenant", "intent", "model"]
        self.cost = Counter("auditor_cost", "What serving the requests cost under the price table, in its currency",
                            [*usage_labels, "currency"], registry=registry)
        self.effective_tokens = Counter("auditor_effective_tokens", "Tokens that delivered value (no template "
                                        "tokens, retries, failed or empty responses), by direction",
                                        [*usage_labels, "direction"], registry=registry)
        self.billed_tokens = Counter("auditor_billed_tokens", "Every token the engine processed for the requests, "
                                     "by direction", [*usage_labels, "direction"], registry=registry)
        self.excluded_requests = Counter("auditor_excluded_requests", "Requests whose tokens are not effective, "
                                         "by reason (failed, empty, retry)", [*usage_labels, "reason"],
                                         registry=registry)
        # upstream models (auditor.serving.upstream): label values are the configured model ids and a fixed set of
        # outcomes (ok, cancelled, or the UpstreamError code), so the series stay bounded
        self.upstream_requests = Counter("auditor_upstream_requests", "Requests to upstream models by outcome "
                                         "(ok, cancelled, or the upstream error code)", ["upstream", "status"],
                                         registry=registry)
        self.upstream_latency = Histogram("auditor_upstream_request_seconds", "Duration of each request to an "
                                          "upstream model, to its last byte or failure", ["upstream"],
                                          buckets=_LATENCY_BUCKETS, registry=registry)

    def watch_engine(self, stats: Callable[[], dict[str, object]]) -> None:
        """Expose `stats()` at scrape time; a restarted lifespan replaces the previous engine's collector."""
        if self._engine_collector is not None:
            self.registry.unregister(self._engine_collector)
        self._engine_collector = _EngineStatsCollector(stats)
        self.registry.register(self._engine_collector)

    def observe_request(self, seen: RequestObservation) -> None:
        intent = self.intent_label(seen.intent)
        self.requests.labels(seen.endpoint, seen.status).inc()
        self.e2e.labels(intent).observe(seen.e2e_s)
        if seen.ttft_s is not None:
            self.ttft.labels(intent).observe(seen.ttft_s)
        if seen.queue_s is not None:
            self.queue_time.labels(intent).observe(seen.queue_s)
        itl = self.itl.labels(intent)
        for gap in seen.token_gaps:
            itl.observe(gap)
        for stage, action in seen.decisions:
            self.gate_decisions.labels(stage, action).inc()
        self.gate_actions.labels(intent, seen.gate_action).inc()
        for verdict, count in seen.claim_counts.items():
            if count:
                self.verdicts.labels(intent, verdict).inc(count)
        if seen.fer is not None:
            self.fer.labels(intent).observe(seen.fer)
        if seen.usage is not None:
            self._observe_usage(seen, intent, seen.usage)

    def _observe_usage(self, seen: RequestObservation, intent: str, usage: Usage) -> None:
        labels = (self.tenant_label(seen.tenant), intent, self.model_label(seen.model))
        self.prompt_tokens.labels(intent).inc(usage.prompt_tokens)
        self.completion_tokens.labels(intent).inc(usage.completion_tokens)
        self.billed_tokens.labels(*labels, "prompt").inc(usage.prompt_tokens)
        self.billed_tokens.labels(*labels, "completion").inc(usage.completion_tokens)
        self.effective_tokens.labels(*labels, "prompt").inc(usage.effective_prompt_tokens)
        self.effective_tokens.labels(*labels, "completion").inc(usage.effective_completion_tokens)
        if usage.excluded is not None:
            self.excluded_requests.labels(*labels, usage.excluded).inc()
        if usage.cost is not None and usage.currency is not None:
            self.cost.labels(*labels, usage.currency).inc(usage.cost)

    def observe_upstream(self, upstream: str, status: str, seconds: float) -> None:
        self.upstream_requests.labels(upstream, status).inc()
        self.upstream_latency.labels(upstream).observe(seconds)

    def count_error(self, kind: str | None, status: int) -> None:
        self.errors.labels(kind or f"http_{status}", str(status)).inc()

    def render(self, *, tenant: str | None = None) -> bytes:
        """Prometheus text: every series, or (`tenant` given) only the series of that tenant among those with a
        tenant label, so a tenant's reader never sees another tenant's usage and cost."""
        return generate_latest(self.registry if tenant is None else _TenantView(self.registry, tenant))
