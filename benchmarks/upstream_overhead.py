"""Audit-path overhead on an upstream request: the service's latency minus the upstream's own.

Two `auditor serve` processes over real HTTP: the upstream (the bundled model, nothing in front of it) and
the service (no local engine, the upstream in its model registry). The same request goes to the upstream
directly and through the service, interleaved pair by pair, so load drifts hit both alike. Validators are
excluded: the requests name no domain and domain detection is off (`--detection detect` measures the path
with detection on, where a prompt detected as medical, legal or finance is also validated); everything else
of the audit path is in: authentication, the input gate, the forwarded HTTP hop, the per-sentence output
gate, the chained record's commit (and for streams the opening row and each sentence's segment, committed
before they are flushed).

Run: python -m benchmarks.upstream_overhead --json [--requests 200] [--store sqlite|postgres]
     [--scoring workers|embedded]   (workers, the default, needs AUDITOR_TEST_REDIS_URL)
     [--detection off|detect]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.serve_process import ServeProcess

QUESTIONS = ["What is the maximum daily dose of Metformin?", "Which drugs interact with Warfarin?",
             "What is the citation of Miranda v. Arizona?", "Is Iran on the FATF black list?"]


def _request(client: httpx.Client, url: str, model: str, question: str, *, stream: bool, max_tokens: int) -> float:
    body = {"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": max_tokens,
            "temperature": 0, "stream": stream}
    started = time.perf_counter()
    if stream:
        with client.stream("POST", f"{url}/chat/completions", json=body) as response:
            tail = b"".join(response.iter_bytes())[-64:]
        assert response.status_code == 200 and b"[DONE]" in tail, tail
    else:
        response = client.post(f"{url}/chat/completions", json=body)
        assert response.status_code == 200, response.text
    return time.perf_counter() - started


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _cpu_seconds(pid: int) -> float:
    """user + system CPU time of a process so far (Linux /proc): what the service spends, whatever the load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(upstream_url: str, service_url: str, *, requests: int, stream: bool, max_tokens: int,
            service_pid: int) -> dict[str, Any]:
    """`requests` pairs; the service reads the upstream the way the client reads it (streamed or not), so the
    upstream does the same work on both sides."""
    direct: list[float] = []
    through: list[float] = []
    model = "up-stream" if stream else "up-plain"
    with httpx.Client(timeout=60) as client:
        writes_before = _audit_writes(client, service_url)
        for i in range(10):                                   # warm both paths alike
            question = QUESTIONS[i % len(QUESTIONS)]
            _request(client, upstream_url, "auditor", question, stream=stream, max_tokens=max_tokens)
            _request(client, service_url, model, question, stream=stream, max_tokens=max_tokens)
        cpu_before = _cpu_seconds(service_pid)
        for i in range(requests):
            question = QUESTIONS[i % len(QUESTIONS)]
            pair = [("direct", upstream_url, "auditor"), ("service", service_url, model)]
            if i % 2:                                          # alternate which goes first
                pair.reverse()
            for name, url, model_id in pair:
                elapsed = _request(client, url, model_id, question, stream=stream, max_tokens=max_tokens)
                (direct if name == "direct" else through).append(elapsed)
        cpu_per_request = (_cpu_seconds(service_pid) - cpu_before) / requests
        writes_after = _audit_writes(client, service_url)
    commits = writes_after[1] - writes_before[1]
    paired = [s - d for s, d in zip(through, direct, strict=True)]
    ms = lambda value: round(value * 1000, 2)  # noqa: E731
    return {
        "requests": requests, "stream": stream, "max_tokens": max_tokens,
        "upstream_p50_ms": ms(statistics.median(direct)), "service_p50_ms": ms(statistics.median(through)),
        "overhead_p50_ms": ms(statistics.median(through) - statistics.median(direct)),
        "overhead_paired_median_ms": ms(statistics.median(paired)),
        "upstream_p90_ms": ms(_percentile(direct, 0.9)), "service_p90_ms": ms(_percentile(through, 0.9)),
        "record_commit_mean_ms": ms((writes_after[0] - writes_before[0]) / commits) if commits else None,
        "service_cpu_ms_per_request": ms(cpu_per_request),
    }


def _audit_writes(client: httpx.Client, service_url: str) -> tuple[float, float]:
    """(seconds, count) of the service's record commits so far, from its Prometheus histogram."""
    text = client.get(service_url.removesuffix("/v1") + "/metrics").text
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith("auditor_audit_write_seconds_")}
    return values.get("auditor_audit_write_seconds_sum", 0.0), values.get("auditor_audit_write_seconds_count", 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--requests", type=int, default=200, help="requests per side per mode")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite",
                        help="the service's audit store (postgres: AUDITOR_TEST_POSTGRES_URL, a scratch schema)")
    parser.add_argument("--scoring", choices=["workers", "embedded"], default="workers",
                        help="workers (production shape): the service only publishes scoring work (Redis at "
                             "AUDITOR_TEST_REDIS_URL; no worker runs here); embedded: scored in the API process")
    parser.add_argument("--detection", choices=["off", "detect"], default="off",
                        help="the service's domain detection for requests that name no domain (detect: detected "
                             "prompts are validated too, so validators are then included)")
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="upstream-overhead-"))
    upstream = ServeProcess(workdir / "upstream").start()
    service_store = None
    if args.store == "postgres":
        from auditor.store.scratch import scratch_schema

        service_store = scratch_schema(os.environ["AUDITOR_TEST_POSTGRES_URL"], prefix="bench_overhead")
        database_url = service_store.__enter__()
    else:
        database_url = f"sqlite:///{workdir / 'service.db'}"
    models = {f"up-{mode}": {"upstream": {"base_url": upstream.base_url, "model": "auditor", "stream": mode == "stream"}}
              for mode in ("plain", "stream")}
    scoring = {"AUDITOR_REDIS_URL": os.environ["AUDITOR_TEST_REDIS_URL"]} if args.scoring == "workers" else {}
    service = ServeProcess(workdir / "service", database_url=database_url, env={
        **scoring, "AUDITOR_LOCAL_ENGINE": "false", "AUDITOR_DOMAIN_DETECTION": args.detection, "AUDITOR_MODELS": json.dumps(models),
        "AUDITOR_SQLITE_SYNCHRONOUS": os.environ.get("BENCH_SQLITE_SYNC", "FULL")})   # FULL, the default: every commit fsynced
    try:
        service.start()
        assert service.process is not None
        results = [measure(upstream.base_url, service.base_url, requests=args.requests, stream=stream,
                           max_tokens=args.max_tokens, service_pid=service.process.pid) for stream in (False, True)]
    finally:
        service.stop()
        upstream.stop()
        if service_store is not None:
            service_store.__exit__(None, None, None)
    report = {"benchmark": "upstream_overhead", "store": args.store, "scoring": args.scoring,
              "detection": args.detection,
              "load_average": os.getloadavg(),
              "cpus": os.cpu_count(), "results": results}
    if args.json:
        print(json.dumps(report))
    else:
        for row in results:
            print(f"{'stream' if row['stream'] else 'plain '}  upstream p50 {row['upstream_p50_ms']:7.2f} ms  "
                  f"service p50 {row['service_p50_ms']:7.2f} ms  overhead {row['overhead_p50_ms']:6.2f} ms "
                  f"(paired median {row['overhead_paired_median_ms']:.2f} ms; record commit "
                  f"{row['record_commit_mean_ms']} ms; service CPU {row['service_cpu_ms_per_request']} ms/request)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
