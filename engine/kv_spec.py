"""What the KV cache stores for one model under one EngineConfig: block layouts and their bytes.

Two kinds of block share the block manager's id space:
- full-precision blocks ("hot"), in the model dtype: a sequence's newest tokens, its residual (KIVI):
  tokens are quantized `residual_tokens` at a time, so the newest (n mod residual_tokens) tokens,
  the ones attended most, stay exact;
- quantized blocks ("warm", int8 or int4; `engine.kernels.kv_quant`): everything older.

The same rule decides, for every query position i, which keys it sees quantized: those in the first
`quantized_boundary(i)` blocks. Decode follows it through the blocks it reads; prefill applies it
per query (`engine.kernels.paged_attention`). So what a token attends to depends on the tokens alone,
not on chunking, preemption, prefix-cache or cold-tier hits, or what else is running.
With kv_cache_dtype=auto every block is full precision. The tiered strategy adds a cold file on disk
for evicted prefix-cache blocks (`engine.kv_cold`), holding blocks in their stored (quantized) form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.config import EngineConfig, ModelConfig
from engine.kernels.kv_layout import KV_BITS as _BITS
from engine.kernels.kv_layout import quantized_boundary, value_group_size
from engine.kernels.kv_quant import row_bytes


@dataclass(frozen=True, slots=True)
class KVCacheSpec:
    dtype: str                     # auto | int8 | int4
    strategy: str                  # static | tiered
    model_dtype: torch.dtype       # dtype of the full-precision blocks
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    value_group_size: int          # channels per value group (kv_cache_group_size, at most head_dim)
    residual_tokens: int           # tokens quantized at a time (0 for auto)

    @classmethod
    def from_configs(cls, model: ModelConfig, config: EngineConfig, model_dtype: torch.dtype) -> KVCacheSpec:
        """Raises ValueError naming the setting when the model cannot use the requested layout."""
        group = value_group_size(model, config)
        quantized = config.kv_cache_dtype != "auto"
        return cls(
            dtype=config.kv_cache_dtype, strategy=config.kv_cache_strategy, model_dtype=model_dtype,
            num_layers=model.num_hidden_layers, num_kv_heads=model.num_key_value_heads, head_dim=model.head_dim,
            block_size=config.kv_block_size, value_group_size=group if quantized else 0,
            residual_tokens=config.kv_cache_residual_tokens if quantized else 0,
        )

    @property
    def bits(self) -> int:
        return _BITS[self.dtype]

    @property
    def quantized(self) -> bool:
        return self.bits > 0

    @property
    def tiered(self) -> bool:
        return self.strategy == "tiered"

    @property
    def full_block_bytes(self) -> int:
        """Bytes of one full-precision block over all layers (K and V)."""
        per_layer = 2 * self.block_size * self.num_kv_heads * self.head_dim
        return self.num_layers * per_layer * torch.empty(0, dtype=self.model_dtype).element_size()

    @property
    def quantized_block_bytes(self) -> int:
        """Bytes of one quantized block over all layers: codes, plus a scale and min per group."""
        if not self.quantized:
            return 0
        key_rows = self.num_kv_heads * self.head_dim * row_bytes(self.block_size, self.bits)   # per channel
        value_rows = (self.block_size * self.num_kv_heads * (self.head_dim // self.value_group_size)
                      * row_bytes(self.value_group_size, self.bits))                            # per token group
        return self.num_layers * (key_rows + value_rows)

    @property
    def stored_block_bytes(self) -> int:
        """Bytes of a block as the cold tier keeps it (quantized when the cache is)."""
        return self.quantized_block_bytes if self.quantized else self.full_block_bytes

    @property
    def residual_blocks(self) -> int:
        """Full-precision blocks a decoding sequence holds (its residual); 0 when nothing is quantized."""
        return self.residual_tokens // self.block_size

    def quantized_boundary(self, position: int) -> int:
        """A query at `position` sees blocks [0, boundary) quantized and the rest in full precision."""
        return quantized_boundary(position, self.residual_tokens, self.block_size)

    def settings(self) -> dict[str, Any]:
        """What an audit record, /health and stats name: everything here that can change an output."""
        return {
            "dtype": self.dtype,
            "strategy": self.strategy,
            "model_dtype": str(self.model_dtype).removeprefix("torch."),
            "block_size": self.block_size,
            "group_size": self.block_size if self.quantized else None,   # key group = one block of tokens
            "value_group_size": self.value_group_size or None,
            "residual_tokens": self.residual_tokens if self.quantized else None,
        }

