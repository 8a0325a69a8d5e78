"""KV quantization (engine.kernels.kv_quant): round-trip error bounds, layouts, edge values."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.kv_quant import (
    QuantizedBlocks,
    check_layout,
    dequantize_keys,
    dequantize_values,
    quantize_keys,
    quantize_values,
    quantized_boundary,
    unpack,
)

LEVELS = {8: 255, 4: 15}


def _kv_like(generator: torch.Generator, n: int = 3, bs: int = 32, heads: int = 2, dim: int = 64) -> torch.Tensor:
    """Keys as LLMs make them: per-channel offsets, a few outlier channels, a spread of magnitudes."""
    x = torch.randn(n, bs, heads, dim, generator=generator)
    x = x + torch.randn(1, 1, heads, dim, generator=generator) * 4       # channel offsets
    x[..., 5] *= 30                                                       # an outlier channel
    return x * torch.rand(1, bs, 1, 1, generator=generator) * 3


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("seed", range(4))
def test_keys_round_trip_within_half_a_step_of_their_channel(bits, seed):
    keys = _kv_like(torch.Generator().manual_seed(seed))
    data, meta = quantize_keys(keys, bits)
    restored = dequantize_keys(data, meta, bits, torch.float32)
    scale, minimum = meta[:, 0].float()[:, None], meta[:, 1].float()[:, None]       # [n, 1, Hkv, D]
    assert (minimum <= keys.amin(dim=1, keepdim=True)).all()                     # nothing clipped below
    assert (minimum + scale * LEVELS[bits] >= keys.amax(dim=1, keepdim=True)).all()  # nor above
    assert ((restored - keys).abs() <= scale / 2 * (1 + 1e-5) + 1e-6).all()
    # the bound is tight: the stored scale is the channel's range over the levels, up to fp16 rounding
    ideal = (keys.amax(dim=1, keepdim=True) - keys.amin(dim=1, keepdim=True)) / LEVELS[bits]
    assert (scale <= ideal * (1 + 2**-9) + minimum.abs() * 2**-10 / LEVELS[bits] + 2**-14).all()


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("group", [32, 64])
def test_values_round_trip_within_half_a_step_of_their_token_group(bits, group):
    values = _kv_like(torch.Generator().manual_seed(group + bits)).transpose(1, 3).reshape(3, 32, 2, 64)
    data, meta = quantize_values(values, bits, group)
    assert meta.shape == (3, 2, 32, 2, 64 // group)
    restored = dequantize_values(data, meta, bits, torch.float32)
    scale = meta[:, 0].float().repeat_interleave(group, dim=-1)                  # [n, bs, Hkv, D]
    assert ((restored - values).abs() <= scale / 2 * (1 + 1e-5) + 1e-6).all()


def test_int8_error_is_about_sixteen_times_smaller_than_int4():
    keys = _kv_like(torch.Generator().manual_seed(9))
    errors = {bits: (dequantize_keys(*quantize_keys(keys, bits), bits, torch.float32) - keys).abs().mean()
              for bits in (8, 4)}
    assert 10 < errors[4] / errors[8] < 25


@pytest.mark.parametrize("bits", [8, 4])
def test_constant_and_extreme_groups(bits):
    keys = torch.zeros(2, 32, 1, 8)
    keys[0] = 3.25                        # a constant channel: exact after the round trip
    keys[1, :, 0, 0] = 1e4                # large but inside fp16's range
    keys[1, :, 0, 1] = torch.linspace(-7e4, 7e4, 32)   # beyond fp16: saturates near +-65504
    data, meta = quantize_keys(keys, bits)
    restored = dequantize_keys(data, meta, bits, torch.float32)
    assert torch.isfinite(meta).all() and torch.isfinite(restored).all()
    assert torch.equal(restored[0], keys[0])
    assert (restored[1, :, 0, 0] - 1e4).abs().max() <= 8      # fp16 spacing at 1e4 is 8
    assert restored[1, :, 0, 1].abs().max() <= 65504 + meta[1, 0, 0, 1].float()


def test_bfloat16_input_and_output():
    keys = _kv_like(torch.Generator().manual_seed(2)).to(torch.bfloat16)
    data, meta = quantize_keys(keys, 8)
    restored = dequantize_keys(data, meta, 8, torch.bfloat16)
    assert restored.dtype == torch.bfloat16
    # computed in fp32, rounded once to bf16 at the end
    exact = dequantize_keys(data, meta, 8, torch.float32)
    assert torch.equal(restored, exact.to(torch.bfloat16))
    assert ((exact - keys.float()).abs() <= meta[:, 0].float()[:, None] / 2 * (1 + 1e-5) + 1e-6).all()


def test_int4_packs_channel_j_low_and_channel_j_plus_half_high():
    codes = torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)
    keys = torch.stack([codes.float(), torch.zeros(1, 4), torch.full((1, 4), 15.0)])  # channel range 0..15
    data, _ = quantize_keys(keys.reshape(1, 3, 1, 4), 4)
    assert data.shape == (1, 3, 1, 2)
    assert data[0, 0, 0].tolist() == [1 | 15 << 4, 2 | 0 << 4]
    assert torch.equal(unpack(data, 4)[0, 0, 0], codes[0])


@pytest.mark.parametrize("bits", [8, 4])
def test_pool_write_then_read_gives_the_round_trip(bits):
    generator = torch.Generator().manual_seed(bits)
    pool = QuantizedBlocks.allocate(5, 32, 2, 64, bits, 32)
    keys, values = _kv_like(generator, n=2), _kv_like(generator, n=2)
    pool.write(torch.tensor([4, 1]), keys, values)
    got_keys, got_values = pool.read(torch.tensor([1, 4]), torch.float32)
    torch.testing.assert_close(got_keys[1], dequantize_keys(*quantize_keys(keys, bits), bits, torch.float32)[0])
    torch.testing.assert_close(got_values[0],
                               dequantize_values(*quantize_values(values, bits, 32), bits, torch.float32)[1])
    assert pool.k_data.dtype == torch.uint8 and pool.k_data.shape[-1] == 64 * bits // 8


def test_layout_checks_name_the_problem():
    with pytest.raises(ValueError, match="multiple of the value group size"):
        check_layout(48, 8, 32)
    with pytest.raises(ValueError, match="bits"):
        check_layout(64, 3, 32)


def test_quantized_boundary_counts_complete_residual_groups():
    # residual 64 tokens, blocks of 32: a query sees whole 64-token groups before it quantized
    assert [quantized_boundary(p, 64, 32) for p in (0, 63, 64, 127, 128, 200)] == [0, 0, 2, 2, 4, 6]
    assert quantized_boundary(500, 0, 32) == 0
