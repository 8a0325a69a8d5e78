"""KV-cache quantization in plain torch (KIVI's scheme): the CPU path and the reference for Triton.

A quantized block holds `block_size` tokens of one layer. Keys are quantized per channel over the
block's tokens (KIVI: a few key channels carry outliers of fixed sign, so each channel gets its own
range); values per token, in groups of `group_size` channels (value outliers are not channel-bound).
Both are asymmetric: q = round((x - min) / scale) in [0, 2^bits - 1], x' = q * scale + min.

Scale and min are stored in fp16, rounded so the stored range still covers the data: min rounds
down and scale up, so no value is clipped and |x - x'| <= scale / 2 (plus fp32 rounding) holds with
the *stored* scale. int4 packs two channels per byte: byte j holds channel j in its low nibble and
channel j + D/2 in its high one, so unpacking is two plain half-width copies (interleaved nibbles
cost several times more on CPU).

Layouts of one layer's pool of N blocks (D = head_dim, Hkv = kv heads, G = values' group size):
  k_data  uint8 [N, block_size, Hkv, D * bits / 8]
  k_meta  fp16  [N, 2, Hkv, D]                      scale, min per channel
  v_data  uint8 [N, block_size, Hkv, D * bits / 8]
  v_meta  fp16  [N, 2, block_size, Hkv, D / G]      scale, min per token and channel group
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.kernels.kv_layout import SUPPORTED_BITS, check_layout, quantized_boundary  # noqa: F401 - re-exported

META_DTYPE = torch.float16
_SMALLEST_SCALE = 2.0**-14   # the smallest normal fp16: a constant group still gets a usable scale
_FP16_MAX = 65504.0


@dataclass(slots=True)
class QuantizedBlocks:
    """One layer's pool of quantized KV blocks (layouts in the module docstring)."""

    bits: int
    group_size: int
    k_data: torch.Tensor
    k_meta: torch.Tensor
    v_data: torch.Tensor
    v_meta: torch.Tensor

    @classmethod
    def allocate(
        cls, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, bits: int, group_size: int,
        device: torch.device | str = "cpu",
    ) -> QuantizedBlocks:
        check_layout(head_dim, bits, group_size)
        packed = head_dim * bits // 8
        data_shape = (num_blocks, block_size, num_kv_heads, packed)
        return cls(
            bits, group_size,
            torch.zeros(data_shape, dtype=torch.uint8, device=device),
            torch.zeros((num_blocks, 2, num_kv_heads, head_dim), dtype=META_DTYPE, device=device),
            torch.zeros(data_shape, dtype=torch.uint8, device=device),
            torch.zeros((num_blocks, 2, block_size, num_kv_heads, head_dim // group_size), dtype=META_DTYPE,
                        device=device),
        )

    @property
    def num_blocks(self) -> int:
        return self.k_data.shape[0]

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.k_data, self.k_meta, self.v_data, self.v_meta)

    def write(self, block_ids: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Quantize keys, values [n, block_size, Hkv, D] into the blocks block_ids int64 [n]."""
        k_data, k_meta = quantize_keys(keys, self.bits)
        v_data, v_meta = quantize_values(values, self.bits, self.group_size)
        self.k_data.index_copy_(0, block_ids, k_data)
        self.k_meta.index_copy_(0, block_ids, k_meta)
        self.v_data.index_copy_(0, block_ids, v_data)
        self.v_meta.index_copy_(0, block_ids, v_meta)

    def read(self, block_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized keys, values [n, block_size, Hkv, D] of the blocks block_ids int64 [n]."""
        keys = dequantize_keys(self.k_data.index_select(0, block_ids), self.k_meta.index_select(0, block_ids),
                               self.bits, dtype)
        values = dequantize_values(self.v_data.index_select(0, block_ids), self.v_meta.index_select(0, block_ids),
                                   self.bits, dtype)
        return keys, values


def quantize_keys(keys: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """keys [n, bs, Hkv, D] -> data uint8 [n, bs, Hkv, D*bits/8], meta fp16 [n, 2, Hkv, D] (per channel)."""
    scale, minimum = _ranges(keys.float(), dim=1, bits=bits)               # [n, 1, Hkv, D] each
    data = _quantize(keys.float(), scale, minimum, bits)
    return data, torch.stack((scale.squeeze(1), minimum.squeeze(1)), dim=1).to(META_DTYPE)


def quantize_values(values: torch.Tensor, bits: int, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """values [n, bs, Hkv, D] -> data uint8 [n, bs, Hkv, D*bits/8], meta fp16 [n, 2, bs, Hkv, D/G] (per token)."""
    n, bs, heads, dim = values.shape
    grouped = values.float().reshape(n, bs, heads, dim // group_size, group_size)   # [n, bs, Hkv, D/G, G]
    scale, minimum = _ranges(grouped, dim=4, bits=bits)                              # [n, bs, Hkv, D/G, 1]
    data = _quantize(grouped, scale, minimum, bits, flat_shape=(n, bs, heads, dim))
    return data, torch.stack((scale.squeeze(4), minimum.squeeze(4)), dim=1).to(META_DTYPE)


def dequantize_keys(data: torch.Tensor, meta: torch.Tensor, bits: int, dtype: torch.dtype) -> torch.Tensor:
    """data [n, bs, Hkv, D*bits/8], meta [n, 2, Hkv, D] -> keys [n, bs, Hkv, D] in dtype."""
    out = _codes_as_float(data, bits)                                   # [n, bs, Hkv, D]
    meta = meta.float()
    # one fused pass, in place (a separate mul_ and add_ cost half as much again on CPU)
    return torch.addcmul(meta[:, None, 1], out, meta[:, None, 0], out=out).to(dtype)


def dequantize_values(data: torch.Tensor, meta: torch.Tensor, bits: int, dtype: torch.dtype) -> torch.Tensor:
    """data [n, bs, Hkv, D*bits/8], meta [n, 2, bs, Hkv, D/G] -> values [n, bs, Hkv, D] in dtype."""
    out = _codes_as_float(data, bits)                                   # [n, bs, Hkv, D]
    n, bs, heads, dim = out.shape
    groups = meta.shape[-1]
    meta = meta.float()
    rows = out.view(-1, dim // groups)                                  # [n * bs * Hkv * D/G, G]
    # per-row scalars: mul_ then add_ runs about twice as fast as addcmul here (measured on CPU)
    rows.mul_(meta[:, 0].reshape(-1, 1)).add_(meta[:, 1].reshape(-1, 1))
    return out.to(dtype)


def unpack(data: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes [..., D*bits/8] -> uint8 codes [..., D]."""
    if bits == 8:
        return data
    return torch.cat((data & 0x0F, data >> 4), dim=-1)


def _codes_as_float(data: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes [..., D*bits/8] -> fp32 codes [..., D], written once."""
    shape = (*data.shape[:-1], data.shape[-1] * 8 // bits)
    out = torch.empty(shape, dtype=torch.float32, device=data.device)
    if bits == 8:
        return out.copy_(data)
    half = shape[-1] // 2
    out[..., :half].copy_(data & 0x0F)
    out[..., half:].copy_(data >> 4)
    return out


def _ranges(x: torch.Tensor, dim: int, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group (scale, min) over `dim`, already rounded to fp16 values that cover [min, max]."""
    levels = float(2**bits - 1)
    low = x.amin(dim=dim, keepdim=True).clamp(-_FP16_MAX, _FP16_MAX)
    high = x.amax(dim=dim, keepdim=True).clamp(-_FP16_MAX, _FP16_MAX)
    minimum = _round_toward(low, -float("inf"))
    scale = ((high - minimum) / levels).clamp(min=_SMALLEST_SCALE)
    scale = _round_toward(scale, float("inf"))
    # the rounded min may sit below `low`, so the top level must still reach `high`
    short = minimum + scale * levels < high
    scale = torch.where(short, _next_fp16(scale, float("inf")), scale)
    return scale, minimum


def _round_toward(x: torch.Tensor, direction: float) -> torch.Tensor:
    """fp32 -> the nearest fp16 value on `direction`'s side of x (returned as fp32)."""
    rounded = x.to(META_DTYPE)
    wrong_side = rounded.float() > x if direction < 0 else rounded.float() < x
    return torch.where(wrong_side, _next_fp16(rounded.float(), direction), rounded.float())


def _next_fp16(x: torch.Tensor, direction: float) -> torch.Tensor:
    return torch.nextafter(x.to(META_DTYPE), torch.tensor(direction, dtype=META_DTYPE)).float()


def _quantize(
    x: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor, bits: int, flat_shape: tuple[int, ...] | None = None,
) -> torch.Tensor:
    q = ((x - minimum) / scale).round_().clamp_(0, 2**bits - 1).to(torch.uint8)
    if flat_shape is not None:
        q = q.reshape(flat_shape)
    if bits == 8:
        return q
    half = q.shape[-1] // 2
    return q[..., :half] | (q[..., half:] << 4)
