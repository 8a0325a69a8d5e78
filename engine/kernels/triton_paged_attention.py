"""Triton kernel: paged-attention decode (one query token per sequence), GPU path.

Each sequence's keys and values live in fixed-size blocks of a shared pool; its block table maps
logical block j (tokens j*block_size .. (j+1)*block_size-1) to a physical block of the pool. The
plain-torch reference with the same signature is `engine.kernels.paged_attention.
paged_attention_decode_torch` (the CPU path); tests run this kernel under TRITON_INTERPRET=1 against
a reference.

One program handles one (sequence, query head) pair and walks that sequence's blocks with an
online softmax (running max and normaliser in fp32), so memory traffic is one pass over the cached
keys and values. GQA: query head h reads kv head h // (num_heads // num_kv_heads).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_attention_decode_kernel(
    out_ptr,                # [B, H, D]
    q_ptr,                  # [B, H, D]
    k_cache_ptr,            # [num_blocks, block_size, Hkv, D]
    v_cache_ptr,            # [num_blocks, block_size, Hkv, D]
    block_tables_ptr,       # [B, max_blocks] int32
    context_lens_ptr,       # [B] int32
    scale,
    q_stride_seq, q_stride_head,
    out_stride_seq, out_stride_head,
    k_stride_block, k_stride_pos, k_stride_head,
    v_stride_block, v_stride_pos, v_stride_head,
    block_tables_stride,
    QUERIES_PER_KV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_SIZE_PADDED: tl.constexpr,   # next power of two (tl.arange needs one)
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    kv_head = head // QUERIES_PER_KV
    context_len = tl.load(context_lens_ptr + seq)

    dims = tl.arange(0, HEAD_DIM_PADDED)                                     # [Dp]
    dim_valid = dims < HEAD_DIM
    q = tl.load(q_ptr + seq * q_stride_seq + head * q_stride_head + dims, mask=dim_valid, other=0.0)
    q = q.to(tl.float32) * scale                                             # [Dp]

    # Online softmax state: running max, running sum of exp, weighted sum of values.
    running_max = tl.full([], float("-inf"), tl.float32)
    running_sum = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([HEAD_DIM_PADDED], dtype=tl.float32)                      # [Dp]

    slots = tl.arange(0, BLOCK_SIZE_PADDED)                                  # [Bp]
    num_logical_blocks = tl.cdiv(context_len, BLOCK_SIZE)
    for logical_block in range(0, num_logical_blocks):
        physical_block = tl.load(block_tables_ptr + seq * block_tables_stride + logical_block).to(tl.int64)
        token_valid = (slots < BLOCK_SIZE) & (logical_block * BLOCK_SIZE + slots < context_len)  # [Bp]
        load_mask = token_valid[:, None] & dim_valid[None, :]                                # [Bp, Dp]

        k_offsets = (physical_block * k_stride_block + slots[:, None] * k_stride_pos
                     + kv_head * k_stride_head + dims[None, :])                              # [Bp, Dp]
        keys = tl.load(k_cache_ptr + k_offsets, mask=load_mask, other=0.0).to(tl.float32)
        scores = tl.sum(keys * q[None, :], axis=1)                                          # [Bp]
        scores = tl.where(token_valid, scores, float("-inf"))

        # The first block always holds a valid token (context_len >= 1), so new_max is finite.
        new_max = tl.maximum(running_max, tl.max(scores, axis=0))
        probs = tl.exp(scores - new_max)                                                    # [Bp]
        rescale = tl.exp(running_max - new_max)
        running_sum = running_sum * rescale + tl.sum(probs, axis=0)

        v_offsets = (physical_block * v_stride_block + slots[:, None] * v_stride_pos
                     + kv_head * v_stride_head + dims[None, :])                              # [Bp, Dp]
        values = tl.load(v_cache_ptr + v_offsets, mask=load_mask, other=0.0).to(tl.float32)
        acc = acc * rescale + tl.sum(probs[:, None] * values, axis=0)                       # [Dp]
        running_max = new_max

    # An empty context (not a real decode) yields zeros instead of 0/0.
    out = tl.where(running_sum > 0, acc / running_sum, 0.0)
    tl.store(out_ptr + seq * out_stride_seq + head * out_stride_head + dims,
             out.to(out_ptr.dtype.element_ty), mask=dim_valid)


def paged_attention_decode_triton(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
) -> torch.Tensor:
    """Attention of one query token per sequence over its paged KV cache.

    q [B, H, D]; k_cache, v_cache [num_blocks, block_size, Hkv, D] (H a multiple of Hkv);
    block_tables int32 [B, max_blocks] (entries past a sequence's last block are ignored);
    context_lens int32 [B], each >= 1 and <= max_blocks * block_size. Returns out [B, H, D] in q's dtype.
    """
    _check_arguments(q, k_cache, v_cache, block_tables, context_lens)
    batch, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    if batch == 0:
        return out
    grid = (batch, num_heads)
    _paged_attention_decode_kernel[grid](
        out, q, k_cache, v_cache, block_tables, context_lens, float(scale),
        q.stride(0), q.stride(1),
        out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0),
        QUERIES_PER_KV=num_heads // num_kv_heads,
        BLOCK_SIZE=block_size,
        BLOCK_SIZE_PADDED=triton.next_power_of_2(block_size),
        HEAD_DIM=head_dim,
        HEAD_DIM_PADDED=triton.next_power_of_2(head_dim),
    )
    return out


def _check_arguments(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    block_tables: torch.Tensor, context_lens: torch.Tensor,
) -> None:
    # Raw pointer arithmetic in the kernel: refuse anything that would make it read the wrong memory.
    if q.dim() != 3 or q.stride(2) != 1:
        raise ValueError(f"q must be [B, H, D] with contiguous head_dim, got {tuple(q.shape)}")
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(
            f"k_cache and v_cache must both be [num_blocks, block_size, Hkv, D], got "
            f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("k_cache and v_cache must have a contiguous head_dim")
    batch, num_heads, head_dim = q.shape
    num_kv_heads, cache_head_dim = k_cache.shape[2], k_cache.shape[3]
    if cache_head_dim != head_dim:
        raise ValueError(f"q head_dim {head_dim} != cache head_dim {cache_head_dim}")
    if num_kv_heads == 0 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    if block_tables.dtype != torch.int32 or block_tables.dim() != 2 or block_tables.shape[0] != batch:
        raise ValueError(f"block_tables must be int32 [B={batch}, max_blocks], got {block_tables.dtype} {tuple(block_tables.shape)}")
    if block_tables.stride(1) != 1:
        raise ValueError("block_tables rows must be contiguous")
    if context_lens.dtype != torch.int32 or tuple(context_lens.shape) != (batch,):
        raise ValueError(f"context_lens must be int32 [B={batch}], got {context_lens.dtype} {tuple(context_lens.shape)}")
    if batch > 1 and context_lens.stride(0) != 1:
        raise ValueError("context_lens must be contiguous")
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, context_lens)}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
