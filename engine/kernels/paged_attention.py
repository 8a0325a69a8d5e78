"""Paged attention in plain torch: the CPU path and the reference for the Triton kernels.

KV pools are per layer, `[num_blocks, block_size, num_kv_heads, head_dim]`; a sequence's tokens
live in the blocks its block table names, token i at slot `block_table[i // bs] * bs + i % bs`.
With a quantized cache, ids >= num_blocks name blocks of a `QuantizedBlocks` pool (block id -
num_blocks); they are dequantized as they are gathered. Work is batched into a few big tensor ops
(gather + SDPA); loops run over sequences only in prefill, where each sequence has its own query length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import torch
import torch.nn.functional as F

from engine.kernels.cpu_paged_attention import paged_attention_decode_native
from engine.kernels.cpu_paged_attention import supports as native_supports
from engine.kernels.kv_quant import (
    QuantizedBlocks,
    dequantize_keys,
    dequantize_values,
    gather_keys_transposed,
    gather_values,
    quantize_keys,
    quantize_values,
    quantized_boundary,
)


def store_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Write new keys/values k, v [N, Hkv, D] into the pools at flat slots slot_mapping int64 [N]."""
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    # view the pools as one flat list of slots so one vectorised index_copy_ writes every token
    k_cache.view(num_blocks * block_size, num_kv_heads, head_dim).index_copy_(0, slot_mapping, k)
    v_cache.view(num_blocks * block_size, num_kv_heads, head_dim).index_copy_(0, slot_mapping, v)


def store_kv_blocks(
    k: torch.Tensor, v: torch.Tensor, quantized: QuantizedBlocks, first_tokens: torch.Tensor, block_ids: torch.Tensor,
) -> None:
    """Quantize whole blocks of new tokens: block i holds k, v [first_tokens[i] : first_tokens[i] + bs].

    k, v [N, Hkv, D]; first_tokens, block_ids int64 [n] (block_ids index the quantized pool)."""
    block_size = quantized.block_size
    rows = first_tokens[:, None] + torch.arange(block_size, device=k.device)   # [n, bs]
    quantized.write(block_ids, k[rows], v[rows])                                 # [n, bs, Hkv, D] each


def gather_kv(
    cache: torch.Tensor, block_tables: torch.Tensor
) -> torch.Tensor:
    """cache [num_blocks, bs, Hkv, D], block_tables [B, max_blocks] -> [B, Hkv, max_blocks * bs, D].

    Padding entries (< 0) of a block table read block 0; callers mask them out by context length."""
    batch, max_blocks = block_tables.shape
    _, block_size, num_kv_heads, head_dim = cache.shape
    # index_select copies whole blocks row by row: ~1.7x faster on CPU than advanced indexing
    flat = block_tables.reshape(-1).clamp(min=0).long()
    gathered = cache.index_select(0, flat)  # [B * max_blocks, bs, Hkv, D]
    return gathered.view(batch, max_blocks * block_size, num_kv_heads, head_dim).transpose(1, 2)


