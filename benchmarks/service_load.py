"""Service vs bare engine under concurrent load: how much of the engine's speed the service keeps.

`auditor serve` (the bundled model; SQLite unless --database-url / --redis-url give the production shape,
then a Celery worker runs beside it) gets C closed-loop streaming clients (default 16) sending a fixed mix
of finance, medical, legal and no-domain chat (benchmarks/data). In the same run, the bare `LLMEngine` in
this process serves the same rendered prompts with the same sampling parameters and KG-constraint
arguments, also C at a time. Every request's text is unique to its side and round, so neither side has
prefix-cache hits the other lacks. `--reference DIR` also serves the load from another checkout (main as
it was), the two servers taking turns in each round, so before and after meet the same machine; each checkout
keeps its own KG-index cache, so both start warm after their first round.

Keys: service_tok_s, engine_tok_s, service_vs_engine, p50_ms, p99_ms, ttft_p50_ms, ttft_p99_ms, non_2xx,
records_found, successes, chain_ok (and the same with a reference_ prefix), ready_s, load_average.
What the ratio hides, since it also follows how fast the engine is on the host: `overhead_p50_ms` /
`overhead_p99_ms`, the time each request spends in the service outside the engine (the client's end-to-end
time less the engine's own, arrival to last token, from the request's audit record), and the CPU the API
process and the engine core use per request (`api_cpu_ms_per_request`, `core_cpu_ms_per_request`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import emit, log
from benchmarks._service import (
    ChatRequest,
    Result,
    closed_loop,
    committed,
    cpu_seconds,
    load_average,
    percentile,
    request_mix,
    start_server,
    thread_env,
    tree,
)


def engine_side(requests: list[ChatRequest], *, clients: int, max_tokens: int) -> dict[str, float]:
    """The bare engine, in this process, on the service's rendered prompts and parameters, C requests at a time."""
    from auditor.serving import runtime  # noqa: PLC0415
    from auditor.settings import Settings  # noqa: PLC0415
    from engine.sampling_params import SamplingParams  # noqa: PLC0415

    settings = Settings()
    kgs = runtime.load_kgs(settings.domains)
    # the service's own engine options (dtype, threads, cache limits), so both sides run the same engine
    engine = runtime.build_engine(settings.resolved_model_path(), kgs, **runtime.engine_options(settings))
    knowledge = runtime.KgKnowledge(kgs)
    work = []
    for request in requests:
        prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": request.user_text}],
                                                      add_generation_prompt=True)
        params = SamplingParams(temperature=0, max_tokens=max_tokens)
        kg = knowledge.constraint_for(request.domain, request.user_text) if request.domain else None
        if kg is not None and kg.applied:
            params.extra_args.update(kg.extra_args())
        work.append((prompt, params))
    engine.generate([work[0][0]], work[0][1])   # warm-up (not timed), as the server was warmed
    tokens, in_flight, next_index = 0, 0, 0
    started = time.perf_counter()
    while next_index < len(work) or in_flight:
        while in_flight < clients and next_index < len(work):
            engine.add_request(f"bench-{next_index}", *work[next_index])
            next_index += 1
            in_flight += 1
        for out in engine.step():
            if out.finished:
                in_flight -= 1
                tokens += len(out.token_ids)
    seconds = time.perf_counter() - started
    return {"engine_tok_s": round(tokens / seconds, 1), "engine_tokens": tokens, "engine_s": round(seconds, 3)}


def service_side(requests: list[ChatRequest], warmup: list[ChatRequest], *, clients: int, max_tokens: int,
                 source_root: Path | None, database_url: str | None, redis_url: str | None,
                 threads: int) -> dict[str, Any]:
    server = start_server(source_root=source_root, database_url=database_url, redis_url=redis_url,
                          env=thread_env(threads))
    try:
        asyncio.run(closed_loop(server.base_url, warmup, clients=clients, max_tokens=max_tokens))
        api, core = server.proc.pid, [pid for pid in tree(server.proc.pid) if pid != server.proc.pid]
        cpu_before = cpu_seconds([api]), cpu_seconds(core)
        results, seconds = asyncio.run(closed_loop(server.base_url, requests, clients=clients, max_tokens=max_tokens))
        cpu = {"api_cpu_ms_per_request": round(1000 * (cpu_seconds([api]) - cpu_before[0]) / len(results), 2),
               "core_cpu_ms_per_request": round(1000 * (cpu_seconds(core) - cpu_before[1]) / len(results), 2)}
        rss_mb = server.rss_mb()
        successes = [r for r in results if r.status == 200 and r.error is None]
        records = server.records([r.audit_id for r in successes if r.audit_id])
        chain_ok = server.verify_chain()
    finally:
        server.stop()
    found = committed(records)
    in_engine = {audit_id: seconds for audit_id, (_, seconds) in records.items() if seconds is not None}
    overhead = [1000 * (r.e2e_s - in_engine[r.audit_id]) for r in successes if r.audit_id in in_engine]
    return summarise(results, seconds) | cpu | {
        "overhead_p50_ms": round(percentile(overhead, 50) or 0, 1),
        "overhead_p99_ms": round(percentile(overhead, 99) or 0, 1),
        "successes": len(successes), "records_found": found, "chain_ok": chain_ok,
        "ready_s": round(server.ready_s, 2), "warm_s": round(server.warm_s or 0, 2), "rss_mb": round(rss_mb, 1)}


