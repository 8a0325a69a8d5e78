"""Paged decode attention on CPU through the native kernel (engine/kernels/native/paged_decode.c).

The torch path gathers every sequence's context into a padded copy, then runs SDPA over it; on CPU at a
decode's shapes (a few query rows per KV head) that is bound by per-call overhead, not arithmetic. The
kernel reads keys and values straight from the block pools instead: 2.4-3x less time per token than the
torch path at head sizes 32 and 128 in bf16, 1.4-2x in fp32 (`benchmarks.native_attention`). It computes
in fp32 and serves bf16 and fp32 pools that are not quantized; anything else keeps the torch path.

The kernel splits a batch over `torch.get_num_threads()` threads only where the work pays for waking them, on
helper threads it keeps between calls (see the C source): a small batch runs on the calling thread alone.
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.kernels.native_build import load_library

NATIVE_DTYPES = (torch.bfloat16, torch.float32)
_ARGTYPES = (
    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,   # q, k_cache, v_cache, block_tables
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,                     # table stride, context_lens, out
    ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,  # batch, heads, kv heads, dim, bs
    ctypes.c_float, ctypes.c_int, ctypes.c_int,                           # scale, is_bf16, threads
)


@cache
def _kernel() -> ctypes._CFuncPtr | None:
    library = load_library("paged_decode")
    if library is None:
        return None
    function = library.paged_decode_attention
    function.argtypes = _ARGTYPES
    function.restype = ctypes.c_int
    return function


def native_decode_available() -> bool:
    """Whether the kernel is built and loaded (building it on first call)."""
    return _kernel() is not None


def supports(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    return (q.device.type == "cpu" and q.dtype in NATIVE_DTYPES and k_cache.dtype == v_cache.dtype == q.dtype
            and k_cache.is_contiguous() and v_cache.is_contiguous() and k_cache.shape == v_cache.shape
            and q.shape[1] % k_cache.shape[2] == 0 and _kernel() is not None)


def paged_attention_decode_native(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """The contract of `paged_attention_decode_torch` without quantized blocks; call only where `supports`."""
    kernel = _kernel()
    assert kernel is not None
    q = q.contiguous()
    tables = block_tables.to(torch.int32)
    if tables.stride(-1) != 1:
        tables = tables.contiguous()
    lens = context_lens.to(torch.int32).contiguous()
    batch, heads, dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    status = kernel(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), tables.data_ptr(), tables.stride(0),
        lens.data_ptr(), out.data_ptr(), batch, heads, kv_heads, dim, block_size, scale,
        int(q.dtype == torch.bfloat16), torch.get_num_threads(),
    )
    if status:
        raise RuntimeError(f"native paged decode attention failed (status {status})")
    return out
