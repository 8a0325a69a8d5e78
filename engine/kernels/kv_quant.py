"""KV-cache quantization (KIVI's scheme), stored as rows that CPU gathers dequantize in one fused pass.

A quantized block holds `block_size` tokens of one layer. Keys are quantized per channel over the
block's tokens (KIVI: a few key channels carry outliers of fixed sign, so each channel gets its own
range); values per token, in groups of `group_size` channels (value outliers are not channel-bound).
Both are asymmetric: q = round((x - min) / scale) in [0, 2^bits - 1], x' = q * scale + min.

Scale and min are rounded to fp16 values so the stored range still covers the data: min rounds down
and scale up, so no value is clipped and |x - x'| <= scale / 2 (plus fp32 rounding) holds with the
*stored* scale.

Storage: every quantization group is one row of bytes, its codes followed by its scale and min, in
the fused 8-bit / 4-bit rowwise format of PyTorch's quantized embedding-bag ops (FBGEMM on x86):
  int8: codes (1 byte each), then scale and min as fp32;
  int4: codes two per byte (element 2i in the low nibble, 2i + 1 in the high one), then scale and
        min as fp16 (the same values either way: they are fp16-rounded).
Those ops gather rows by index and dequantize them in one pass, reading 1/8 (int4) of what a
full-precision gather reads. That is the CPU decode path (`gather_keys_transposed`,
`gather_values`); `dequantize_rows` is the plain-torch reference, and the path on other devices.

Layouts of one layer's pool of N blocks (D = head_dim, Hkv = kv heads, G = values' group size,
bs = block_size, R(n) = bytes of a row of n elements):
  k_rows  uint8 [N, Hkv, D, R(bs)]        a key channel's bs tokens: the rows come out as K^T
  v_rows  uint8 [N, Hkv, bs, D/G, R(G)]   a value token's group of G channels
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import torch

from engine.kernels.kv_layout import SUPPORTED_BITS, check_layout, quantized_boundary  # noqa: F401 - re-exported

_SMALLEST_SCALE = 2.0**-14   # the smallest normal fp16: a constant group still gets a usable scale
_FP16_MAX = 65504.0


def meta_dtype(bits: int) -> torch.dtype:
    """The dtype of a row's scale and min (what the fused ops read)."""
    return torch.float32 if bits == 8 else torch.float16


def row_bytes(elements: int, bits: int) -> int:
    """Bytes of one quantized row of `elements` values: codes, then scale and min."""
    return elements * bits // 8 + 2 * torch.empty(0, dtype=meta_dtype(bits)).element_size()