def gather_kv_mixed(
    k_cache: torch.Tensor, v_cache: torch.Tensor, quantized: QuantizedBlocks | None, block_tables: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys, values [B, Hkv, max_blocks * bs, D] of full-precision and quantized blocks alike.

    Quantized rows are dequantized as they are gathered; the few full-precision blocks a table names
    (the recent window) are then copied over their rows."""
    if quantized is None:
        return gather_kv(k_cache, block_tables), gather_kv(v_cache, block_tables)
    batch, max_blocks = block_tables.shape
    num_full, block_size, num_kv_heads, head_dim = k_cache.shape
    flat = block_tables.reshape(-1).clamp(min=0).long()                      # [B * max_blocks]
    full_rows = (flat < num_full).nonzero().squeeze(1)
    if full_rows.numel() == flat.numel():
        return gather_kv(k_cache, block_tables), gather_kv(v_cache, block_tables)
    keys, values = quantized.read((flat - num_full).clamp(min=0), k_cache.dtype)   # [B * max_blocks, bs, Hkv, D]
    if full_rows.numel():
        full_ids = flat.index_select(0, full_rows)
        keys.index_copy_(0, full_rows, k_cache.index_select(0, full_ids))
        values.index_copy_(0, full_rows, v_cache.index_select(0, full_ids))
    shape = (batch, max_blocks * block_size, num_kv_heads, head_dim)
    return keys.view(shape).transpose(1, 2), values.view(shape).transpose(1, 2)


# decode batches are split into groups of about this many sequences of similar context length
DECODE_GROUP_ROWS = 16
MAX_DECODE_GROUPS = 8


def paged_attention_decode_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    quantized: QuantizedBlocks | None = None,
    *,
    reference: bool = False,
) -> torch.Tensor:
    """One query token per sequence over its paged context.

    q [B, H, D]; k_cache, v_cache [num_blocks, block_size, Hkv, D]; block_tables int32 [B, max_blocks];
    context_lens int32 [B] (tokens of context incl. the current one, already stored); quantized: the
    pool that block ids >= num_blocks name, if any; -> out [B, H, D]. With quantized blocks the
    keys and values are read by the fused gathers of `engine.kernels.kv_quant` (`_decode_quantized`);
    reference=True dequantizes whole blocks in plain torch first, then runs one SDPA (the reference).

    Why groups: every sequence is padded to the longest context of its group, so sequences are
    grouped by context length (about 3x faster than one padded batch for contexts of 32-768 tokens
    on CPU: less padding, and each group's gathered K/V stays in cache).
    """
    decode = _decode_padded if quantized is None or reference else _decode_quantized
    batch = q.shape[0]
    num_groups = min(MAX_DECODE_GROUPS, batch // DECODE_GROUP_ROWS)
    if num_groups <= 1:
        return decode(q, k_cache, v_cache, block_tables, context_lens, scale, quantized)
    block_size = k_cache.shape[1]
    lens = context_lens.tolist()
    order = sorted(range(batch), key=lens.__getitem__)
    in_order = order == list(range(batch))  # the model runner sorts decodes, so usually no gather
    out = torch.empty_like(q)
    size = -(-batch // num_groups)
    for start in range(0, batch, size):
        rows = order[start : start + size]
        width = -(-max(lens[r] for r in rows) // block_size)
        if in_order:
            index: slice | torch.Tensor = slice(rows[0], rows[-1] + 1)
        else:
            index = torch.tensor(rows, device=q.device)
        out[index] = decode(
            q[index], k_cache, v_cache, block_tables[index, :width], context_lens[index], scale, quantized
        )
    return out


def _decode_padded(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    quantized: QuantizedBlocks | None,
) -> torch.Tensor:
    """Decode with every context padded to the block table's width: one gather + one SDPA.

    The query heads that share a KV head are that head's query rows ([B, Hkv, H / Hkv, D]), so no KV head is
    repeated per query head (SDPA's enable_gqa copies them: 1.2-1.9x slower on CPU at 2-4 query heads per KV
    head); query head h reads KV head h // (H / Hkv) either way."""
    batch, num_heads, head_dim = q.shape
    keys, values = gather_kv_mixed(k_cache, v_cache, quantized, block_tables)   # [B, Hkv, L, D] each
    max_len = keys.shape[2]
    positions = torch.arange(max_len, device=q.device)
    valid = positions[None, :] < context_lens.to(q.device)[:, None].long()  # [B, L]
    num_kv_heads = keys.shape[1]
    out = F.scaled_dot_product_attention(
        q.reshape(batch, num_kv_heads, num_heads // num_kv_heads, head_dim),   # [B, Hkv, group, D]
        keys, values,
        attn_mask=valid[:, None, None, :],  # [B, 1, 1, L]
        scale=scale,
    )  # [B, Hkv, group, D]
    return out.reshape(batch, num_heads, head_dim)


def _decode_quantized(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    quantized: QuantizedBlocks | None,
) -> torch.Tensor:
    """Decode over quantized and full-precision blocks without dequantizing into a padded copy first.

    Attention does not care in which order a query meets its keys, so the columns of the block
    tables that hold quantized blocks are read by the fused gathers (keys as K^T, values per head,
    dequantized in the one pass that gathers them) and the columns that hold full-precision blocks
    (the residual) by index_select; one masked softmax spans both parts. Computed in fp32.
    """
    assert quantized is not None
    batch, num_heads, head_dim = q.shape
    num_full, block_size, num_kv_heads, _ = k_cache.shape
    tables = block_tables.long()                                                    # [B, W]
    is_quantized = tables >= num_full
    # quantized history first, residual after (kv_spec): split at the columns where that changes
    any_quantized, all_quantized = torch.stack((is_quantized.any(dim=0), is_quantized.all(dim=0))).tolist()
    quantized_width = max((j + 1 for j, flag in enumerate(any_quantized) if flag), default=0)
    full_start = min((j for j, flag in enumerate(all_quantized) if not flag), default=len(all_quantized))
    positions = torch.arange(tables.shape[1] * block_size, device=q.device).view(-1, block_size)   # [W, bs]
    in_context = positions[None] < context_lens.to(q.device).long()[:, None, None]                 # [B, W, bs]
    # q [B, Hkv, H/Hkv, D], scaled once
    query = (q.float() * scale).view(batch, num_kv_heads, num_heads // num_kv_heads, head_dim)
    scores, values, masks = [], [], []
    if quantized_width:
        ids = (tables[:, :quantized_width] - num_full).clamp(min=0)                 # [B, Wq]
        scores.append(torch.matmul(query, gather_keys_transposed(quantized, ids)))  # [B, Hkv, H/Hkv, Lq]
        values.append(gather_values(quantized, ids))                                # [B, Hkv, Lq, D]
        masks.append((in_context[:, :quantized_width] & is_quantized[:, :quantized_width, None]).flatten(1))
    if full_start < tables.shape[1]:
        ids = tables[:, full_start:].masked_fill(is_quantized[:, full_start:], 0).clamp(min=0)   # [B, Wf]
        width = ids.shape[1] * block_size
        keys = k_cache.index_select(0, ids.reshape(-1)).view(batch, width, num_kv_heads, head_dim)
        scores.append(torch.matmul(query, keys.permute(0, 2, 3, 1).float()))        # [B, Hkv, H/Hkv, Lf]
        full_values = v_cache.index_select(0, ids.reshape(-1)).view(batch, width, num_kv_heads, head_dim)
        values.append(full_values.transpose(1, 2).float())                          # [B, Hkv, Lf, D]
        masks.append((in_context[:, full_start:] & ~is_quantized[:, full_start:, None]).flatten(1))
    logits = torch.cat(scores, dim=-1) if len(scores) > 1 else scores[0]           # [B, Hkv, H/Hkv, L]
    valid = torch.cat(masks, dim=-1) if len(masks) > 1 else masks[0]               # [B, L]
    probs = logits.masked_fill_(~valid[:, None, None, :], float("-inf")).softmax(dim=-1)
    out = torch.matmul(probs[..., : values[0].shape[2]], values[0])                # [B, Hkv, H/Hkv, D]
    if len(values) > 1:
        out.add_(torch.matmul(probs[..., values[0].shape[2] :], values[1]))
    return out.view(batch, num_heads, head_dim).to(q.dtype)


def paged_attention_prefill_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_lens: Sequence[int],
    context_lens: Sequence[int],
    scale: float,
    quantized: QuantizedBlocks | None = None,
    residual_tokens: int = 0,
) -> torch.Tensor:
    """Causal attention for packed prompt chunks, each attending to its cached prefix and itself.

    q [N, H, D], k, v [N, Hkv, D] (the new tokens, packed sequence after sequence); block_tables int32
    [B, max_blocks]; query_lens[i] new tokens of sequence i whose context (cached prefix + new tokens)
    is context_lens[i] long. The prefix is read from the pools (dequantized where quantized), the
    chunk's own tokens from k, v. With a quantized cache (residual_tokens > 0), each query sees the
    keys and values of blocks below its `quantized_boundary` as they are stored, quantized, exactly
    as it would in decode. -> out [N, H, D].
    """
    num_heads = q.shape[1]
    gqa = num_heads != k.shape[1]
    out = torch.empty_like(q)
    start = 0
    block_size = k_cache.shape[1]
    # SDPA gets 4-D [1, heads, len, D] inputs: on CPU 3-D inputs fall back to a much slower kernel
    for i, (query_len, context_len) in enumerate(zip(query_lens, context_lens, strict=True)):
        end = start + query_len
        q_i = q[start:end].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        # query t sits at absolute position (offset + t); it sees keys j <= that
        offset = context_len - query_len
        if quantized is not None and (quantized_boundary(context_len - 1, residual_tokens, block_size)
                                      > quantized_boundary(offset, residual_tokens, block_size)):
            out[start:end] = _prefill_crossing_residuals(
                q[start:end], k[start:end], v[start:end], k_cache, v_cache, quantized,
                block_tables[i : i + 1], offset, residual_tokens, scale)
            start = end
            continue
        if context_len == query_len:
            # nothing cached before this chunk: attend to the fresh k/v, plain causal mask
            k_i = k[start:end].transpose(0, 1).unsqueeze(0)  # [1, Hkv, n, D]
            v_i = v[start:end].transpose(0, 1).unsqueeze(0)
            o_i = F.scaled_dot_product_attention(q_i, k_i, v_i, is_causal=True, scale=scale, enable_gqa=gqa)
        else:
            table = block_tables[i : i + 1, : -(-offset // block_size)]
            k_prefix, v_prefix = gather_kv_mixed(k_cache, v_cache, quantized, table)   # [1, Hkv, >= offset, D]
            k_i = torch.cat((k_prefix[:, :, :offset], k[start:end].transpose(0, 1).unsqueeze(0)), dim=2)
            v_i = torch.cat((v_prefix[:, :, :offset], v[start:end].transpose(0, 1).unsqueeze(0)), dim=2)
            key_pos = torch.arange(context_len, device=q.device)
            query_pos = torch.arange(query_len, device=q.device) + offset
            mask = key_pos[None, :] <= query_pos[:, None]  # [n, ctx]
            o_i = F.scaled_dot_product_attention(q_i, k_i, v_i, attn_mask=mask, scale=scale, enable_gqa=gqa)
        out[start:end] = o_i[0].transpose(0, 1)
        start = end
    return out


def _prefill_crossing_residuals(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    quantized: QuantizedBlocks, table: torch.Tensor, offset: int, residual_tokens: int, scale: float,
) -> torch.Tensor:
    """One chunk whose later queries see some of its keys quantized: q [n, H, D], k, v [n, Hkv, D] at
    positions offset.. -> out [n, H, D].

    Queries run in segments that share a quantized boundary (one per `residual_tokens` positions);
    before each, the blocks that just crossed it are replaced by their stored (quantized) form."""
    n, num_heads, _ = q.shape
    block_size = k_cache.shape[1]
    context = offset + n
    keys, values = k, v                                                              # [ctx, Hkv, D] below
    if offset:
        k_prefix, v_prefix = gather_kv_mixed(k_cache, v_cache, quantized, table[:, : -(-offset // block_size)])
        keys = torch.cat((k_prefix[0, :, :offset].transpose(0, 1), k), dim=0)
        values = torch.cat((v_prefix[0, :, :offset].transpose(0, 1), v), dim=0)
    else:
        keys, values = k.clone(), v.clone()
    first = quantized_boundary(offset, residual_tokens, block_size)       # already quantized in the pools
    last = quantized_boundary(context - 1, residual_tokens, block_size)   # what the last query sees quantized
    span = slice(first * block_size, last * block_size)
    heads, dim = keys.shape[1:]
    blocks = (last - first, block_size, heads, dim)
    stored_keys = dequantize_keys(quantize_keys(keys[span].reshape(blocks), quantized.bits), quantized.bits,
                                  keys.dtype).reshape(-1, heads, dim)
    stored_values = dequantize_values(quantize_values(values[span].reshape(blocks), quantized.bits,
                                                      quantized.group_size), quantized.bits,
                                      values.dtype).reshape(-1, heads, dim)
    out = torch.empty_like(q)
    key_positions = torch.arange(context, device=q.device)
    position, seen = offset, first
    while position < context:
        segment_end = min(context, (position // residual_tokens + 1) * residual_tokens)
        boundary = quantized_boundary(position, residual_tokens, block_size)
        if boundary > seen:   # these blocks are quantized for this segment's queries on
            swap = slice(seen * block_size, boundary * block_size)
            local = slice((seen - first) * block_size, (boundary - first) * block_size)
            keys[swap], values[swap] = stored_keys[local], stored_values[local]
            seen = boundary
        rows = slice(position - offset, segment_end - offset)
        mask = key_positions[None, :segment_end] <= torch.arange(position, segment_end, device=q.device)[:, None]
        o = F.scaled_dot_product_attention(
            q[rows].transpose(0, 1).unsqueeze(0),                      # [1, H, m, D]
            keys[:segment_end].transpose(0, 1).unsqueeze(0),           # [1, Hkv, L, D]
            values[:segment_end].transpose(0, 1).unsqueeze(0),
            attn_mask=mask, scale=scale, enable_gqa=num_heads != heads,
        )
        out[rows] = o[0].transpose(0, 1)
        position = segment_end
    return out


@cache
def _triton_decode() -> Callable[..., torch.Tensor] | None:
    try:
        from engine.kernels.triton_paged_attention import paged_attention_decode_triton
    except Exception:  # noqa: BLE001 - no Triton / no GPU build: the torch path serves
        return None
    return paged_attention_decode_triton


def paged_attention_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    quantized: QuantizedBlocks | None = None,
) -> torch.Tensor:
    """Dispatch: the Triton kernel for CUDA tensors when it imports; on CPU the native kernel where it is built
    and the pools are bf16 or fp32, not quantized; the torch path otherwise."""
    if q.is_cuda:
        kernel = _triton_decode()
        if kernel is not None:
            return kernel(q, k_cache, v_cache, block_tables, context_lens, scale, quantized)
    elif quantized is None and native_supports(q, k_cache, v_cache):
        return paged_attention_decode_native(q, k_cache, v_cache, block_tables, context_lens, scale)
    return paged_attention_decode_torch(q, k_cache, v_cache, block_tables, context_lens, scale, quantized)
