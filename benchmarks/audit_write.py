"""Audit-path latency and throughput: what committing one hash-chained audit record adds to a request.

Measures, on SQLite (WAL, file on local disk) and on PostgreSQL (when AUDITOR_TEST_POSTGRES_URL or
--postgres-url is given), the time of the audit path as the service runs it after generation:
PII redaction of the stored copy + `append_record` (canonical digest, chain-head lock, record + outbox
insert, checkpoint every 100, commit). Rounds alternate between backends (interleaved) and the
percentiles pool every round; records_per_s is the median over rounds of 8 concurrent writer threads.

It also measures what streaming durability costs: `segment_ms_*` is one streamed sentence committed as a
`stream_segments` row (PII-redacted, one INSERT and its commit) before it may be flushed to the client.

    python -m benchmarks.audit_write --json [--postgres-url URL] [--rounds 5] [--requests 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from auditor.gate.pii import redact_pii
from auditor.store.database import ChainKey, Database
from auditor.store.scratch import scratch_schema
from auditor.trail.records import NewRecord, append_record
from auditor.trail.segments import StreamOpening, commit_segment, open_stream, release_segments

KEY = b"benchmark-hmac-key-not-secret-0123456789"
CHECKPOINT_INTERVAL = 100
CONCURRENCY = 8
PROMPT = ("A 64-year-old patient with type 2 diabetes and an eGFR of 38 asks whether metformin 1000 mg twice daily "
          "is still appropriate, and whether ibuprofen is safe alongside lisinopril. Contact: jane@example.org. ") * 2
OUTPUT = ("Metformin is indicated for type 2 diabetes. With an eGFR between 30 and 45 the label advises against "
          "starting it and suggests assessing the benefit of continuing at a reduced dose. The maximum daily dose is "
          "2550 mg. NSAIDs such as ibuprofen can reduce the antihypertensive effect of lisinopril and may worsen "
          "renal function. ") * 2


REDACTED_PROMPT = redact_pii(PROMPT)[0]


def _record(i: int) -> NewRecord:
    """A record shaped like a real medical request: redacted text, three claims with evidence, decisions.

    The prompt was redacted by the input gate already; redacting the output for storage is audit-path work."""
    stored_output = redact_pii(OUTPUT)[0]
    claims = [{"text": f"claim {k}", "span": [k * 10, k * 10 + 9], "kind": "dose", "verdict": "supported",
               "confidence": 0.9, "rule_ids": ["med.dose.max_daily"],
               "evidence": [{"kind": "kg_fact", "description": "Metformin max_daily_dose 2550 mg",
                             "source": "FDA label", "locator": "section 2", "as_of": "2026-12-02"}]} for k in range(3)]
    return NewRecord(
        tenant="bench", status="completed", key_id="k1", request_id=f"req-{i}", endpoint="chat",
        intent="medical-diagnosis", domain="medical", model_id="bench-model", checkpoint_hash="c" * 16,
        sampling_params={"temperature": 0.0, "top_p": 1.0, "max_tokens": 256, "seed": i}, kg_version="k" * 16,
        rule_pack_hash="r" * 64, content_mode="redacted", prompt=REDACTED_PROMPT, output=stored_output,
        delivered_output=stored_output, claims=claims, prompt_tokens=120, completion_tokens=180,
        timings={"ttft_s": 0.05, "engine_e2e_s": 1.2}, logprob_summary={"tokens": 180, "mean_logprob": -0.7},
        kg_events=[{"processor": "kg_linking", "kind": "constrained", "data": {"anchor_ids": ["drug:DB00331"]}}],
        gate_decisions=[{"stage": "input", "rule_id": "pii.input", "action": "redact", "reason": "1 PII span"}],
        gate_action="redact", n_supported=3, fer=0.0, finish_reason="stop",
    )


def _audit_path(database: Database, i: int) -> None:
    append_record(database, _record(i))


@contextmanager
def sqlite_database(synchronous: str) -> Iterator[Database]:
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as folder:
        database = Database(f"sqlite:///{Path(folder) / 'audit.db'}", sqlite_synchronous=synchronous,
                            chain_key=ChainKey(KEY, CHECKPOINT_INTERVAL))
        database.upgrade()
        yield database
        database.dispose()


@contextmanager
def postgres_database(url: str) -> Iterator[Database]:
    with scratch_schema(url, prefix="audit_bench") as schema_url:
        database = Database(schema_url, chain_key=ChainKey(KEY, CHECKPOINT_INTERVAL))
        try:
            database.upgrade()
            yield database
        finally:
            database.dispose()


def sequential_latencies_ms(database: Database, requests: int, offset: int) -> list[float]:
    latencies = []
    for i in range(requests):
        start = time.perf_counter()
        _audit_path(database, offset + i)
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


SENTENCE = "With an eGFR between 30 and 45 the label advises against starting metformin. "


def segment_latencies_ms(database: Database, sentences: int, offset: int) -> list[float]:
    """Per-sentence cost of the streaming guarantee: each released sentence committed before it is flushed."""
    opening = StreamOpening(f"bench-stream-{offset}", "bench", "redacted", {"endpoint": "chat"})
    open_stream(database, opening, timeout_s=5.0)
    latencies = []
    for index in range(1, sentences + 1):
        start = time.perf_counter()
        commit_segment(database, opening, index, redact_pii(SENTENCE)[0], timeout_s=5.0)
        latencies.append((time.perf_counter() - start) * 1000)
    with database.write_connection() as conn:
        release_segments(conn, opening.audit_id)
    return latencies


def concurrent_rate(database: Database, requests: int, offset: int) -> float:
    per_client = max(1, requests // CONCURRENCY)

    def client(c: int) -> None:
        for i in range(per_client):
            _audit_path(database, offset + c * per_client + i)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        list(pool.map(client, range(CONCURRENCY)))
    return per_client * CONCURRENCY / (time.perf_counter() - start)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(rounds: int, requests: int, postgres_url: str | None) -> dict[str, Any]:
    # "sqlite" is the service default (synchronous=FULL: every commit fsynced); "sqlite_normal" trades the
    # last commits on power loss (never corruption) for speed, see Settings.sqlite_synchronous.
    backends: dict[str, Callable[[], Any]] = {"sqlite": lambda: sqlite_database("FULL"),
                                              "sqlite_normal": lambda: sqlite_database("NORMAL")}
    if postgres_url:
        backends["postgres"] = lambda: postgres_database(postgres_url)
    latencies: dict[str, list[float]] = {name: [] for name in backends}
    segments: dict[str, list[float]] = {name: [] for name in backends}
    rates: dict[str, list[float]] = {name: [] for name in backends}
    with _opened(backends) as databases:
        for database in databases.values():  # warm-up: connections, statement caches
            sequential_latencies_ms(database, 20, offset=0)
        for r in range(rounds):
            for name, database in databases.items():  # interleaved: each round visits every backend
                offset = (r + 1) * 10 * requests
                latencies[name] += sequential_latencies_ms(database, requests, offset)
                segments[name] += segment_latencies_ms(database, requests, offset)
                rates[name].append(concurrent_rate(database, requests, offset + requests))
        verified = {name: _verify(db) for name, db in databases.items()}
    result: dict[str, Any] = {"rounds": rounds, "requests_per_round": requests, "concurrency": CONCURRENCY,
                              "checkpoint_interval": CHECKPOINT_INTERVAL, "load_average_1m": round(os.getloadavg()[0], 2)}
    for name in backends:
        result[f"{name}_audit_ms_p50"] = round(statistics.median(latencies[name]), 3)
        result[f"{name}_audit_ms_p99"] = round(percentile(latencies[name], 0.99), 3)
        result[f"{name}_segment_ms_p50"] = round(statistics.median(segments[name]), 3)
        result[f"{name}_segment_ms_p99"] = round(percentile(segments[name], 0.99), 3)
        result[f"{name}_records_per_s"] = round(statistics.median(rates[name]), 1)
        result[f"{name}_chain_verifies"] = verified[name]
    result["target_sqlite_audit_ms_p50"] = 5.0
    result["postgres"] = "measured" if postgres_url else "skipped (set AUDITOR_TEST_POSTGRES_URL or --postgres-url)"
    return result


@contextmanager
def _opened(backends: dict[str, Callable[[], Any]]) -> Iterator[dict[str, Database]]:
    from contextlib import ExitStack

    with ExitStack() as stack:
        yield {name: stack.enter_context(factory()) for name, factory in backends.items()}


def _verify(database: Database) -> bool:
    from auditor.trail.ledgers import verify_trail

    with database.snapshot() as conn:
        return verify_trail(conn, KEY).ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200, help="records per backend per round")
    parser.add_argument("--postgres-url", default=os.environ.get("AUDITOR_TEST_POSTGRES_URL"))
    args = parser.parse_args(argv)
    result = run(args.rounds, args.requests, args.postgres_url)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
