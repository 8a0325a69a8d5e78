"""Quantized and tiered KV cache against the full-precision one: capacity, accuracy, decode speed, cold tier.

- capacity_ratio_<dtype>: sequences of a fixed length resident at once in a fixed KV budget, against the
  model dtype (`kv_cache_dtype=auto`), each dtype with the max_num_seqs that fits it best. Counted by
  allocating them through the engine's own pool sizing and block manager, residuals and scales included.
  `_vs_bf16` repeats it as if the model ran in bf16 (the CPU engine's likely dtype), memory arithmetic only;
  `_g64` with kv_cache_group_size 64 (and a 64-token residual) instead of 32.
- greedy_match_<dtype>, fer_<dtype>, ppl_delta_<dtype>, top1_agreement_<dtype> (the share of held-text
  positions where both caches rank the same next token first, free of greedy runs' cascading
  divergence): benchmarks/_kv_quality.py.
- decode_tok_s_ratio_<dtype>: decode throughput at batch 32 over full precision; engines step in turn
  (who goes first rotates), fresh prompts each repeat, prefill steps untimed.
- cold_hit_ttft_speedup_<dtype>: TTFT of a prompt whose prefix (512 tokens, or what the context allows)
  was evicted from the pool: restored from the cold tier (tiered) against recomputed (static), same
  dtype, same pool, the same eviction on both, measured in turn.

    python -m benchmarks.kv_cache --json                  # the bundled model
    python -m benchmarks.kv_cache --model bench --json    # the benchmark model (benchmarks/_common.py)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks import _kv_quality as quality
from benchmarks._common import bench_checkpoint, emit, log, random_prompt
from benchmarks.hallucination_eval import DEFAULT_MODEL, DEFAULT_PROMPTS, read_prompts
from engine.block_manager import BlockManager
from engine.config import EngineConfig, ModelConfig
from engine.kv_cache import pool_sizes
from engine.kv_spec import KVCacheSpec
from engine.llm_engine import LLMEngine
from engine.loader import load_model_config
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

DTYPES = quality.DTYPES
BUDGET = 64 * 2**20
DECODE_BATCH = 32
DECODE_TOKENS = 64
COLD_PREFIX = 512


# ---- capacity ------------------------------------------------------------------------------------

def resident_sequences(model: ModelConfig, dtype: str, model_dtype: torch.dtype, length: int, group: int) -> int:
    """Most sequences of `length` tokens held at once in BUDGET bytes (bisection over max_num_seqs)."""

    def fits(count: int) -> bool:
        config = EngineConfig(kv_cache_dtype=dtype, kv_cache_memory_bytes=BUDGET, max_num_seqs=count,
                              enable_prefix_caching=False, kv_cache_group_size=group, kv_cache_residual_tokens=group)
        spec = KVCacheSpec.from_configs(model, config, model_dtype)
        try:
            num_full, num_quantized = pool_sizes(spec, config, max_model_len=length)
        except ValueError:   # the residuals alone overflow the budget
            return False
        manager = BlockManager(num_full, spec.block_size, False, num_quantized_blocks=num_quantized,
                               residual_tokens=spec.residual_tokens)
        for i in range(count):
            seq = Sequence(str(i), [3] * length, SamplingParams(), priority=1, arrival_time=0.0)
            if not manager.allocate_prompt(seq, length - 1):    # the prompt, then its last decode step
                return False
            seq.num_computed_tokens = length - 1
            if not manager.append_slots(seq, 1):
                return False
            seq.num_computed_tokens = length
        return True

    low, high = 0, BUDGET // (length * 16)   # > any dtype's count: >= 16 bytes of KV per token
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def capacity(path: Path, length: int) -> dict[str, Any]:
    model = load_model_config(path)
    result: dict[str, Any] = {"capacity_seq_len": length, "capacity_budget_bytes": BUDGET}
    for model_dtype, dtype_suffix in ((model.torch_dtype, ""), (torch.bfloat16, "_vs_bf16")):
        for group, group_suffix in ((32, ""), (64, "_g64")):   # group 64: half the scales, a longer residual
            suffix = group_suffix + dtype_suffix
            counts = {dtype: resident_sequences(model, dtype, model_dtype, length, group) for dtype in DTYPES}
            result[f"capacity_seqs{suffix}"] = counts
            for dtype in ("int8", "int4"):
                result[f"capacity_ratio_{dtype}{suffix}"] = round(counts[dtype] / counts["auto"], 3)
    return result


# ---- decode speed --------------------------------------------------------------------------------

def decode_speed(path: Path, prompt_len: int, repeats: int, threads: int) -> dict[str, Any]:
    engines = {dtype: LLMEngine.from_pretrained(path, EngineConfig(
        kv_cache_dtype=dtype, max_num_seqs=DECODE_BATCH, enable_prefix_caching=False, num_threads=threads))
        for dtype in DTYPES}
    vocab = engines["auto"].model.config.vocab_size
    ratios: dict[str, list[float]] = {"int8": [], "int4": []}
    rates: dict[str, list[float]] = {dtype: [] for dtype in DTYPES}
    for repeat in range(repeats + 1):   # repeat 0 warms every engine up and is not counted
        rng = torch.Generator().manual_seed(100 + repeat)
        prompts = [random_prompt(rng, prompt_len, high=vocab - 1) for _ in range(DECODE_BATCH)]
        params = SamplingParams(temperature=0, max_tokens=DECODE_TOKENS + 1, ignore_eos=True)
        for engine in engines.values():
            for i, prompt in enumerate(prompts):
                engine.add_request(f"{repeat}-{i}", prompt, params)
            while engine.scheduler.waiting or any(s.num_uncomputed_tokens > 1 for s in engine.scheduler.running):
                engine.step()          # prefill, untimed
        seconds, tokens = _decode_in_turn(engines)
        if repeat:
            for dtype in DTYPES:
                rates[dtype].append(tokens[dtype] / seconds[dtype])
            for dtype in ("int8", "int4"):
                ratios[dtype].append(rates[dtype][-1] / rates["auto"][-1])
            log(f"  decode [{repeat}] tok/s " + ", ".join(f"{d} {rates[d][-1]:.0f}" for d in DTYPES))
    result: dict[str, Any] = {f"decode_tok_s_{dtype}": round(statistics.median(rates[dtype]), 1) for dtype in DTYPES}
    for dtype in ("int8", "int4"):
        result[f"decode_tok_s_ratio_{dtype}"] = round(statistics.median(ratios[dtype]), 3)
    result.update(decode_batch=DECODE_BATCH, decode_context=f"{prompt_len}..{prompt_len + DECODE_TOKENS}")
    return result


def _decode_in_turn(engines: dict[str, LLMEngine]) -> tuple[dict[str, float], dict[str, int]]:
    seconds = dict.fromkeys(engines, 0.0)
    tokens = dict.fromkeys(engines, 0)
    names, turn = list(engines), 0
    while any(engine.has_unfinished() for engine in engines.values()):
        shift = turn % len(names)
        for name in names[shift:] + names[:shift]:
            engine = engines[name]
            if engine.has_unfinished():
                start = time.perf_counter()
                outputs = engine.step()
                seconds[name] += time.perf_counter() - start
                tokens[name] += len(outputs)
        turn += 1
    return seconds, tokens


# ---- cold tier -----------------------------------------------------------------------------------

def cold_ttft(path: Path, dtype: str, prefix_len: int, repeats: int, threads: int) -> dict[str, Any]:
    """TTFT of prefix + 2 tokens after the prefix was evicted: static (recompute) vs tiered (restore)."""
    cold_dir = Path(tempfile.mkdtemp(prefix="kv-bench-cold-"))
    block = EngineConfig(kv_cache_dtype=dtype).kv_block_size
    pool = -(-(prefix_len + 64) // block) + 2       # one prompt's worth: the next prompt evicts the last one
    engines = {strategy: LLMEngine.from_pretrained(path, EngineConfig(
        kv_cache_dtype=dtype, kv_cache_strategy=strategy, kv_cache_cold_dir=str(cold_dir), num_kv_blocks=pool,
        max_num_seqs=2, num_threads=threads)) for strategy in ("static", "tiered")}
    vocab = engines["static"].model.config.vocab_size
    first = SamplingParams(temperature=0, max_tokens=1)
    ttft: dict[str, list[float]] = {"static": [], "tiered": []}
    fill_seconds: dict[str, float] = {"static": 0.0, "tiered": 0.0}
    cached: dict[str, list[int]] = {"static": [], "tiered": []}
    for repeat in range(repeats + 1):   # repeat 0 warms up and is not counted
        rng = torch.Generator().manual_seed(500 + repeat)
        prefix = random_prompt(rng, prefix_len, high=vocab - 1)
        fillers = [random_prompt(rng, prefix_len + 32, high=vocab - 1) for _ in range(2)]
        order = ("static", "tiered") if repeat % 2 else ("tiered", "static")
        for strategy in order:
            engine = engines[strategy]
            engine.generate([prefix + [3]], first)
            started = time.perf_counter()
            for filler in fillers:
                engine.generate([filler], first)
            if repeat:
                fill_seconds[strategy] += time.perf_counter() - started
            assert not engine.block_manager.find_cached_prefix(engine.prepare_request("probe", prefix + [4]))
            out = engine.generate([prefix + [5, 6]], first)[0]
            if repeat:
                assert out.stats.time_to_first_token_seconds is not None
                ttft[strategy].append(out.stats.time_to_first_token_seconds)
                cached[strategy].append(out.stats.num_cached_tokens)
    restored = engines["tiered"].stats()
    return {
        f"cold_hit_ttft_speedup_{dtype}": round(statistics.median(ttft["static"]) / statistics.median(ttft["tiered"]), 2),
        f"cold_hit_ttft_ms_{dtype}": {s: round(statistics.median(v) * 1e3, 2) for s, v in ttft.items()},
        f"cold_hit_cached_tokens_{dtype}": {s: statistics.median(v) for s, v in cached.items()},
        f"cold_eviction_overhead_frac_{dtype}": round(fill_seconds["tiered"] / fill_seconds["static"] - 1, 3),
        f"cold_corrupt_blocks_{dtype}": restored["kv_cache_cold_corrupt_blocks"],
        "cold_prefix_tokens": prefix_len,
    }


# ---- main ----------------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--model", default="bundled",
                        help='"bundled" (auditor/bundled_model), "bench" (benchmarks/_common.py) or a checkpoint folder')
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of the timed parts")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for every contender")
    parser.add_argument("--limit", type=int, default=0, help="only the first N hallucination prompts (0: all)")
    parser.add_argument("--max-tokens", type=int, default=160, help="answer length for greedy match and FER")
    parser.add_argument("--skip", nargs="*", default=[], choices=["capacity", "quality", "decode", "cold"],
                        help="parts to leave out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def model_path(name: str) -> Path:
    if name == "bundled":
        return DEFAULT_MODEL
    if name == "bench":
        return bench_checkpoint()
    return Path(name)


def main() -> int:
    args = parse_args()
    path = model_path(args.model)
    config = load_model_config(path)
    context = min(config.max_position_embeddings, EngineConfig().max_model_len_cap)
    result: dict[str, Any] = {"model": args.model, "model_dtype": str(config.torch_dtype).removeprefix("torch.")}
    rows = read_prompts(DEFAULT_PROMPTS)[: args.limit or None]
    started = time.perf_counter()
    if "capacity" not in args.skip:
        log("capacity ...")
        result.update(capacity(path, context))
    if "quality" not in args.skip:
        log("perplexity on held text ...")
        ppl = {dtype: quality.perplexity(path, dtype, rows, args.threads) for dtype in DTYPES}
        result["ppl"] = {dtype: round(value, 4) for dtype, (value, _) in ppl.items()}
        result["ppl_tokens"] = len(ppl["auto"][1])
        for dtype in ("int8", "int4"):
            result[f"ppl_delta_{dtype}"] = round(ppl[dtype][0] / ppl["auto"][0] - 1, 5)
            same = sum(a == b for a, b in zip(ppl["auto"][1], ppl[dtype][1], strict=True))
            result[f"top1_agreement_{dtype}"] = round(same / len(ppl["auto"][1]), 4)
        log("greedy match and FER on the hallucination prompts ...")
        result.update(quality.hallucination_runs(path, rows, args))
        result["hallucination_prompts"] = len(rows)
    if "decode" not in args.skip:
        log("decode speed ...")
        result.update(decode_speed(path, context // 2, args.repeats, args.threads))
    if "cold" not in args.skip:
        prefix = min(COLD_PREFIX, context - 64)
        for dtype in DTYPES:
            log(f"cold tier TTFT ({dtype}) ...")
            result.update(cold_ttft(path, dtype, prefix, args.repeats, args.threads))
        result["cold_hit_ttft_speedup"] = min(result[f"cold_hit_ttft_speedup_{d}"] for d in DTYPES)
    result.update(seconds=round(time.perf_counter() - started, 1), torch_threads=torch.get_num_threads(),
                  load_average=[round(x, 2) for x in os.getloadavg()], repeats=args.repeats)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
