"""Writes deploy/grafana/auditor-dashboard.json, the Grafana dashboard of the service's golden metrics.

    python scripts/grafana_dashboard.py            # rewrite the JSON
    python scripts/grafana_dashboard.py --check    # exit 1 when the JSON is not what this script writes

The panels are declared here, once, and their PromQL stays within the few shapes that
`scripts/render_dashboard.py` evaluates itself (a quantile of summed bucket rates, a summed rate, a ratio of
two summed rates, a summed gauge), so the docs' rendering draws the same queries Grafana runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "auditor-dashboard.json"
W = "[1m]"


def quantile(q: float, histogram: str, by: str = "intent") -> str:
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({histogram}_bucket{W})))"


def rate(counter: str, by: str, matcher: str = "") -> str:
    return f"sum by ({by}) (rate({counter}{matcher}{W}))"


def gauge(name: str, by: str | None = None) -> str:
    return f"sum by ({by}) ({name})" if by else name


# (row, [(title, unit, [(expr, legend)], description)])
ROWS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]], str]]]] = [
    ("Latency per intent", [
        ("TTFT p50 / p99", "s", [(quantile(0.5, "auditor_time_to_first_token_seconds"), "{{intent}} p50"),
                                 (quantile(0.99, "auditor_time_to_first_token_seconds"), "{{intent}} p99")],
         "Time to the first released token: the scheduler's intent priorities show here under load."),
        ("Inter-token latency p99", "s", [(quantile(0.99, "auditor_inter_token_latency_seconds"), "{{intent}}")],
         "Gap between consecutive generated tokens in the engine."),
        ("End-to-end latency p99", "s", [(quantile(0.99, "auditor_e2e_request_latency_seconds"), "{{intent}}")], ""),
        ("Engine queue time p99", "s", [(quantile(0.99, "auditor_engine_queue_time_seconds"), "{{intent}}")],
         "Wait in the engine's priority queue before the first step."),
    ]),
    ("Traffic and errors", [
        ("Requests by status", "reqps", [(rate("auditor_requests_total", "status"), "{{status}}")], ""),
        ("Tokens in and out", "short", [(rate("auditor_prompt_tokens_total", "intent"), "in {{intent}}"),
                                        (rate("auditor_completion_tokens_total", "intent"), "out {{intent}}")],
         "Tokens per second the engine took in and generated."),
        ("Errors by kind", "reqps", [(rate("auditor_errors_total", "kind, status"), "{{kind}} ({{status}})")],
         "OpenAI error codes and client disconnects."),
        ("Audit writes", "short", [(rate("auditor_audit_write_failures_total", "instance"), "failed commits/s"),
                                   (quantile(0.99, "auditor_audit_write_seconds", "instance"), "commit p99 (s)")],
         "A failed commit fails its request closed (503)."),
    ]),
    ("Hallucination and gate", [
        ("FER per intent", "percentunit",
         [(f"{rate('auditor_fer_sum', 'intent')} / {rate('auditor_fer_count', 'intent')}", "{{intent}}")],
         "Mean factual error rate of the responses with verified claims."),
        ("Claim verdicts", "short", [(rate("auditor_claim_verdicts_total", "verdict"), "{{verdict}}")], "Per second."),
        ("Gate actions", "reqps", [(rate("auditor_gate_actions_total", "action"), "{{action}}")],
         "Requests by the strongest gate action taken on them."),
    ]),
    ("Saturation", [
        ("KV cache usage", "percentunit", [(gauge("auditor_engine_kv_cache_usage_perc"), "KV usage")], ""),
        ("Queue depth per priority", "short",
         [(gauge("auditor_engine_num_requests_waiting_by_priority", "priority"), "waiting, class {{priority}}"),
          (gauge("auditor_engine_num_requests_running_by_priority", "priority"), "running, class {{priority}}")],
         "Priority class 0 is the most urgent (medical-diagnosis, fin-risk)."),
        ("Preemptions and core restarts", "short",
         [(gauge("auditor_engine_num_preemptions"), "preemptions (total)"),
          (gauge("auditor_engine_engine_core_restarts"), "engine core restarts (total)")], ""),
        ("KG-constraint caches", "bytes",
         [(gauge("auditor_engine_kg_constraint_view_bytes", "domain"), "views {{domain}}"),
          (gauge("auditor_engine_kg_constraint_memo_bytes", "domain"), "memos {{domain}}"),
          (gauge("auditor_engine_kg_constraint_budget_bytes", "domain"), "budget {{domain}}")],
         "What the engine core's allowed-set views and shared memos hold per domain (their own estimates), "
         "against their budget (AUDITOR_KG_CONSTRAINT_VIEW_MB and three memos of AUDITOR_KG_CONSTRAINT_MEMO_MB): "
         "they fill toward it as traffic reaches new decoding states, a climb in RSS that stops there."),
    ]),
    ("Upstreams", [
        ("Upstream requests by outcome", "reqps",
         [(rate("auditor_upstream_requests_total", "upstream, status"), "{{upstream}} {{status}}")],
         "ok, cancelled (closed early by the gate or the client), or the upstream error code "
         "(upstream_timeout, upstream_unreachable, upstream_error, ...)."),
        ("Upstream latency p50 / p99", "s",
         [(quantile(0.5, "auditor_upstream_request_seconds", "upstream"), "{{upstream}} p50"),
          (quantile(0.99, "auditor_upstream_request_seconds", "upstream"), "{{upstream}} p99")],
         "Each request to an upstream model, to its last byte or its failure."),
    ]),
    ("Scoring", [
        ("Outbox backlog", "short", [(gauge("auditor_outbox_depth"), "{{state}} ({{instance}})")],
         "Records whose scoring waits: not yet published to a worker, and published but not yet scored. "
         "Read from the store: every instance shows the same value."),
        ("Scoring lag", "s",
         [(gauge("auditor_outbox_oldest_age_seconds"), "oldest outbox row ({{instance}})"),
          (gauge("auditor_worker_heartbeat_age_seconds"), "newest {{kind}} worker heartbeat ({{instance}})")],
         "/ready turns degraded past AUDITOR_READY_MAX_OUTBOX_AGE_S (outbox) or, with Celery, "
         "AUDITOR_READY_MAX_HEARTBEAT_AGE_S (heartbeat); workers beat every AUDITOR_WORKER_HEARTBEAT_INTERVAL_S."),
        ("Re-audit progress", "short",
         [(gauge("auditor_reaudit_jobs_running"), "running jobs ({{instance}})"),
          (gauge("auditor_reaudit_chunks"), "chunks {{state}} ({{instance}})")],
         "Chunks of the running re-audit jobs: done against total enqueued."),
    ]),
    ("Cost", [
        ("Cost per intent", "currencyUSD", [(rate("auditor_cost_total", "intent"), "{{intent}}")],
         "Per second, under the price table (AUDITOR_PRICE_TABLE)."),
        ("Effective and billed tokens", "short",
         [(rate("auditor_effective_tokens_total", "direction"), "effective {{direction}}"),
          (rate("auditor_billed_tokens_total", "direction"), "billed {{direction}}")],
         "Effective: no template tokens, retries, failed or empty responses."),
        ("Excluded requests", "reqps", [(rate("auditor_excluded_requests_total", "reason"), "{{reason}}")], ""),
    ]),
]


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y, next_id = 0, 1
    for row_title, row_panels in ROWS:
        panels.append({"type": "row", "id": next_id, "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        next_id += 1
        y += 1
        width = 24 // len(row_panels)
        for k, (title, unit, targets, description) in enumerate(row_panels):
            panels.append({
                "type": "timeseries", "id": next_id, "title": title, "description": description,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": width, "x": k * width, "y": y},
                "fieldConfig": {"defaults": {"unit": unit, "custom": {"lineWidth": 1, "fillOpacity": 0}},
                                "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
                "targets": [{"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr,
                             "legendFormat": legend, "refId": chr(ord("A") + t)}
                            for t, (expr, legend) in enumerate(targets)],
            })
            next_id += 1
        y += 8
    return {
        "title": "Hallucination auditor: golden metrics", "uid": "auditor-golden", "version": 1, "schemaVersion": 39,
        "tags": ["auditor"], "timezone": "browser", "editable": True, "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus", "current": {}, "hide": 0}]},
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        sys.exit(0 if OUT.read_text() == render() else 1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    print(f"wrote {OUT}")
