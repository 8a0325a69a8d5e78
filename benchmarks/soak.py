"""Memory under sustained load: does the server's RSS stay flat?

`auditor serve` (the bundled model, SQLite) gets C closed-loop streaming clients (default 8) sending the
fixed finance / medical / legal / no-domain mix, every prompt unique (so new allowed sets and new decoding
states keep coming), for --minutes (default 2; the issue's check is 10). The RSS of the server's whole
process tree (API process and engine core) is sampled every few seconds; the slope is a least-squares fit
over the samples after the warm-up (default: the first minute).

Keys: rss_slope_mb_per_min, rss_peak_slope_mb_per_min (the same fit over each minute's highest sample, which
the 30-second heap trims do not saw-tooth), rss_peaks_per_min, rss_start_mb (first sample after warm-up), rss_end_mb, rss_max_mb,
api_rss_slope_mb_per_min and core_rss_slope_mb_per_min (the same fit for the API process alone and for the processes
below it: which side grows), kg_cache_slope_mb_per_min, kg_cache_end_mb and kg_cache_budget_mb (what the core's
KG-constraint caches hold by their own estimates, from /metrics: the share of the core's slope that is bounded
caches filling toward their budget), requests, req_s, statuses, non_2xx, successes, records_found, chain_ok, minutes,
load_average.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from collections import Counter

from benchmarks._common import emit, log
from benchmarks._service import closed_loop, load_average, request_mix, rss_kb, start_server, thread_env


def slope_per_minute(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB) samples, in MB per minute."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_m = sum(m for _, m in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    cov = sum((t - mean_t) * (m - mean_m) for t, m in samples)
    return cov / var * 60 if var else None


def window_peaks(samples: list[tuple[float, float]], window_s: float = 60.0) -> list[tuple[float, float]]:
    """(window middle, highest RSS) per window: the heap is trimmed every 30 s, so single samples saw-tooth;
    the peaks show whether what stays resident grows."""
    windows: dict[int, list[float]] = {}
    for t, mb in samples:
        windows.setdefault(int(t // window_s), []).append(mb)
    return [((k + 0.5) * window_s, max(values)) for k, values in sorted(windows.items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--warmup-s", type=float, default=60.0, help="samples before this are not in the slope")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of the engine")
    args = parser.parse_args(argv)
    if args.minutes * 60 <= args.warmup_s:
        print("soak: --minutes must run longer than --warmup-s", file=sys.stderr)
        return 2
    server = start_server(env=thread_env(args.threads))
    log(f"server ready in {server.ready_s:.1f} s; soaking {args.minutes} min with {args.clients} clients")
    samples: list[tuple[float, float]] = []
    api_samples: list[tuple[float, float]] = []   # the API process alone; the rest of the tree is the engine core
    cache_samples: list[tuple[float, float, float]] = []  # (s, held, budget) MB: the core's KG-constraint caches
    stop = threading.Event()
    started = time.monotonic()

    def sample() -> None:
        while not stop.wait(args.sample_s):
            now = time.monotonic() - started
            samples.append((now, server.rss_mb()))
            api_samples.append((now, rss_kb(server.proc.pid) / 1024))
            cache = server.kg_cache_mb()   # a /metrics scrape every sample: a few ms of the API's time
            if cache is not None:
                cache_samples.append((now, *cache))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        deadline = started + args.minutes * 60
        requests = request_mix(int(args.minutes * 60 * 50) + 100, tag="s")   # more than the run can send
        results, seconds = asyncio.run(closed_loop(server.base_url, requests, clients=args.clients,
                                                   max_tokens=args.max_tokens, deadline=deadline))
        stop.set()
        sampler.join()
        successes = [r for r in results if r.status == 200 and r.error is None]
        found = server.records_found([r.audit_id for r in successes if r.audit_id])
        chain_ok = server.verify_chain()
    finally:
        stop.set()
        server.stop()
    after_warmup = [(t, m) for t, m in samples if t >= args.warmup_s]
    slope = slope_per_minute(after_warmup)
    peaks = window_peaks(after_warmup)
    peak_slope = slope_per_minute(peaks)
    api_after = [(t, m) for t, m in api_samples if t >= args.warmup_s]
    core_after = [(t, m - api) for (t, m), (_, api) in zip(after_warmup, api_after, strict=True)]
    emit({
        "minutes": args.minutes, "clients": args.clients, "warmup_s": args.warmup_s,
        "rss_slope_mb_per_min": None if slope is None else round(slope, 2),
        "rss_peak_slope_mb_per_min": None if peak_slope is None else round(peak_slope, 2),
        "rss_peaks_per_min": [round(mb, 1) for _, mb in peaks],
        "rss_start_mb": round(after_warmup[0][1], 1) if after_warmup else None,
        "rss_end_mb": round(samples[-1][1], 1) if samples else None,
        "rss_max_mb": round(max(m for _, m in samples), 1) if samples else None,
        "api_rss_slope_mb_per_min": _rounded(slope_per_minute(api_after)),
        "core_rss_slope_mb_per_min": _rounded(slope_per_minute(core_after)),
        "kg_cache_slope_mb_per_min": _rounded(slope_per_minute([(t, m) for t, m, _ in cache_samples
                                                                if t >= args.warmup_s])),
        "kg_cache_end_mb": round(cache_samples[-1][1], 1) if cache_samples else None,
        "kg_cache_budget_mb": round(cache_samples[-1][2], 1) if cache_samples else None,
        "rss_samples": [(round(t), round(m, 1)) for t, m in samples],
        "api_rss_samples": [(round(t), round(m, 1)) for t, m in api_samples],
        "requests": len(results), "req_s": round(len(results) / seconds, 2),
        "statuses": dict(Counter(str(r.status) for r in results)),
        "non_2xx": sum(1 for r in results if r.status != 200 or r.error is not None),
        "successes": len(successes), "records_found": found, "chain_ok": chain_ok,
        "ready_s": round(server.ready_s, 2), "load_average": load_average(),
    }, args.json)
    return 0


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


if __name__ == "__main__":
    sys.exit(main())
