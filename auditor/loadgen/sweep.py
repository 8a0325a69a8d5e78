"""`loadgen --sweep`: the load at several rates, on several server configurations (KG constraint on/off,
the engine's `max_num_seqs`), each configuration on a server of its own started for it (`auditor.loadgen.server`)
or, with --url, the rates alone against a running server. One CSV row per (configuration, rate, intent) and
one per (configuration, rate) for all intents together."""

from __future__ import annotations

import asyncio
import csv
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from auditor.loadgen.records import RecordsUnavailable, fetch_records, quality
from auditor.loadgen.report import ALL, PERCENTILES, attach_quality, summarise
from auditor.loadgen.run import LoadSpec, RunResult, run_load
from auditor.loadgen.workload import Prompt, Sla, plan

MAX_POINTS = 60   # configurations x rates: a sweep stays bounded in time


@dataclass(frozen=True, slots=True)
class ServerConfig:
    constraint: bool | None = None       # None: the server's own setting (a running server)
    max_num_seqs: int | None = None

    @property
    def label(self) -> str:
        parts = []
        if self.constraint is not None:
            parts.append(f"constraint {'on' if self.constraint else 'off'}")
        if self.max_num_seqs is not None:
            parts.append(f"max_num_seqs {self.max_num_seqs}")
        return ", ".join(parts) or "as running"

    def env(self) -> dict[str, str]:
        env = {}
        if self.constraint is not None:
            env["AUDITOR_KG_CONSTRAINT"] = "true" if self.constraint else "false"
        if self.max_num_seqs is not None:
            env["AUDITOR_ENGINE_MAX_NUM_SEQS"] = str(self.max_num_seqs)
        return env


@dataclass(slots=True)
class Workload:
    mix: dict[str, float]
    prompts: dict[str, list[Prompt]]
    slas: list[Sla]
    audit_key: str | None = None


@dataclass(slots=True)
class Point:
    """One measured (configuration, rate)."""

    config: ServerConfig
    rate: float
    summary: dict[str, Any]
    load_average: tuple[float, float, float]


async def measure(spec: LoadSpec, workload: Workload, *, tag: str, on_result: Callable | None = None) -> dict[str, Any]:
    """One run: the load, its per-intent summary, and the hallucination rates from its records."""
    requests = plan(workload.mix, workload.prompts, seed=spec.seed, tag=tag)
    run = await run_load(spec, requests, on_result=on_result)
    summary = summarise(run, workload.slas, list(workload.mix))
    await _add_quality(spec, workload, run, summary)
    return summary


async def _add_quality(spec: LoadSpec, workload: Workload, run: RunResult, summary: dict[str, Any]) -> None:
    ids = [r.audit_id for r in run.results if r.audit_id]
    try:
        records = await fetch_records(spec.base_url, ids, since_wall=run.started_wall,
                                      api_key=workload.audit_key or spec.api_key)
    except RecordsUnavailable as exc:
        summary["records_unavailable"] = str(exc)
        return
    attach_quality(summary, quality(records))


async def warm_up(spec: LoadSpec, workload: Workload, *, tag: str, per_intent: int = 2) -> None:
    """A few requests of each intent, closed loop, not measured: first-request costs stay out of the numbers."""
    count = max(1, per_intent * len(workload.mix))
    warm = replace(spec, rate=None, users=min(4, count), max_requests=count, duration_s=min(spec.duration_s, 120.0))
    await run_load(warm, plan(workload.mix, workload.prompts, seed=spec.seed + 1, tag=tag))


def run_sweep(configs: Iterable[ServerConfig], rates: list[float], base: LoadSpec, workload: Workload, *,
              start_server: Callable[[ServerConfig], Any] | None, on_point: Callable[[Point], None],
              on_result: Callable | None = None) -> list[Point]:
    """Every rate on every configuration. `start_server(config)` returns a context manager with `base_url`
    (None: use base.base_url as it is, for a sweep over rates only)."""
    points: list[Point] = []
    for c, config in enumerate(configs):
        server = start_server(config) if start_server is not None else None
        try:
            spec = replace(base, base_url=server.base_url) if server is not None else base
            asyncio.run(warm_up(spec, workload, tag=f"w{c}x"))
            for r, rate in enumerate(rates):
                summary = asyncio.run(measure(replace(spec, rate=rate, users=None), workload, tag=f"s{c}r{r}x",
                                              on_result=on_result))
                point = Point(config, rate, summary, os.getloadavg())
                points.append(point)
                on_point(point)
        finally:
            if server is not None:
                server.stop()
    return points


CSV_FIELDS = ["config", "constraint", "max_num_seqs", "rate", "intent", "requests", "ok", "req_s", "output_tok_s",
              "goodput_req_s", *[f"{m}_p{q}_ms" for m in ("ttft", "itl", "tpot", "e2e") for q in PERCENTILES],
              "records", "verified_claims", "fer", "checked_outputs", "violation_rate", "errors", "load_average_1m"]


def write_csv(points: list[Point], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for point in points:
            for intent, values in point.summary["intents"].items():
                writer.writerow({**values, "config": point.config.label, "constraint": _on_off(point.config.constraint),
                                 "max_num_seqs": point.config.max_num_seqs or "", "rate": point.rate, "intent": intent,
                                 "errors": json.dumps(values["errors"], sort_keys=True) if values["errors"] else "",
                                 "load_average_1m": round(point.load_average[0], 2)})


def _on_off(value: bool | None) -> str:
    return "" if value is None else "on" if value else "off"


def p99_table(points: list[Point], intents: list[str]) -> str:
    """Markdown: per configuration and rate, each intent's p99 TTFT and e2e, throughput, FER and violations."""
    header = ["configuration", "rate (req/s)", "achieved (req/s)",
              *[f"{intent} p99 TTFT / e2e (ms)" for intent in intents], "FER", "violation rate", "load avg"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for point in points:
        by_intent = point.summary["intents"]
        every = by_intent[ALL]
        cells = [point.config.label, f"{point.rate:g}", f"{every['req_s']:.2f}"]
        cells += [f"{_ms(by_intent[i]['ttft_p99_ms'])} / {_ms(by_intent[i]['e2e_p99_ms'])}" for i in intents]
        cells += [_rate(every.get("fer")), _rate(every.get("violation_rate")), f"{point.load_average[0]:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