@dataclass(slots=True)
class QuantizedBlocks:
    """One layer's pool of quantized KV blocks (layouts in the module docstring)."""

    bits: int
    group_size: int
    k_rows: torch.Tensor
    v_rows: torch.Tensor

    @classmethod
    def allocate(
        cls, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, bits: int, group_size: int,
        device: torch.device | str = "cpu",
    ) -> QuantizedBlocks:
        check_layout(head_dim, bits, group_size, block_size)
        return cls(
            bits, group_size,
            torch.zeros((num_blocks, num_kv_heads, head_dim, row_bytes(block_size, bits)), dtype=torch.uint8,
                        device=device),
            torch.zeros((num_blocks, num_kv_heads, block_size, head_dim // group_size, row_bytes(group_size, bits)),
                        dtype=torch.uint8, device=device),
        )

    @property
    def num_blocks(self) -> int:
        return self.k_rows.shape[0]

    @property
    def block_size(self) -> int:
        return self.v_rows.shape[2]

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.k_rows, self.v_rows)

    def write(self, block_ids: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Quantize keys, values [n, block_size, Hkv, D] into the blocks block_ids int64 [n]."""
        self.k_rows.index_copy_(0, block_ids, quantize_keys(keys, self.bits))
        self.v_rows.index_copy_(0, block_ids, quantize_values(values, self.bits, self.group_size))

    def read(self, block_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized keys, values [n, block_size, Hkv, D] of the blocks block_ids int64 [n]."""
        keys = gather_keys_transposed(self, block_ids[None])[0]            # [Hkv, D, n * bs]
        values = gather_values(self, block_ids[None])[0]                    # [Hkv, n * bs, D]
        n, bs = block_ids.shape[0], self.block_size
        heads, dim = keys.shape[:2]
        keys = keys.view(heads, dim, n, bs).permute(2, 3, 0, 1)
        values = values.view(heads, n, bs, dim).permute(1, 2, 0, 3)
        return keys.to(dtype).contiguous(), values.to(dtype).contiguous()


# ---- quantize -----------------------------------------------------------------------------------

def quantize_keys(keys: torch.Tensor, bits: int) -> torch.Tensor:
    """keys [n, bs, Hkv, D] -> rows uint8 [n, Hkv, D, R(bs)]: one row per channel, over the block's tokens."""
    return quantize_rows(keys.permute(0, 2, 3, 1), bits)


def quantize_values(values: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
    """values [n, bs, Hkv, D] -> rows uint8 [n, Hkv, bs, D/G, R(G)]: one row per token and channel group."""
    n, bs, heads, dim = values.shape
    grouped = values.reshape(n, bs, heads, dim // group_size, group_size)        # [n, bs, Hkv, D/G, G]
    return quantize_rows(grouped.permute(0, 2, 1, 3, 4), bits)


def quantize_rows(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x [..., L] -> uint8 [..., R(L)]: each row's codes, then its scale and min."""
    x = x.float()
    scale, minimum = _ranges(x, bits)                                              # [..., 1] each
    codes = ((x - minimum) / scale).round_().clamp_(0, 2**bits - 1).to(torch.uint8)
    if bits == 4:
        codes = codes[..., 0::2] | (codes[..., 1::2] << 4)
    meta = torch.cat((scale, minimum), dim=-1).to(meta_dtype(bits))               # [..., 2]
    return torch.cat((codes, meta.view(torch.uint8)), dim=-1)


def _ranges(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row (scale, min) over the last dim, already rounded to fp16 values that cover [min, max]."""
    levels = float(2**bits - 1)
    low = x.amin(dim=-1, keepdim=True).clamp(-_FP16_MAX, _FP16_MAX)
    high = x.amax(dim=-1, keepdim=True).clamp(-_FP16_MAX, _FP16_MAX)
    minimum = _round_toward(low, -float("inf"))
    scale = ((high - minimum) / levels).clamp(min=_SMALLEST_SCALE)
    scale = _round_toward(scale, float("inf"))
    # the rounded min may sit below `low`, so the top level must still reach `high`
    short = minimum + scale * levels < high
    scale = torch.where(short, _next_fp16(scale, float("inf")), scale)
    return scale, minimum


def _round_toward(x: torch.Tensor, direction: float) -> torch.Tensor:
    """fp32 -> the nearest fp16 value on `direction`'s side of x (returned as fp32)."""
    rounded = x.to(torch.float16)
    wrong_side = rounded.float() > x if direction < 0 else rounded.float() < x
    return torch.where(wrong_side, _next_fp16(rounded.float(), direction), rounded.float())


def _next_fp16(x: torch.Tensor, direction: float) -> torch.Tensor:
    return torch.nextafter(x.to(torch.float16), torch.tensor(direction, dtype=torch.float16, device=x.device)).float()


# ---- dequantize: the torch reference ------------------------------------------------------------

def row_meta(rows: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """rows uint8 [..., R(L)] -> (scale, min) fp32 [...] each."""
    meta_bytes = 2 * torch.empty(0, dtype=meta_dtype(bits)).element_size()
    meta = rows[..., rows.shape[-1] - meta_bytes :].contiguous().view(meta_dtype(bits)).float()   # [..., 2]
    return meta[..., 0], meta[..., 1]


def unpack(rows: torch.Tensor, bits: int) -> torch.Tensor:
    """rows uint8 [..., R(L)] -> codes uint8 [..., L]."""
    meta_bytes = 2 * torch.empty(0, dtype=meta_dtype(bits)).element_size()
    packed = rows[..., : rows.shape[-1] - meta_bytes]
    if bits == 8:
        return packed
    return torch.stack((packed & 0x0F, packed >> 4), dim=-1).flatten(-2)


def dequantize_rows(rows: torch.Tensor, bits: int) -> torch.Tensor:
    """rows uint8 [..., R(L)] -> fp32 [..., L] (plain torch)."""
    scale, minimum = row_meta(rows, bits)
    return torch.addcmul(minimum[..., None], unpack(rows, bits).float(), scale[..., None])


def dequantize_keys(rows: torch.Tensor, bits: int, dtype: torch.dtype) -> torch.Tensor:
    """rows [n, Hkv, D, R(bs)] -> keys [n, bs, Hkv, D] in dtype."""
    return dequantize_rows(rows, bits).permute(0, 3, 1, 2).to(dtype).contiguous()


def dequantize_values(rows: torch.Tensor, bits: int, dtype: torch.dtype) -> torch.Tensor:
    """rows [n, Hkv, bs, D/G, R(G)] -> values [n, bs, Hkv, D] in dtype."""
    values = dequantize_rows(rows, bits)                                 # [n, Hkv, bs, D/G, G]
    n, heads, bs = values.shape[:3]
    return values.permute(0, 2, 1, 3, 4).reshape(n, bs, heads, -1).to(dtype).contiguous()


# ---- gathers for attention: fused on CPU --------------------------------------------------------

def gather_keys_transposed(pool: QuantizedBlocks, block_ids: torch.Tensor) -> torch.Tensor:
    """Keys of block_ids int64 [B, n] (pool indices), dequantized: fp32 [B, Hkv, D, n * bs] (K^T per head)."""
    batch, n = block_ids.shape
    _, heads, dim, _ = pool.k_rows.shape
    bs = pool.block_size
    # row of (block b, head h, channel d) = b * Hkv * D + (h * D + d); ordered (seq, head, channel, block)
    local = torch.arange(heads * dim, device=block_ids.device)[:, None]            # [Hkv * D, 1]
    rows = (block_ids[:, None, :] * (heads * dim) + local).reshape(-1)              # [B * Hkv * D * n]
    out = _gather_rows(pool.k_rows.view(-1, pool.k_rows.shape[-1]), rows, pool.bits)   # [rows, bs]
    return out.view(batch, heads, dim, n * bs)


def gather_values(pool: QuantizedBlocks, block_ids: torch.Tensor) -> torch.Tensor:
    """Values of block_ids int64 [B, n] (pool indices), dequantized: fp32 [B, Hkv, n * bs, D]."""
    batch, n = block_ids.shape
    _, heads, bs, groups, _ = pool.v_rows.shape
    per_block = heads * bs * groups
    # row of (block b, head h, token t, group g) = b * per_block + (h * bs + t) * groups + g;
    # ordered (seq, head, block, token, group)
    local = torch.arange(per_block, device=block_ids.device).view(heads, 1, bs * groups)   # [Hkv, 1, bs * D/G]
    rows = (block_ids[:, None, :, None] * per_block + local).reshape(-1)           # [B * Hkv * n * bs * D/G]
    out = _gather_rows(pool.v_rows.view(-1, pool.v_rows.shape[-1]), rows, pool.bits)   # [rows, G]
    return out.view(batch, heads, n * bs, -1)


def _gather_rows(table: torch.Tensor, rows: torch.Tensor, bits: int) -> torch.Tensor:
    """table uint8 [num_rows, R(L)], rows int64 [m] -> fp32 [m, L]."""
    op = _fused_gather(bits) if table.device.type == "cpu" else None
    if op is None:
        return dequantize_rows(table.index_select(0, rows), bits)
    # one bag per row (offsets 0, 1, 2, ...): the bag sum is the dequantized row itself
    return op(table, rows, _offsets(rows.numel()), mode=0, pruned_weights=False, include_last_offset=False)


_OFFSETS: list[torch.Tensor] = [torch.arange(0)]   # one growing arange, shared by every gather


def _offsets(count: int) -> torch.Tensor:
    """0, 1, ..., count - 1 as int64, without a fresh arange on every call."""
    if _OFFSETS[0].numel() < count:
        _OFFSETS[0] = torch.arange(max(count, 2 * _OFFSETS[0].numel()))
    return _OFFSETS[0][:count]


@cache
def _fused_gather(bits: int) -> Callable[..., torch.Tensor] | None:
    """PyTorch's fused rowwise gather-dequantize op for `bits`, or None where this build lacks it."""
    try:
        ops = torch.ops.quantized
        return ops.embedding_bag_byte_rowwise_offsets if bits == 8 else ops.embedding_bag_4bit_rowwise_offsets
    except (AttributeError, RuntimeError):
        return None
