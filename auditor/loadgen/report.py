"""Per-intent summaries of a run: latency percentiles (TTFT, ITL, TPOT, e2e), throughput, errors by kind, the
SLAs and goodput under them (after vLLM's definition: requests per second that met every objective of their
intent), and, from the audit records, FER and the entity-violation rate."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from auditor.loadgen.client import Result
from auditor.loadgen.run import RunResult
from auditor.loadgen.workload import Sla

PERCENTILES = (50, 90, 99)
ALL = "all"


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def meets(result: Result, slas: Iterable[Sla]) -> bool:
    """A good request: answered in full, and its own value of each objective's metric at or under the threshold."""
    if not result.ok:
        return False
    for sla in slas:
        if sla.applies_to(result.intent):
            value = result.value(sla.metric)
            if value is None or value > sla.threshold_s:
                return False
    return True


def summarise(run: RunResult, slas: Sequence[Sla], intents: Sequence[str]) -> dict[str, Any]:
    """{"intents": {intent: summary, ..., "all": summary}, "slas": [...], run-level keys}."""
    by_intent = {intent: [r for r in run.results if r.intent == intent] for intent in intents}
    summaries = {intent: _summary(results, run.elapsed_s, [s for s in slas if s.applies_to(intent)])
                 for intent, results in by_intent.items()}
    summaries[ALL] = _summary([r for r in run.results if r.index >= 0], run.elapsed_s, slas)
    return {"elapsed_s": round(run.elapsed_s, 3), "delayed_arrivals": run.delayed, "cancelled": run.cancelled,
            "intents": summaries, "slas": [_sla_result(sla, by_intent) for sla in slas]}


def _summary(results: list[Result], elapsed_s: float, slas: Sequence[Sla]) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    summary: dict[str, Any] = {
        "requests": len(results), "ok": len(ok),
        "errors": dict(Counter(r.error or f"http_{r.status}" for r in results if not r.ok)),
        "req_s": round(len(ok) / elapsed_s, 3) if elapsed_s else 0.0,
        "output_tok_s": round(sum(r.completion_tokens for r in ok) / elapsed_s, 1) if elapsed_s else 0.0,
        "completion_tokens": sum(r.completion_tokens for r in ok),
    }
    series = {"ttft": [r.ttft_s for r in ok if r.ttft_s is not None],
              "itl": [gap for r in ok for gap in r.chunk_gaps],
              "tpot": [t for r in ok if (t := r.tpot_s) is not None],
              "e2e": [r.e2e_s for r in ok]}
    for metric, values in series.items():
        for q in PERCENTILES:
            value = percentile(values, q)
            summary[f"{metric}_p{q}_ms"] = None if value is None else round(value * 1000, 1)
    good = sum(1 for r in results if meets(r, slas))
    summary["goodput_req_s"] = round(good / elapsed_s, 3) if elapsed_s else 0.0
    summary["good"] = good
    return summary


def _sla_result(sla: Sla, by_intent: dict[str, list[Result]]) -> dict[str, Any]:
    results = [r for intent, rs in by_intent.items() if sla.applies_to(intent) for r in rs if r.ok]
    if sla.metric == "itl":
        values = [gap for r in results for gap in r.chunk_gaps]
    else:
        values = [v for r in results if (v := r.value(sla.metric)) is not None]
    observed = percentile(values, sla.percentile)
    return {"sla": sla.label, "intent": sla.intent, "metric": sla.metric, "percentile": sla.percentile,
            "threshold_ms": round(sla.threshold_s * 1000, 3),
            "observed_ms": None if observed is None else round(observed * 1000, 1),
            "met": observed is not None and observed <= sla.threshold_s, "samples": len(values)}


def attach_quality(summary: dict[str, Any], quality: dict[str, dict[str, Any]]) -> None:
    """Add the records' FER and entity-violation rate to each intent's summary (see `auditor.loadgen.records`)."""
    for intent, values in quality.items():
        if intent in summary["intents"]:
            summary["intents"][intent].update(values)
