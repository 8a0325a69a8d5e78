"""What rounding matmul rows to buckets changes for bf16 on CPU: memory and first-seen cost, and engine throughput.

Part 1, the shape sweep: the bundled model's 5 weight shapes at every row count 1..--max-rows, in the engine's
dtype; RSS growth and the time of a first and a second pass, with exact rows and with `BucketedLinear`'s
buckets (each in a fresh child process: oneDNN's kernel cache lives for the process).
Part 2, the engine: one engine, both variants warmed, then --workloads fresh engine_vs_hf workloads, each run
exact and bucketed in alternating order; the key is the median of bucketed / exact throughput per workload.
Prefix caching is off, so the second run of a workload skips nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import engine.layers.linear as linear_module
from benchmarks._common import add_common_args, bench_checkpoint, emit, log, rss_mb, setup

WEIGHT_SHAPES = ((384, 256), (256, 256), (1536, 256), (256, 768), (8192, 256))   # qkv, o, gate_up, down, lm_head


def sweep(bucketed: bool, max_rows: int, dtype: torch.dtype) -> dict[str, float]:
    weights = [torch.randn(n, k, dtype=dtype) for n, k in WEIGHT_SHAPES]
    layers = []
    for weight in weights:
        layer = linear_module.BucketedLinear(weight.shape[1], weight.shape[0], bias=False, dtype=dtype)
        layer.weight.data = weight
        layers.append(layer)
    start = rss_mb()
    passes = []
    for _ in range(2):
        began = time.perf_counter()
        for rows in range(1, max_rows + 1):
            for layer in layers:
                x = torch.randn(rows, layer.in_features, dtype=dtype)
                layer(x) if bucketed else F.linear(x, layer.weight)
        passes.append(time.perf_counter() - began)
    return {"rss_growth_mb": round(rss_mb() - start, 1), "first_pass_s": round(passes[0], 3),
            "second_pass_s": round(passes[1], 3)}


def engine_ab(dtype: str, workloads: int) -> dict[str, object]:
    from benchmarks.engine_vs_hf import output_tokens, run_engine, workload  # noqa: PLC0415
    from engine.config import EngineConfig  # noqa: PLC0415
    from engine.llm_engine import LLMEngine  # noqa: PLC0415

    buckets = linear_module.bucketed_rows
    variant = {"bucketed": True}
    linear_module.bucketed_rows = lambda rows: buckets(rows) if variant["bucketed"] else rows
    engine = LLMEngine.from_pretrained(bench_checkpoint(), EngineConfig(
        max_num_seqs=64, max_num_batched_tokens=1024, dtype=dtype, enable_prefix_caching=False))
    for bucketed in (True, False):   # warm both alike
        variant["bucketed"] = bucketed
        run_engine(engine, workload(seed=10_000))
    ratios = []
    for seed in range(1, workloads + 1):
        requests = workload(seed)
        rates = {}
        for bucketed in ((False, True) if seed % 2 else (True, False)):
            variant["bucketed"] = bucketed
            began = time.perf_counter()
            run_engine(engine, requests)
            rates[bucketed] = output_tokens(requests) / (time.perf_counter() - began)
        ratios.append(rates[True] / rates[False])
        log(f"workload {seed}: exact {rates[False]:.0f} tok/s, bucketed {rates[True]:.0f} tok/s")
    linear_module.bucketed_rows = buckets
    return {"bucketed_vs_exact": round(statistics.median(ratios), 3),
            "bucketed_vs_exact_per_workload": [round(r, 3) for r in ratios], "dtype": engine.dtype}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--max-rows", type=int, default=400)
    parser.add_argument("--workloads", type=int, default=8)
    parser.add_argument("--sweep-child", choices=("exact", "bucketed"), help=argparse.SUPPRESS)
    args = setup(parser)
    from engine.precision import resolve_dtype  # noqa: PLC0415

    dtype = resolve_dtype(args.dtype, torch.float32, torch.device("cpu"))
    if args.sweep_child:
        print(json.dumps(sweep(args.sweep_child == "bucketed", args.max_rows, dtype)))
        return
    result: dict[str, object] = {}
    for kind in ("exact", "bucketed"):
        child = subprocess.run(
            [sys.executable, "-m", "benchmarks.bucketed_linear", "--sweep-child", kind, "--dtype", args.dtype,
             "--max-rows", str(args.max_rows), "--threads", str(args.threads)],
            capture_output=True, text=True, check=True)
        result[f"sweep_{kind}"] = json.loads(child.stdout.strip().splitlines()[-1])
    if args.workloads:
        result |= engine_ab(args.dtype, args.workloads)
    emit(result | {"max_rows": args.max_rows, "weight_shapes": WEIGHT_SHAPES}, args.json)


if __name__ == "__main__":
    main()
