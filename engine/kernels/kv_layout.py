"""The arithmetic of the quantized KV layout, without torch: which layouts a model can use, and which blocks a
query sees quantized. `engine.kernels.kv_quant` stores and reads the blocks; an API process checks the settings
with this alone before it launches its engine core."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import EngineConfig, ModelConfig

SUPPORTED_BITS = (8, 4)
KV_BITS = {"auto": 0, "int8": 8, "int4": 4}   # kv_cache_dtype -> bits per stored channel (0: full precision)


def quantized_boundary(position: int, residual_tokens: int, block_size: int) -> int:
    """Blocks [0, boundary) are quantized for a query at `position`: every complete group of
    `residual_tokens` tokens before it (KIVI's residual; 0 when residual_tokens is 0: none)."""
    if not residual_tokens:
        return 0
    return (position // residual_tokens) * (residual_tokens // block_size)


def check_layout(head_dim: int, bits: int, group_size: int, block_size: int = 32) -> None:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"KV quantization supports {SUPPORTED_BITS} bits, got {bits}")
    if head_dim % group_size:
        raise ValueError(f"head_dim {head_dim} is not a multiple of the value group size {group_size}")
    if bits == 4 and (group_size % 2 or block_size % 2):
        raise ValueError(f"int4 packs two values per byte: group size and block size must be even, "
                         f"got {group_size} and {block_size}")


def value_group_size(model: ModelConfig, config: EngineConfig) -> int:
    """The values' channel group size this model gets under `config`; raises ValueError naming the setting when
    the model cannot use the requested KV cache layout."""
    config.validate()
    group = min(config.kv_cache_group_size, model.head_dim)
    if config.kv_cache_dtype != "auto":
        try:
            check_layout(model.head_dim, KV_BITS[config.kv_cache_dtype], group, config.kv_block_size)
        except ValueError as exc:
            raise ValueError(f"kv_cache_dtype={config.kv_cache_dtype} does not fit this model: {exc}") from None
    return group
