"""Linear layers that meet only a few row counts on CPU in bf16 / fp16.

On CPU, torch runs bf16 and fp16 matmuls through oneDNN, which builds and caches a kernel ("primitive") for each
shape it meets. A step's row count (tokens in the batch, rows sampled) takes every value from 1 to
max_num_batched_tokens, so with exact shapes the cache fills with thousands of kernels and then churns
(`benchmarks.bucketed_linear`, avx512_bf16 CPU, 400 row counts x 5 weight shapes: RSS +894 MB, passes of 8.0 and
6.2 s). Rounding the rows up to a few buckets (zero rows appended, their outputs dropped) keeps the shapes, and so
the memory, bounded: +139 MB, passes of 4.5 and 4.3 s; the engine's throughput is unchanged. Rows are
independent in a matmul, so the real rows' outputs do not change (a soak's engine core: 15.1 -> 1.8 MB/min).

fp32 runs through MKL, which has no per-shape cache: its rows are never padded, nor on GPUs.
"""

from __future__ import annotations

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
        if x.device.type != "cpu" or x.dtype not in PADDED_DTYPES or x.dim() != 2:
            return F.linear(x, self.weight, self.bias)
        padded = bucketed_rows(rows)
        if padded == rows:
            return F.linear(x, self.weight, self.bias)
        return F.linear(F.pad(x, (0, 0, 0, padded - rows)), self.weight, self.bias)[:rows]
