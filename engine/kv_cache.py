"""The KV pools of every layer, sized from the memory budget, and the copies between tiers.

`create_kv_cache` turns an EngineConfig into a layout (`KVCacheSpec`), pool sizes, a block manager
and the tensors; `KVCache.apply` performs the copies the block manager queued (`KVOps`): saving
evicted blocks to the cold tier, quantizing blocks that left their window, restoring cold blocks.
A block travels to and from the cold tier as one flat uint8 payload: every layer's tensors for
that block, in the form it is stored (quantized when the cache is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.block_manager import BlockManager, KVOps
from engine.config import EngineConfig, ModelConfig
from engine.kernels.kv_quant import QuantizedBlocks, quantize_keys, quantize_values
from engine.kv_cold import ColdStore
from engine.kv_spec import KVCacheSpec


@dataclass(slots=True)
class LayerKV:
    """One layer's pools: full-precision k, v [num_full, block_size, Hkv, D]; quantized blocks or None.

    Block id b < num_full names k[b], v[b]; b >= num_full names quantized block b - num_full."""

    k: torch.Tensor
    v: torch.Tensor
    quantized: QuantizedBlocks | None

    @property
    def num_full(self) -> int:
        return self.k.shape[0]


def pool_sizes(spec: KVCacheSpec, config: EngineConfig, max_model_len: int) -> tuple[int, int]:
    """(full-precision blocks, quantized blocks) for the memory budget and the per-block bytes of the dtype.

    A quantized cache keeps each running sequence's residual in full precision, so the budget is split
    for sequences of max_model_len tokens: residuals for as many of them as fit (at most max_num_seqs),
    a few blocks to spare for prefill chunks that end inside a block, quantized blocks in the rest.
    Neither pool grows past what max_num_seqs such sequences use. An explicit num_kv_blocks counts the
    pool that holds most tokens (the quantized one when quantized)."""
    blocks_per_seq = -(-max_model_len // spec.block_size)
    budget = config.kv_cache_memory_bytes
    if not spec.quantized:
        by_memory = budget // spec.full_block_bytes
        return config.num_kv_blocks or max(1, min(by_memory, config.max_num_seqs * blocks_per_seq)), 0
    residual, history = spec.residual_blocks, max(1, spec.quantized_boundary(max_model_len))
    per_seq = residual * spec.full_block_bytes + history * spec.quantized_block_bytes
    seqs = min(config.max_num_seqs, max(1, budget // per_seq))
    num_full = seqs * residual + 1 + seqs // 8
    if config.num_kv_blocks:
        return num_full, config.num_kv_blocks
    by_memory = (budget - num_full * spec.full_block_bytes) // spec.quantized_block_bytes
    num_quantized = min(by_memory, config.max_num_seqs * history)
    if num_quantized < 1:
        raise ValueError(
            f"kv_cache_memory_bytes={budget} leaves no room for quantized blocks after the full-precision residuals "
            f"({num_full} blocks of {spec.full_block_bytes} bytes); raise it or lower kv_cache_residual_tokens")
    return num_full, num_quantized


def create_kv_cache(
    model_config: ModelConfig, config: EngineConfig, model_dtype: torch.dtype, device: torch.device,
    max_model_len: int,
) -> tuple[KVCache, BlockManager]:
    """The pools and the block manager that hands out their blocks, as the config asks."""
    spec = KVCacheSpec.from_configs(model_config, config, model_dtype)
    num_full, num_quantized = pool_sizes(spec, config, max_model_len)
    cold = None
    if spec.tiered:
        assert config.kv_cache_cold_dir is not None   # validate() requires it
        cold = ColdStore(config.kv_cache_cold_dir, config.kv_cache_cold_bytes, spec.stored_block_bytes)
    manager = BlockManager(num_full, spec.block_size, config.enable_prefix_caching,
                           num_quantized_blocks=num_quantized, residual_tokens=spec.residual_tokens, cold=cold)
    return KVCache(spec, num_full, num_quantized, device, cold), manager


class KVCache:
    def __init__(
        self, spec: KVCacheSpec, num_full: int, num_quantized: int, device: torch.device,
        cold: ColdStore | None = None,
    ) -> None:
        self.spec = spec
        self.num_full = num_full
        self.num_quantized = num_quantized
        self.cold = cold
        shape = (num_full, spec.block_size, spec.num_kv_heads, spec.head_dim)
        self.layers = [
            LayerKV(
                torch.zeros(shape, dtype=spec.model_dtype, device=device),
                torch.zeros(shape, dtype=spec.model_dtype, device=device),
                QuantizedBlocks.allocate(num_quantized, spec.block_size, spec.num_kv_heads, spec.head_dim,
                                         spec.bits, spec.value_group_size, device) if spec.quantized else None,
            )
            for _ in range(spec.num_layers)
        ]

    @property
    def settings(self) -> dict[str, Any]:
        return self.spec.settings()

    def apply(self, ops: KVOps) -> None:
        """Perform queued copies: saves (read before anything overwrites), conversions, restores."""
        if ops.saves and self.cold is not None:
            for block_id, block_hash, token_ids in ops.saves:
                self.cold.put(block_hash, token_ids, self.read_block(block_id))
        if ops.conversions:
            full = torch.tensor([f for f, _ in ops.conversions], device=self.layers[0].k.device)
            quantized = torch.tensor([q - self.num_full for _, q in ops.conversions], device=full.device)
            for layer in self.layers:
                assert layer.quantized is not None
                layer.quantized.write(quantized, layer.k.index_select(0, full), layer.v.index_select(0, full))
        for block_id, payload in ops.restores:
            self.write_block(block_id, payload)

    # ---- one block as a flat payload ----------------------------------------------------------

    def read_block(self, block_id: int) -> torch.Tensor:
        """uint8 [spec.stored_block_bytes]: the block as the cold tier keeps it."""
        pieces = [t.contiguous().view(torch.uint8).reshape(-1) for t in self._block_tensors(block_id)]
        return torch.cat(pieces).cpu()

    def write_block(self, block_id: int, payload: torch.Tensor) -> None:
        """Inverse of read_block (a full-precision block of a quantized cache cannot be written this way)."""
        if payload.numel() != self.spec.stored_block_bytes:
            raise ValueError(f"payload of {payload.numel()} bytes for a {self.spec.stored_block_bytes}-byte block")
        offset = 0
        for layer in self.layers:
            for target in self._layer_views(layer, block_id, for_write=True):
                size = target.numel() * target.element_size()
                source = payload[offset : offset + size].to(target.device).view(target.dtype).view(target.shape)
                target.copy_(source)
                offset += size

    def _block_tensors(self, block_id: int) -> list[torch.Tensor]:
        if block_id < self.num_full and self.spec.quantized:
            # a full-precision block leaving for the cold tier is stored quantized, like every cold block
            out: list[torch.Tensor] = []
            for layer in self.layers:
                out += [quantize_keys(layer.k[block_id : block_id + 1], self.spec.bits)[0],
                        quantize_values(layer.v[block_id : block_id + 1], self.spec.bits,
                                        self.spec.value_group_size)[0]]
            return out
        return [view for layer in self.layers for view in self._layer_views(layer, block_id, for_write=False)]

    def _layer_views(self, layer: LayerKV, block_id: int, *, for_write: bool) -> list[torch.Tensor]:
        if block_id < self.num_full:
            if for_write and self.spec.quantized:
                raise ValueError("cold blocks of a quantized cache restore into quantized blocks")
            return [layer.k[block_id], layer.v[block_id]]
        assert layer.quantized is not None
        index = block_id - self.num_full
        return [t[index] for t in layer.quantized.tensors()]

    def stats(self, manager: BlockManager) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "kv_cache": self.settings,
            "kv_cache_full_blocks": self.num_full,
            "kv_cache_quantized_blocks": self.num_quantized,
            "kv_cache_full_blocks_used": self.num_full - manager.num_free(quantized=False),
            "kv_cache_quantized_blocks_used": self.num_quantized - manager.num_free(quantized=True),
            "kv_cache_bytes": self.num_full * self.spec.full_block_bytes
            + self.num_quantized * self.spec.quantized_block_bytes,
            "kv_cache_conversions": manager.num_conversions,
            "kv_cache_cold_restored_blocks": manager.cold_restored_blocks,
            "kv_cache_cold_restore_failures": manager.cold_restore_failures,
        }
        if self.cold is not None:
            stats.update(self.cold.stats())
        return stats
