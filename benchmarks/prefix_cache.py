"""Prefix caching on CPU: TTFT with a shared 512-token system prompt, cache on vs off.

Requests arrive one at a time (each runs to its first token before the next arrives), so TTFT
measures prefill alone. Every repeat uses a fresh system prompt, so each starts with a cold cache;
on/off runs are interleaved and the medians compared. `no_hit_overhead_frac` runs prompts that
share nothing, to show what hashing and lookups cost when they never hit.
"""

from __future__ import annotations

import torch

from benchmarks._common import bench_checkpoint, emit, log, median, parse_args, random_prompt, timed
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

NUM_REQUESTS = 32
SYSTEM_TOKENS = 512
UNIQUE_TOKENS = 32
FIRST_TOKEN = SamplingParams(temperature=0, max_tokens=1)


def shared_prefix_workload(seed: int) -> list[list[int]]:
    rng = torch.Generator().manual_seed(seed)
    system = random_prompt(rng, SYSTEM_TOKENS)
    return [system + random_prompt(rng, UNIQUE_TOKENS) for _ in range(NUM_REQUESTS)]


def unique_workload(seed: int) -> list[list[int]]:
    rng = torch.Generator().manual_seed(seed)
    return [random_prompt(rng, SYSTEM_TOKENS + UNIQUE_TOKENS) for _ in range(NUM_REQUESTS)]


def ttfts(engine: LLMEngine, prompts: list[list[int]]) -> list[float]:
    out = []
    for prompt in prompts:
        result = engine.generate([prompt], FIRST_TOKEN)[0]
        out.append(result.stats.time_to_first_token_seconds)
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    path = bench_checkpoint()
    engines = {
        caching: LLMEngine.from_pretrained(path, EngineConfig(enable_prefix_caching=caching, max_num_seqs=64))
        for caching in (True, False)
    }
    for engine in engines.values():  # warm-up
        ttfts(engine, unique_workload(999)[:4])
    repeats = args.repeats or 5
    shared_ttft: dict[bool, list[float]] = {True: [], False: []}
    hit_requests_ttft: list[float] = []
    no_hit_seconds: dict[bool, list[float]] = {True: [], False: []}
    hits_before = engines[True].stats()["prefix_cache_hits"]
    queries_before = engines[True].stats()["prefix_cache_queries"]
    for repeat in range(repeats):
        prompts = shared_prefix_workload(seed=repeat)
        for caching in (True, False):
            values = ttfts(engines[caching], prompts)
            shared_ttft[caching].append(median(values))
            if caching:
                hit_requests_ttft.extend(values[1:])  # the first request of a repeat warms the cache
        unique = unique_workload(seed=1000 + repeat)
        order = (True, False) if repeat % 2 == 0 else (False, True)  # alternate who runs first
        for caching in order:
            seconds, _ = timed(lambda c=caching: ttfts(engines[c], unique))
            no_hit_seconds[caching].append(seconds)
        log(f"[{repeat}] ttft on {shared_ttft[True][-1] * 1e3:.1f} ms, off {shared_ttft[False][-1] * 1e3:.1f} ms; "
            f"no-hit on {no_hit_seconds[True][-1]:.2f} s, off {no_hit_seconds[False][-1]:.2f} s")
    stats = engines[True].stats()
    hits = stats["prefix_cache_hits"] - hits_before
    queries = stats["prefix_cache_queries"] - queries_before
    shared_queries = repeats * NUM_REQUESTS * (SYSTEM_TOKENS + UNIQUE_TOKENS)
    # every hit came from the shared workloads (the unique ones never match), so saved frac is over those
    emit({
        "ttft_speedup": round(median(shared_ttft[False]) / median(shared_ttft[True]), 2),
        "ttft_median_cache_on_ms": round(median(shared_ttft[True]) * 1e3, 2),
        "ttft_median_cache_off_ms": round(median(shared_ttft[False]) * 1e3, 2),
        "ttft_median_hit_requests_ms": round(median(hit_requests_ttft) * 1e3, 2),
        "prefill_tokens_saved_frac": round(hits / shared_queries, 4),
        "no_hit_overhead_frac": round(median(no_hit_seconds[True]) / median(no_hit_seconds[False]) - 1, 4),
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "num_requests": NUM_REQUESTS,
        "shared_prefix_tokens": SYSTEM_TOKENS,
        "unique_tokens": UNIQUE_TOKENS,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
    }, args.json)


if __name__ == "__main__":
    main()
