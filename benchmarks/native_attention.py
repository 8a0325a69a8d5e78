"""Paged decode attention on CPU: the native kernel against the torch path (gather + SDPA), same inputs.

Shapes: the bundled model's heads (8 query / 2 KV heads of 32) and a Llama-3-8B-like layer (32 / 8 of 128), at
batches of 16 and 64 sequences whose contexts are drawn up to 128, 512 and 1,024 tokens, block size 16. Every
timed call gets fresh pools, block tables (blocks scattered over the pool, as a long-running cache leaves them)
and lengths, so neither side meets data a previous call left in cache. The two paths alternate call by call,
each going first in half the pairs (the repeats are rounded up to an even count), as the second of a pair may
find some of the inputs in cache. Each side reports its median time per call and per context token per KV
head; `speedup` is torch / native per shape (median of the paired calls). `max_abs_error_*` is each path's
distance to a float64 reference. `kernel_build_or_load_s`: the kernel's cold cost as this run met it (a build
with an empty `ENGINE_KERNEL_CACHE`, else a load).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks._common import add_common_args, emit, log, setup, timed
from engine.kernels.cpu_paged_attention import native_decode_available, paged_attention_decode_native
from engine.kernels.paged_attention import paged_attention_decode_torch

BLOCK_SIZE = 16
MODELS = {"bundled_d32": (8, 2, 32), "llama3_8b_like_d128": (32, 8, 128)}   # heads, kv heads, head dim
BATCHES = (16, 64)
MAX_CONTEXTS = (128, 512, 1024)


def make_inputs(gen: torch.Generator, dtype: torch.dtype, batch: int, max_context: int,
                heads: int, kv_heads: int, head_dim: int):
    lens = torch.randint(max(1, max_context // 4), max_context + 1, (batch,), generator=gen)
    width = -(-int(lens.max()) // BLOCK_SIZE)
    num_blocks = batch * width * 2                      # half the pool unused: tables scatter over all of it
    tables = torch.randperm(num_blocks, generator=gen)[: batch * width].view(batch, width).to(torch.int32)
    pools = [torch.randn(num_blocks, BLOCK_SIZE, kv_heads, head_dim, generator=gen).to(dtype) for _ in range(2)]
    q = torch.randn(batch, heads, head_dim, generator=gen).to(dtype)
    return q, pools[0], pools[1], tables, lens.to(torch.int32), head_dim**-0.5


def measure(dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int, batch: int, max_context: int,
            repeats: int, seed: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(seed)
    native_s, torch_s, tokens = [], [], []
    errors = {"native": 0.0, "torch": 0.0}
    for repeat in range(repeats + 1):                  # call 0 warms both paths and checks them
        inputs = make_inputs(gen, dtype, batch, max_context, heads, kv_heads, head_dim)
        order = (("native", paged_attention_decode_native), ("torch", paged_attention_decode_torch))
        outputs = {}
        for name, fn in order if repeat % 2 else order[::-1]:
            seconds, outputs[name] = timed(lambda fn=fn, inputs=inputs: fn(*inputs))
            if repeat:
                (native_s if name == "native" else torch_s).append(seconds)
        if repeat == 0:
            q, k_cache, v_cache, tables, lens, scale = inputs
            exact = paged_attention_decode_torch(q.double(), k_cache.double(), v_cache.double(), tables, lens, scale)
            errors = {name: float((out.double() - exact).abs().max()) for name, out in outputs.items()}
        else:
            tokens.append(int(inputs[4].sum()) * kv_heads)
    per_token = statistics.median(tokens)
    return {
        "native_us": round(statistics.median(native_s) * 1e6, 1),
        "torch_us": round(statistics.median(torch_s) * 1e6, 1),
        "native_ns_per_token_head": round(statistics.median(native_s) * 1e9 / per_token, 2),
        "torch_ns_per_token_head": round(statistics.median(torch_s) * 1e9 / per_token, 2),
        "speedup": round(statistics.median(t / n for t, n in zip(torch_s, native_s, strict=True)), 2),
        "max_abs_error_native": errors["native"],
        "max_abs_error_torch": errors["torch"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    args = setup(parser)
    load_s, available = timed(native_decode_available)   # the cold regime: a build, or a load from the cache
    if not available:
        parser.exit(1, "the native kernel could not be built here (see the warning above)\n")
    dtypes = [torch.bfloat16, torch.float32] if args.dtype == "auto" else [getattr(torch, args.dtype)]
    repeats = args.repeats or 10
    repeats += repeats % 2
    results: dict[str, dict[str, dict[str, float]]] = {}
    for dtype in dtypes:
        name = str(dtype).removeprefix("torch.")
        results[name] = {}
        for model, (heads, kv_heads, head_dim) in MODELS.items():
            for batch in BATCHES:
                for max_context in MAX_CONTEXTS:
                    key = f"{model}_b{batch}_ctx{max_context}"
                    results[name][key] = measure(dtype, heads, kv_heads, head_dim, batch, max_context, repeats,
                                                 seed=len(results[name]))
                    log(f"{name} {key}: {results[name][key]}")
    emit({
        "speedup_median": {d: statistics.median(r["speedup"] for r in rows.values()) for d, rows in results.items()},
        "speedup_min": {d: min(r["speedup"] for r in rows.values()) for d, rows in results.items()},
        "by_shape": results,
        "repeats": repeats,
        "kernel_build_or_load_s": round(load_s, 3),
        "block_size": BLOCK_SIZE,
        "torch_threads": torch.get_num_threads(),
    }, args.json)


if __name__ == "__main__":
    main()
