"""Prefix caching on CPU: TTFT with a shared 512-token system prompt, cache on vs off.

Requests arrive one at a time (each runs to its first token before the next arrives), so TTFT
measures prefill alone. The cache-on and cache-off engines take each request in turn (who goes
first alternates), so both see the same machine load; every repeat uses a fresh system prompt
and so starts with a cold cache. `no_hit_time_overhead_frac` runs prompts that share nothing, to show
what hashing and lookups cost when they never hit (median of per-request on/off TTFT ratios, minus 1).
"""

from __future__ import annotations

import torch

from benchmarks._common import bench_checkpoint, emit, log, median, parse_args, random_prompt
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


def ttft(engine: LLMEngine, prompt: list[int]) -> float:
    result = engine.generate([prompt], FIRST_TOKEN)[0]
    assert result.stats.time_to_first_token_seconds is not None
    return result.stats.time_to_first_token_seconds


def paired_ttfts(engines: dict[bool, LLMEngine], prompts: list[list[int]]) -> dict[bool, list[float]]:
    """TTFT of every prompt on both engines, back to back, alternating which goes first."""
    out: dict[bool, list[float]] = {True: [], False: []}
    for i, prompt in enumerate(prompts):
        for caching in ((True, False) if i % 2 == 0 else (False, True)):
            out[caching].append(ttft(engines[caching], prompt))
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    path = bench_checkpoint()
    engines = {
        caching: LLMEngine.from_pretrained(path, EngineConfig(enable_prefix_caching=caching, max_num_seqs=64, dtype=args.dtype))
        for caching in (True, False)
    }
    paired_ttfts(engines, unique_workload(999)[:4])  # warm-up
    repeats = args.repeats or 3
    shared: dict[bool, list[float]] = {True: [], False: []}
    no_hit_ratios: list[float] = []
    hits_before = engines[True].stats()["prefix_cache_hits"]
    queries_before = engines[True].stats()["prefix_cache_queries"]
    for repeat in range(repeats):
        values = paired_ttfts(engines, shared_prefix_workload(seed=repeat))
        for caching in (True, False):
            shared[caching].extend(values[caching])
        unique = paired_ttfts(engines, unique_workload(seed=1000 + repeat))
        no_hit_ratios.extend(on / off for on, off in zip(unique[True], unique[False], strict=True))
        log(f"[{repeat}] shared ttft on {median(values[True]) * 1e3:.1f} ms, off {median(values[False]) * 1e3:.1f} ms; "
            f"no-hit on {median(unique[True]) * 1e3:.1f} ms, off {median(unique[False]) * 1e3:.1f} ms")
    stats = engines[True].stats()
    hits = stats["prefix_cache_hits"] - hits_before
    queries = stats["prefix_cache_queries"] - queries_before
    shared_queries = repeats * NUM_REQUESTS * (SYSTEM_TOKENS + UNIQUE_TOKENS)
    # every hit came from the shared workloads (the unique ones never match), so saved frac is over those
    emit({
        "ttft_speedup": round(median(shared[False]) / median(shared[True]), 2),
        "ttft_median_cache_on_ms": round(median(shared[True]) * 1e3, 2),
        "ttft_median_cache_off_ms": round(median(shared[False]) * 1e3, 2),
        "prefill_tokens_saved_frac": round(hits / shared_queries, 4),
        "no_hit_time_overhead_frac": round(median(no_hit_ratios) - 1, 4),
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "num_requests": NUM_REQUESTS,
        "shared_prefix_tokens": SYSTEM_TOKENS,
        "unique_tokens": UNIQUE_TOKENS,
        "dtype": engines[True].dtype,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
    }, args.json)


if __name__ == "__main__":
    main()
