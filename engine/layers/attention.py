"""Attention over the paged KV cache for a mixed batch: decode tokens first, then prefill chunks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine.kernels.paged_attention import paged_attention_decode, paged_attention_prefill_torch, store_kv


@dataclass(slots=True)
class AttentionMetadata:
    """Where each token of a step's packed batch goes and what it attends to.

    The batch packs `num_decode_tokens` decode tokens (one per decoding sequence) first, then the
    prefill chunks sequence after sequence.
    """

    slot_mapping: torch.Tensor            # int64 [N]: flat KV slot of every new token
    num_decode_tokens: int
    decode_block_tables: torch.Tensor     # int32 [num_decodes, max_blocks]
    decode_context_lens: torch.Tensor     # int32 [num_decodes]
    prefill_block_tables: torch.Tensor    # int32 [num_prefills, max_blocks]
    prefill_query_lens: list[int]
    prefill_context_lens: list[int]


class PagedAttention(nn.Module):
    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        # the model runner points these at this layer's pools once the KV cache is allocated
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """q [N, H, D], k, v [N, Hkv, D] -> [N, H, D]."""
        store_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        num_decode = meta.num_decode_tokens
        if num_decode == q.shape[0]:
            return paged_attention_decode(
                q, self.k_cache, self.v_cache, meta.decode_block_tables, meta.decode_context_lens, self.scale
            )
        prefill_out = paged_attention_prefill_torch(
            q[num_decode:], k[num_decode:], v[num_decode:], self.k_cache, self.v_cache,
            meta.prefill_block_tables, meta.prefill_query_lens, meta.prefill_context_lens, self.scale,
        )
        if num_decode == 0:
            return prefill_out
        decode_out = paged_attention_decode(
            q[:num_decode], self.k_cache, self.v_cache, meta.decode_block_tables, meta.decode_context_lens,
            self.scale,
        )
        return torch.cat((decode_out, prefill_out), dim=0)
