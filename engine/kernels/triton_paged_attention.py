"""Triton kernel: paged-attention decode (one query token per sequence), GPU path.

Each sequence's keys and values live in fixed-size blocks of a shared pool; its block table maps
logical block j (tokens j*block_size .. (j+1)*block_size-1) to a physical block of the pool. The
plain-torch reference with the same signature is `engine.kernels.paged_attention.
paged_attention_decode_torch` (the CPU path); tests run this kernel under TRITON_INTERPRET=1 against
a reference.

One program handles one (sequence, query head) pair and walks that sequence's blocks with an
online softmax (running max and normaliser in fp32), so memory traffic is one pass over the cached
keys and values. GQA: query head h reads kv head h // (num_heads // num_kv_heads).

Quantized cache (`engine.kernels.kv_quant`): block ids >= num_full name quantized blocks, stored as
rows (codes, then scale and min). The kernel reads their int8 or packed int4 codes and dequantizes
in registers: keys with a per-channel (scale, min) of the block, values with a per-token
(scale, min) of each channel group.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.kv_quant import QuantizedBlocks, meta_dtype, row_bytes


@triton.jit
def _full_block(
    k_cache_ptr, v_cache_ptr, block, slots, dims, kv_head, load_mask,
    k_stride_block, k_stride_pos, k_stride_head, v_stride_block, v_stride_pos, v_stride_head,
):
    k_offsets = block * k_stride_block + slots[:, None] * k_stride_pos + kv_head * k_stride_head + dims[None, :]
    v_offsets = block * v_stride_block + slots[:, None] * v_stride_pos + kv_head * v_stride_head + dims[None, :]
    keys = tl.load(k_cache_ptr + k_offsets, mask=load_mask, other=0.0).to(tl.float32)       # [Bp, Dp]
    values = tl.load(v_cache_ptr + v_offsets, mask=load_mask, other=0.0).to(tl.float32)     # [Bp, Dp]
    return keys, values


@triton.jit
def _row_codes(rows_ptr, row, element, load_mask, ROW_BYTES: tl.constexpr, BITS: tl.constexpr):
    """Codes of `element` in quantized row `row` (int4: element 2i low nibble, 2i + 1 high)."""
    if BITS == 8:
        return tl.load(rows_ptr + row * ROW_BYTES + element, mask=load_mask, other=0).to(tl.float32)
    packed = tl.load(rows_ptr + row * ROW_BYTES + element // 2, mask=load_mask, other=0).to(tl.int32)
    return ((packed >> ((element % 2) * 4)) & 0xF).to(tl.float32)


@triton.jit
def _quantized_block(
    k_rows_ptr, k_meta_ptr, v_rows_ptr, v_meta_ptr, block, slots, dims, kv_head, num_kv_heads, load_mask,
    BITS: tl.constexpr, VALUE_GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    K_ROW_BYTES: tl.constexpr, V_ROW_BYTES: tl.constexpr, META_BYTES: tl.constexpr,
):
    # keys: row (block, head, channel) holds the channel's tokens, then its (scale, min)
    k_row = (block * num_kv_heads + kv_head) * HEAD_DIM + dims                                          # [Dp]
    k_meta = k_meta_ptr + k_row * (K_ROW_BYTES // META_BYTES) + BLOCK_SIZE * BITS // 8 // META_BYTES
    k_scale = tl.load(k_meta, mask=dims < HEAD_DIM, other=0.0).to(tl.float32)
    k_min = tl.load(k_meta + 1, mask=dims < HEAD_DIM, other=0.0).to(tl.float32)
    k_codes = _row_codes(k_rows_ptr, k_row[None, :], slots[:, None], load_mask, K_ROW_BYTES, BITS)     # [Bp, Dp]
    keys = k_codes * k_scale[None, :] + k_min[None, :]
    # values: row (block, head, token, group) holds the group's channels, then its (scale, min)
    groups = HEAD_DIM // VALUE_GROUP
    v_row = (((block * num_kv_heads + kv_head) * BLOCK_SIZE + slots[:, None]) * groups
             + (dims // VALUE_GROUP)[None, :])                                                         # [Bp, Dp]
    v_meta = v_meta_ptr + v_row * (V_ROW_BYTES // META_BYTES) + VALUE_GROUP * BITS // 8 // META_BYTES
    v_scale = tl.load(v_meta, mask=load_mask, other=0.0).to(tl.float32)
    v_min = tl.load(v_meta + 1, mask=load_mask, other=0.0).to(tl.float32)
    v_codes = _row_codes(v_rows_ptr, v_row, (dims % VALUE_GROUP)[None, :], load_mask, V_ROW_BYTES, BITS)
    values = v_codes * v_scale + v_min
    return keys, values


@triton.jit
def _paged_attention_decode_kernel(
    out_ptr,                # [B, H, D]
    q_ptr,                  # [B, H, D]
    k_cache_ptr,            # [num_full, block_size, Hkv, D]
    v_cache_ptr,            # [num_full, block_size, Hkv, D]
    kq_ptr, km_ptr,         # quantized keys: uint8 rows [Nq, Hkv, D, K_ROW_BYTES], the same memory as scale/min dtype
    vq_ptr, vm_ptr,         # quantized values: uint8 rows [Nq, Hkv, bs, D/G, V_ROW_BYTES], likewise
    block_tables_ptr,       # [B, max_blocks] int32
    context_lens_ptr,       # [B] int32
    scale,
    num_full,               # block ids >= num_full are quantized blocks
    q_stride_seq, q_stride_head,
    out_stride_seq, out_stride_head,
    k_stride_block, k_stride_pos, k_stride_head,
    v_stride_block, v_stride_pos, v_stride_head,
    num_kv_heads,
    block_tables_stride,
    QUANT_BITS: tl.constexpr,          # 0: no quantized blocks; 8 or 4
    VALUE_GROUP: tl.constexpr,
    K_ROW_BYTES: tl.constexpr,
    V_ROW_BYTES: tl.constexpr,
    META_BYTES: tl.constexpr,          # bytes of a scale (or min)
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

        if QUANT_BITS > 0:
            if physical_block >= num_full:
                keys, values = _quantized_block(
                    kq_ptr, km_ptr, vq_ptr, vm_ptr, physical_block - num_full, slots, dims, kv_head, num_kv_heads,
                    load_mask, QUANT_BITS, VALUE_GROUP, HEAD_DIM, BLOCK_SIZE, K_ROW_BYTES, V_ROW_BYTES, META_BYTES)
            else:
                keys, values = _full_block(
                    k_cache_ptr, v_cache_ptr, physical_block, slots, dims, kv_head, load_mask,
                    k_stride_block, k_stride_pos, k_stride_head, v_stride_block, v_stride_pos, v_stride_head)
        else:
            keys, values = _full_block(
                k_cache_ptr, v_cache_ptr, physical_block, slots, dims, kv_head, load_mask,
                k_stride_block, k_stride_pos, k_stride_head, v_stride_block, v_stride_pos, v_stride_head)
        scores = tl.sum(keys * q[None, :], axis=1)                                          # [Bp]
        scores = tl.where(token_valid, scores, float("-inf"))

        # The first block always holds a valid token (context_len >= 1), so new_max is finite.
        new_max = tl.maximum(running_max, tl.max(scores, axis=0))
        probs = tl.exp(scores - new_max)                                                    # [Bp]
        rescale = tl.exp(running_max - new_max)
        running_sum = running_sum * rescale + tl.sum(probs, axis=0)

        acc = acc * rescale + tl.sum(probs[:, None] * values, axis=0)                       # [Dp]
        running_max = new_max

    # An empty context (not a real decode) yields zeros instead of 0/0.
    out = tl.where(running_sum > 0, acc / running_sum, 0.0)
    tl.store(out_ptr + seq * out_stride_seq + head * out_stride_head + dims,
             out.to(out_ptr.dtype.element_ty), mask=dim_valid)


def paged_attention_decode_triton(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
    quantized: QuantizedBlocks | None = None,
) -> torch.Tensor:
    """Attention of one query token per sequence over its paged KV cache.

    q [B, H, D]; k_cache, v_cache [num_full, block_size, Hkv, D] (H a multiple of Hkv);
    block_tables int32 [B, max_blocks] (entries past a sequence's last block are ignored; ids >= num_full
    name blocks of `quantized`); context_lens int32 [B], each >= 1 and <= max_blocks * block_size.
    Returns out [B, H, D] in q's dtype.
    """
    _check_arguments(q, k_cache, v_cache, block_tables, context_lens)
    if quantized is not None:
        _check_quantized(quantized, k_cache)
    batch, num_heads, head_dim = q.shape
    num_full, block_size, num_kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    if batch == 0:
        return out
    # without a quantized pool, the full-precision pools stand in for its (never read) pointers
    kq, km, vq, vm = k_cache, k_cache, v_cache, v_cache
    bits, value_group, k_row, v_row, meta_bytes = 0, 1, 1, 1, 1
    if quantized is not None:
        bits, value_group = quantized.bits, quantized.group_size
        kq, vq = quantized.k_rows, quantized.v_rows
        km, vm = kq.view(-1).view(meta_dtype(bits)), vq.view(-1).view(meta_dtype(bits))
        k_row, v_row, meta_bytes = kq.shape[-1], vq.shape[-1], km.element_size()
    grid = (batch, num_heads)
    _paged_attention_decode_kernel[grid](
        out, q, k_cache, v_cache, kq, km, vq, vm, block_tables, context_lens, float(scale), num_full,
        q.stride(0), q.stride(1),
        out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        num_kv_heads,
        block_tables.stride(0),
        QUANT_BITS=bits,
        VALUE_GROUP=value_group,
        K_ROW_BYTES=k_row,
        V_ROW_BYTES=v_row,
        META_BYTES=meta_bytes,
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


def _check_quantized(quantized: QuantizedBlocks, k_cache: torch.Tensor) -> None:
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    num_blocks, bits, group = quantized.num_blocks, quantized.bits, quantized.group_size
    expected = {
        "k_rows": (num_blocks, num_kv_heads, head_dim, row_bytes(block_size, bits)),
        "v_rows": (num_blocks, num_kv_heads, block_size, head_dim // group, row_bytes(group, bits)),
    }
    for name, shape in expected.items():
        tensor = getattr(quantized, name)
        if tuple(tensor.shape) != shape or tensor.dtype != torch.uint8:
            raise ValueError(f"quantized {name} must be uint8 {shape}, got {tensor.dtype} {tuple(tensor.shape)}")
        if not tensor.is_contiguous() or tensor.device != k_cache.device:
            raise ValueError(f"quantized {name} must be contiguous and on {k_cache.device}")
    # scales are read as meta_dtype elements of the same memory: each row must hold a whole number of them
    meta = torch.empty(0, dtype=meta_dtype(bits)).element_size()
    if any(x % meta for x in (row_bytes(block_size, bits), row_bytes(group, bits), block_size * bits // 8,
                              group * bits // 8)):
        raise ValueError(f"int{bits} rows of {block_size} and {group} values do not align their scales")
