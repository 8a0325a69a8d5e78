"""Linear layers that meet only a few row counts on CPU in bf16 / fp16.

On CPU, torch runs bf16 and fp16 matmuls through oneDNN, which builds and caches a kernel ("primitive") for each
shape it meets. A step's row count (tokens in the batch, rows sampled) takes every value from 1 to
max_num_batched_tokens, so with exact shapes the cache fills with thousands of kernels and then churns
(`benchmarks.bucketed_linear`, avx512_bf16 CPU, 400 row counts x 5 weight shapes: RSS +894 MB, passes of 8.0 and
6.2 s). Rounding the rows up to a few buckets (zero rows appended, their outputs dropped) keeps the shapes, and so
the memory, bounded: +139 MB, passes of 4.5 and 4.3 s; the engine's throughput is unchanged. Rows are
independent in a matmul, so the real rows' outputs do not change (a soak's engine core: 15.1 -> 1.8 MB/min).

Each kernel oneDNN keeps holds ~0.55 MB whatever its shape (measured from 1 to 2,048 rows, 256 to 4,096 columns).
Built as traffic first reaches each bucket, they made a long-running engine core grow for minutes after start, so
the engine meets every bucket once at start (`warm_up_buckets`, ~0.3 s and ~125 MB for the bundled model): its
memory at ready is its memory under any traffic.

fp32 runs through MKL, which has no per-shape cache: its rows are never padded, nor on GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

PADDED_DTYPES = (torch.bfloat16, torch.float16)
# (largest row count of the range, step the rows are rounded up to within it); beyond the last, LARGE_STEP
ROW_BUCKETS = ((16, 1), (128, 8), (512, 32), (2048, 128))
LARGE_STEP = 512


def bucketed_rows(rows: int) -> int:
    """The row count a matmul of `rows` rows runs at: rows itself up to 16, then rounded up (by at most a
    quarter past 128 rows), 54 distinct counts up to 2,048."""
    for limit, step in ROW_BUCKETS:
        if rows <= limit:
            return -(-rows // step) * step
    return -(-rows // LARGE_STEP) * LARGE_STEP


class BucketedLinear(nn.Linear):
    """nn.Linear over [rows, in_features] inputs whose rows are padded to `bucketed_rows` where oneDNN runs it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        if not pads_rows(x) or x.dim() != 2:
            return F.linear(x, self.weight, self.bias)
        padded = bucketed_rows(rows)
        if padded == rows:
            return F.linear(x, self.weight, self.bias)
        return F.linear(F.pad(x, (0, 0, 0, padded - rows)), self.weight, self.bias)[:rows]


def row_buckets(max_rows: int) -> list[int]:
    """Every row count a matmul of 1..max_rows rows runs at (`bucketed_rows`), ascending."""
    return sorted({bucketed_rows(rows) for rows in range(1, max_rows + 1)})


def pads_rows(tensor: torch.Tensor) -> bool:
    """Whether matmuls of `tensor` (an input or a weight) run through oneDNN's per-shape kernels, so rows are padded."""
    return tensor.device.type == "cpu" and tensor.dtype in PADDED_DTYPES


@torch.inference_mode()
def warm_up_buckets(linears: Iterable[BucketedLinear], max_rows: int) -> int:
    """Run each distinct weight shape once at every bucketed row count up to `max_rows`, so oneDNN builds the
    kernels traffic will need now, not while serving. Layers of one shape share their kernels: one of them is run.
    Returns the number of matmuls run (0 where rows are not padded: fp32, GPUs)."""
    done: set[tuple[object, ...]] = set()
    runs = 0
    for linear in linears:
        weight = linear.weight
        key = (tuple(weight.shape), weight.dtype, linear.bias is not None)
        if not pads_rows(weight) or key in done:
            continue
        done.add(key)
        for rows in row_buckets(max_rows):
            linear(torch.zeros(rows, linear.in_features, dtype=weight.dtype, device=weight.device))
            runs += 1
    return runs