def summarise(results: list[Result], seconds: float) -> dict[str, Any]:
    tokens = sum(r.completion_tokens for r in results)
    e2e = [r.e2e_s * 1000 for r in results]
    ttft = [r.ttft_s * 1000 for r in results if r.ttft_s is not None]
    return {
        "service_tok_s": round(tokens / seconds, 1), "service_req_s": round(len(results) / seconds, 2),
        "service_tokens": tokens, "service_s": round(seconds, 3),
        "p50_ms": round(percentile(e2e, 50) or 0, 1), "p99_ms": round(percentile(e2e, 99) or 0, 1),
        "ttft_p50_ms": round(percentile(ttft, 50) or 0, 1), "ttft_p99_ms": round(percentile(ttft, 99) or 0, 1),
        "non_2xx": sum(1 for r in results if r.status != 200 or r.error is not None),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (medians are reported)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads of every engine, served or bare (default 1: on a shared machine "
                             "multi-threaded torch spin-waits under oversubscription and timings swing tenfold)")
    parser.add_argument("--reference", type=Path, help="another checkout to serve the same load in turn (e.g. main)")
    parser.add_argument("--database-url", default=os.environ.get("AUDITOR_BENCH_DATABASE_URL"),
                        help="the audit store (default: a fresh SQLite file per server)")
    parser.add_argument("--redis-url", default=os.environ.get("AUDITOR_BENCH_REDIS_URL"),
                        help="Redis for Celery; a worker is started beside the server")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.requests < 1 or args.rounds < 1:
        print("service_load: --clients, --requests and --rounds must be at least 1", file=sys.stderr)
        return 2
    rounds: list[dict[str, Any]] = []
    for round_index in range(args.rounds):
        sides: dict[str, Any] = {}
        order = ["service", "engine"] + (["reference"] if args.reference else [])
        shift = round_index % len(order)
        for side in order[shift:] + order[:shift]:
            tag = f"{side[0]}{round_index}"
            requests = request_mix(args.requests, tag=tag)
            warmup = request_mix(8, tag=f"w{tag}")
            log(f"round {round_index + 1}/{args.rounds}: {side} (load average {load_average()})")
            if side == "engine":
                torch.set_num_threads(args.threads)
                sides[side] = engine_side(requests, clients=args.clients, max_tokens=args.max_tokens)
            else:
                sides[side] = service_side(requests, warmup, clients=args.clients, max_tokens=args.max_tokens,
                                           source_root=args.reference if side == "reference" else None,
                                           database_url=args.database_url, redis_url=args.redis_url,
                                           threads=args.threads)
        rounds.append(sides)
    emit(report(rounds, args), args.json)
    return 0


def report(rounds: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    def median_of(side: str, key: str) -> Any:
        values = [r[side][key] for r in rounds]
        return values[0] if isinstance(values[0], bool) else round(statistics.median(values), 2)

    result: dict[str, Any] = {"clients": args.clients, "requests": args.requests, "max_tokens": args.max_tokens,
                              "threads": args.threads,
                              "rounds": args.rounds, "store": "postgresql" if args.database_url else "sqlite",
                              "celery": bool(args.redis_url)}
    service_keys = ["service_tok_s", "service_req_s", "p50_ms", "p99_ms", "ttft_p50_ms", "ttft_p99_ms", "non_2xx",
                    "records_found", "successes", "ready_s", "warm_s", "rss_mb", "overhead_p50_ms", "overhead_p99_ms",
                    "api_cpu_ms_per_request", "core_cpu_ms_per_request"]
    for key in service_keys:
        result[key] = median_of("service", key)
    result["chain_ok"] = all(r["service"]["chain_ok"] for r in rounds)
    result["engine_tok_s"] = median_of("engine", "engine_tok_s")
    ratios = [r["service"]["service_tok_s"] / r["engine"]["engine_tok_s"] for r in rounds]
    result["service_vs_engine"] = round(statistics.median(ratios), 3)
    if args.reference:
        for key in service_keys:
            result[f"reference_{key}"] = median_of("reference", key)
        result["reference_chain_ok"] = all(r["reference"]["chain_ok"] for r in rounds)
        result["reference_vs_engine"] = round(statistics.median(
            r["reference"]["service_tok_s"] / r["engine"]["engine_tok_s"] for r in rounds), 3)
    result["load_average"] = load_average()
    result["per_round"] = json.loads(json.dumps(rounds))
    return result


if __name__ == "__main__":
    sys.exit(main())
