"""Attention over the paged KV cache for a mixed batch: decode tokens first, then prefill chunks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine.kernels.kv_quant import QuantizedBlocks
from engine.kernels.paged_attention import (
    paged_attention_decode,
    paged_attention_prefill_torch,
    store_kv,
    store_kv_blocks,
)


@dataclass(slots=True)
class AttentionMetadata:
    """Where each token of a step's packed batch goes and what it attends to.

    The batch packs `num_decode_tokens` decode tokens (one per decoding sequence) first, then the
    prefill chunks sequence after sequence. With a quantized cache, a block a prefill chunk writes
    whole and that later queries see quantized (engine.kv_spec) goes straight to a quantized block.
    """

    slot_mapping: torch.Tensor            # int64 [N] (or [len(full_token_index)]): flat full-precision slots
    num_decode_tokens: int
    decode_block_tables: torch.Tensor     # int32 [num_decodes, max_blocks]
    decode_context_lens: torch.Tensor     # int32 [num_decodes]
    prefill_block_tables: torch.Tensor    # int32 [num_prefills, max_blocks]
    prefill_query_lens: list[int]
    prefill_context_lens: list[int]
    # quantized cache only: tokens stored in full-precision slots (None: every token), and whole blocks
    # quantized on the way in, each as (packed index of its first token, quantized pool index)
    full_token_index: torch.Tensor | None = None     # int64 [N_full]
    quantized_first_tokens: torch.Tensor | None = None   # int64 [n]
    quantized_block_ids: torch.Tensor | None = None      # int64 [n]


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
        self.quantized: QuantizedBlocks | None = None
        self.residual_tokens = 0    # quantized cache: tokens quantized at a time (engine.kv_spec)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """q [N, H, D], k, v [N, Hkv, D] -> [N, H, D]."""
        self._store(k, v, meta)
        num_decode = meta.num_decode_tokens
        if num_decode == q.shape[0]:
            return paged_attention_decode(
                q, self.k_cache, self.v_cache, meta.decode_block_tables, meta.decode_context_lens, self.scale,
                self.quantized,
            )
        prefill_out = paged_attention_prefill_torch(
            q[num_decode:], k[num_decode:], v[num_decode:], self.k_cache, self.v_cache,
            meta.prefill_block_tables, meta.prefill_query_lens, meta.prefill_context_lens, self.scale,
            self.quantized, self.residual_tokens,
        )
        if num_decode == 0:
            return prefill_out
        decode_out = paged_attention_decode(
            q[:num_decode], self.k_cache, self.v_cache, meta.decode_block_tables, meta.decode_context_lens,
            self.scale, self.quantized,
        )
        return torch.cat((decode_out, prefill_out), dim=0)

    def _store(self, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> None:
        if meta.full_token_index is None:
            store_kv(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        else:
            store_kv(k.index_select(0, meta.full_token_index), v.index_select(0, meta.full_token_index),
                     self.k_cache, self.v_cache, meta.slot_mapping)
        if meta.quantized_first_tokens is not None:
            assert self.quantized is not None and meta.quantized_block_ids is not None
            store_kv_blocks(k, v, self.quantized, meta.quantized_first_tokens, meta.quantized_block_ids)
