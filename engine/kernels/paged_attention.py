"""Paged attention in plain torch: the CPU path and the reference for the Triton kernels.

KV pools are per layer, `[num_blocks, block_size, num_kv_heads, head_dim]`; a sequence's tokens
live in the blocks its block table names, token i at slot `block_table[i // bs] * bs + i % bs`.
Work is batched into a few big tensor ops (gather + SDPA); loops run over sequences only in
prefill, where each sequence has its own query length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import torch
import torch.nn.functional as F


def store_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Write new keys/values k, v [N, Hkv, D] into the pools at flat slots slot_mapping int64 [N]."""
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    # view the pools as one flat list of slots so one vectorised index_copy_ writes every token
    k_cache.view(num_blocks * block_size, num_kv_heads, head_dim).index_copy_(0, slot_mapping, k)
    v_cache.view(num_blocks * block_size, num_kv_heads, head_dim).index_copy_(0, slot_mapping, v)


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
) -> torch.Tensor:
    """One query token per sequence over its paged context.

    q [B, H, D]; k_cache, v_cache [num_blocks, block_size, Hkv, D]; block_tables int32 [B, max_blocks];
    context_lens int32 [B] (tokens of context incl. the current one, already stored); -> out [B, H, D].

    Why groups: every sequence is padded to the longest context of its group, so sequences are
    grouped by context length (about 3x faster than one padded batch for contexts of 32-768 tokens
    on CPU: less padding, and each group's gathered K/V stays in cache).
    """
    batch = q.shape[0]
    num_groups = min(MAX_DECODE_GROUPS, batch // DECODE_GROUP_ROWS)
    if num_groups <= 1:
        return _decode_padded(q, k_cache, v_cache, block_tables, context_lens, scale)
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
        out[index] = _decode_padded(
            q[index], k_cache, v_cache, block_tables[index, :width], context_lens[index], scale
        )
    return out


def _decode_padded(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Decode with every context padded to the block table's width: one gather + one SDPA."""
    num_heads = q.shape[1]
    keys = gather_kv(k_cache, block_tables)      # [B, Hkv, L, D]
    values = gather_kv(v_cache, block_tables)    # [B, Hkv, L, D]
    max_len = keys.shape[2]
    positions = torch.arange(max_len, device=q.device)
    valid = positions[None, :] < context_lens.to(q.device)[:, None].long()  # [B, L]
    out = F.scaled_dot_product_attention(
        q.unsqueeze(2),                  # [B, H, 1, D]
        keys, values,
        attn_mask=valid[:, None, None, :],  # [B, 1, 1, L]
        scale=scale,
        enable_gqa=num_heads != keys.shape[1],
    )  # [B, H, 1, D]
    return out.squeeze(2)


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
) -> torch.Tensor:
    """Causal attention for packed prompt chunks, each attending to its cached prefix and itself.

    q [N, H, D], k, v [N, Hkv, D] (the new tokens, packed sequence after sequence, already stored in
    the pools); block_tables int32 [B, max_blocks]; query_lens[i] new tokens of sequence i whose
    context (cached prefix + new tokens) is context_lens[i] long. -> out [N, H, D].
    """
    num_heads = q.shape[1]
    gqa = num_heads != k.shape[1]
    out = torch.empty_like(q)
    start = 0
    # SDPA gets 4-D [1, heads, len, D] inputs: on CPU 3-D inputs fall back to a much slower kernel
    for i, (query_len, context_len) in enumerate(zip(query_lens, context_lens, strict=True)):
        end = start + query_len
        q_i = q[start:end].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        if context_len == query_len:
            # nothing cached before this chunk: attend to the fresh k/v, plain causal mask
            k_i = k[start:end].transpose(0, 1).unsqueeze(0)  # [1, Hkv, n, D]
            v_i = v[start:end].transpose(0, 1).unsqueeze(0)
            o_i = F.scaled_dot_product_attention(q_i, k_i, v_i, is_causal=True, scale=scale, enable_gqa=gqa)
        else:
            num_blocks = -(-context_len // k_cache.shape[1])
            table = block_tables[i : i + 1, :num_blocks]
            k_i = gather_kv(k_cache, table)[:, :, :context_len]  # [1, Hkv, ctx, D]
            v_i = gather_kv(v_cache, table)[:, :, :context_len]
            # query t sits at absolute position (context_len - query_len + t); it sees keys j <= that
            offset = context_len - query_len
            key_pos = torch.arange(context_len, device=q.device)
            query_pos = torch.arange(query_len, device=q.device) + offset
            mask = key_pos[None, :] <= query_pos[:, None]  # [n, ctx]
            o_i = F.scaled_dot_product_attention(q_i, k_i, v_i, attn_mask=mask, scale=scale, enable_gqa=gqa)
        out[start:end] = o_i[0].transpose(0, 1)
        start = end
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
) -> torch.Tensor:
    """Dispatch: the Triton kernel for CUDA tensors when it imports, the torch path otherwise."""
    if q.is_cuda:
        kernel = _triton_decode()
        if kernel is not None:
            return kernel(q, k_cache, v_cache, block_tables, context_lens, scale)
    return paged_attention_decode_torch(q, k_cache, v_cache, block_tables, context_lens, scale)
