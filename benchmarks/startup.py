"""Time from `auditor serve` to `/ready` (200): cold (nothing on disk: no KG snapshots, linkers or
KG-constraint indices, and no compiled bytecode, not even the libraries') and warm (what the cold start wrote),
in turns; and what the first requests after ready
cost. The bundled model, SQLite, the engine core in its own process.

Per start:
- ready_s: wall seconds from launching `auditor serve` until `/ready` answers 200;
- api_cpu_s, core_cpu_s: CPU seconds the API process, and its children (the engine core, multiprocessing's
  resource tracker), had used by then. What a start costs whatever else runs on the machine: on an idle
  two-core machine ready_s comes close to the larger of the two (the processes load in parallel);
- warm_s: wall seconds from launch until `/ready` also says warm (what loads after ready, such as the
  validators' registries, is in), measured after the first requests;
- api_rss_mb, core_rss_mb at ready;
- first_ms: one streaming chat request per domain of the fixed mix (finance, medical, legal, none), sent one
  after the other as soon as `/ready` answers; steady_ms: the same four again, with new prompts, right after.
  A first request that pays for something the start left undone shows as first_ms well above steady_ms.

Keys: cold_ready_s, warm_ready_s, cold_api_cpu_s, warm_api_cpu_s, cold_core_cpu_s, warm_core_cpu_s (medians
over rounds), warm_first_ms, warm_steady_ms (per domain, medians), per_round, load_average (at the end).
`--quiet L` waits before each start (at most --quiet-wait-s) until the 1-minute load average is below L.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from auditor.loadgen.server import wait_until_ready
from benchmarks._common import emit, log
from benchmarks._service import (
    Server,
    cpu_seconds,
    load_average,
    request_mix,
    rss_kb,
    send_stream,
    start_server,
    thread_env,
    tree,
)

KINDS = ("cold", "warm")


def _domain_name(domain: str | None) -> str:
    return domain or "none"


async def _one_each(base_url: str, tag: str, max_tokens: int) -> dict[str, float]:
    """Milliseconds per request, one request per domain of the mix, one after the other."""
    timings: dict[str, float] = {}
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        for request in request_mix(4, tag=tag):
            result = await send_stream(client, request, max_tokens)
            if result.status != 200 or result.error:
                raise RuntimeError(f"{_domain_name(request.domain)} request failed: {result.status} {result.error}")
            timings[_domain_name(request.domain)] = round(result.e2e_s * 1000, 1)
    return timings


def _wait_for_quiet(limit: float | None, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while limit is not None and os.getloadavg()[0] >= limit and time.monotonic() < deadline:
        time.sleep(5)


def _measure(server: Server) -> dict[str, Any]:
    """CPU and RSS of the API process and of its children, now."""
    children = [pid for pid in tree(server.proc.pid) if pid != server.proc.pid]
    return {"api_cpu_s": round(cpu_seconds([server.proc.pid]), 2), "core_cpu_s": round(cpu_seconds(children), 2),
            "api_rss_mb": round(rss_kb(server.proc.pid) / 1024), "core_rss_mb": round(sum(map(rss_kb, children)) / 1024)}


def _start(kind: str, round_index: int, cache: Path, args: argparse.Namespace) -> dict[str, Any]:
    _wait_for_quiet(args.quiet, args.quiet_wait_s)
    started_at_load = load_average()
    log(f"round {round_index + 1}: {kind} start (load average {started_at_load})")
    server = start_server(env={**thread_env(args.threads), "AUDITOR_INDEX_CACHE_DIR": str(cache)},
                          bytecode_cache=cache / "bytecode", wait_warm=False)
    try:
        result = {"ready_s": round(server.ready_s, 2), **_measure(server), "load_average": started_at_load}
        result["first_ms"] = asyncio.run(_one_each(server.base_url, f"f{kind}{round_index}", args.max_tokens))
        wait_until_ready(server.proc, server.base_url, timeout_s=600, log_path=server.workdir / "server.log",
                         stop=server.stop, warm=True)
        result["warm_s"] = round(time.perf_counter() - server.started_at, 2)   # all loaded, from launch
        result["steady_ms"] = asyncio.run(_one_each(server.base_url, f"s{kind}{round_index}", args.max_tokens))
    finally:
        server.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--rounds", type=int, default=1, help="cold + warm pairs")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of the engine")
    parser.add_argument("--max-tokens", type=int, default=32, help="of each first / steady request")
    parser.add_argument("--quiet", type=float, default=None, help="start only below this 1-minute load average")
    parser.add_argument("--quiet-wait-s", type=float, default=600, help="the longest wait for --quiet")
    args = parser.parse_args(argv)
    rounds = []
    for index in range(args.rounds):
        cache = Path(tempfile.mkdtemp(prefix="kg-index-"))
        try:
            rounds.append({kind: _start(kind, index, cache, args) for kind in KINDS})
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    def median(kind: str, key: str) -> float:
        return statistics.median(r[kind][key] for r in rounds)

    def median_per_domain(kind: str, key: str) -> dict[str, float]:
        return {domain: statistics.median(r[kind][key][domain] for r in rounds) for domain in rounds[0][kind][key]}

    summary: dict[str, Any] = {}
    for kind in KINDS:
        for key in ("ready_s", "warm_s", "api_cpu_s", "core_cpu_s", "api_rss_mb", "core_rss_mb"):
            summary[f"{kind}_{key}"] = median(kind, key)
        for key in ("first_ms", "steady_ms"):
            summary[f"{kind}_{key}"] = median_per_domain(kind, key)
    emit({**summary, "per_round": rounds, "load_average": load_average()}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
