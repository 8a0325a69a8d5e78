"""KV quantization (engine.kernels.kv_quant): round-trip error bounds, layouts, edge values, and the
fused CPU gathers against the plain-torch reference."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.kv_quant import (
    QuantizedBlocks,
    check_layout,
    dequantize_keys,
    dequantize_values,
    gather_keys_transposed,
    gather_values,
    quantize_keys,
    quantize_values,
    quantized_boundary,
    row_bytes,
    row_meta,
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
    rows = quantize_keys(keys, bits)
    restored = dequantize_keys(rows, bits, torch.float32)
    scale, minimum = (m[:, None] for m in row_meta(rows, bits))                     # [n, 1, Hkv, D]
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
    rows = quantize_values(values, bits, group)
    assert rows.shape == (3, 2, 32, 64 // group, row_bytes(group, bits))
    restored = dequantize_values(rows, bits, torch.float32)
    scale = row_meta(rows, bits)[0].transpose(1, 2).repeat_interleave(group, dim=-1)   # [n, bs, Hkv, D]
    assert ((restored - values).abs() <= scale / 2 * (1 + 1e-5) + 1e-6).all()


def test_int8_error_is_about_sixteen_times_smaller_than_int4():
    keys = _kv_like(torch.Generator().manual_seed(9))
    errors = {bits: (dequantize_keys(quantize_keys(keys, bits), bits, torch.float32) - keys).abs().mean()
              for bits in (8, 4)}
    assert 10 < errors[4] / errors[8] < 25


@pytest.mark.parametrize("bits", [8, 4])
def test_constant_and_extreme_groups(bits):
    keys = torch.zeros(2, 32, 1, 8)
    keys[0] = 3.25                        # a constant channel: exact after the round trip
    keys[1, :, 0, 0] = 1e4                # large but inside fp16's range
    keys[1, :, 0, 1] = torch.linspace(-7e4, 7e4, 32)   # beyond fp16: saturates near +-65504
    rows = quantize_keys(keys, bits)
    restored = dequantize_keys(rows, bits, torch.float32)
    scale, minimum = row_meta(rows, bits)                    # [n, Hkv, D] each
    assert torch.isfinite(scale).all() and torch.isfinite(minimum).all() and torch.isfinite(restored).all()
    assert torch.equal(restored[0], keys[0])
    assert (restored[1, :, 0, 0] - 1e4).abs().max() <= 8      # fp16 spacing at 1e4 is 8
    assert restored[1, :, 0, 1].abs().max() <= 65504 + scale[1, 0, 1]


def test_bfloat16_input_and_output():
    keys = _kv_like(torch.Generator().manual_seed(2)).to(torch.bfloat16)
    rows = quantize_keys(keys, 8)
    restored = dequantize_keys(rows, 8, torch.bfloat16)
    assert restored.dtype == torch.bfloat16
    # computed in fp32, rounded once to bf16 at the end
    exact = dequantize_keys(rows, 8, torch.float32)
    assert torch.equal(restored, exact.to(torch.bfloat16))
    assert ((exact - keys.float()).abs() <= row_meta(rows, 8)[0][:, None] / 2 * (1 + 1e-5) + 1e-6).all()


def test_int4_packs_element_2i_low_and_2i_plus_1_high_then_fp16_scale_and_min():
    codes = torch.tensor([1, 2, 15, 0], dtype=torch.uint8)
    tokens = torch.stack([codes.float(), torch.zeros(4), torch.full((4,), 15.0), torch.zeros(4)])   # [4 tokens, 4 ch]
    rows = quantize_keys(tokens.reshape(1, 4, 1, 4), 4)             # channel c's row holds its 4 tokens
    assert rows.shape == (1, 1, 4, row_bytes(4, 4)) == (1, 1, 4, 6)
    assert rows[0, 0, 0, :2].tolist() == [1 | 0 << 4, 15 | 0 << 4]  # channel 0: tokens 1, 0, 15, 0
    assert torch.equal(unpack(rows, 4)[0, 0, :, 0], codes)
    scale, minimum = rows[0, 0, 0, 2:].view(torch.float16).tolist()
    assert (scale, minimum) == (1.0, 0.0)


@pytest.mark.parametrize("bits", [8, 4])
def test_rows_are_the_fused_ops_format(bits):
    """PyTorch's own prepack produces the same layout (codes, then scale and min), so the fused
    gather reads our rows as it reads its own."""
    x = _kv_like(torch.Generator().manual_seed(bits)).reshape(-1, 32)
    prepack = torch.ops.quantized.embedding_bag_byte_prepack if bits == 8 else torch.ops.quantized.embedding_bag_4bit_prepack
    theirs = prepack(x)
    ours = quantize_keys(x.T.reshape(1, 32, 1, -1), bits)[0, 0]   # rows over the same 32 values
    assert theirs.shape == ours.shape
    codes = unpack(ours, bits).float()
    their_restored = dequantize_keys(theirs[None, None], bits, torch.float32)[0, :, 0].T
    # different rounding of the range (theirs does not keep it covering), the same reading of the bytes
    assert ((their_restored - x).abs() <= row_meta(theirs, bits)[0][:, None]).all()
    scale, minimum = row_meta(ours, bits)
    torch.testing.assert_close(codes * scale[:, None] + minimum[:, None], dequantize_keys(ours[None, None], bits,
                               torch.float32)[0, :, 0].T)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize(("block_size", "heads", "dim", "group"), [(32, 2, 64, 32), (64, 1, 64, 64), (16, 4, 32, 32)])
def test_pool_write_then_read_gives_the_round_trip(bits, block_size, heads, dim, group):
    generator = torch.Generator().manual_seed(bits)
    pool = QuantizedBlocks.allocate(5, block_size, heads, dim, bits, group)
    keys, values = _kv_like(generator, 2, block_size, heads, dim), _kv_like(generator, 2, block_size, heads, dim)
    pool.write(torch.tensor([4, 1]), keys, values)
    got_keys, got_values = pool.read(torch.tensor([1, 4]), torch.float32)
    # exactly what the plain-torch reference makes of the same rows
    assert torch.equal(got_keys[1], dequantize_keys(quantize_keys(keys, bits), bits, torch.float32)[0])
    assert torch.equal(got_values[0], dequantize_values(quantize_values(values, bits, group), bits, torch.float32)[1])
    assert pool.k_rows.dtype == torch.uint8 and pool.k_rows.shape[-1] == row_bytes(block_size, bits)


@pytest.mark.parametrize("bits", [8, 4])
def test_fused_gathers_match_the_reference_in_attention_layout(bits):
    generator = torch.Generator().manual_seed(20 + bits)
    pool = QuantizedBlocks.allocate(6, 32, 2, 64, bits, 32)
    pool.write(torch.arange(6), _kv_like(generator, 6), _kv_like(generator, 6))
    ids = torch.tensor([[5, 0, 2], [1, 1, 4]])                                      # [B, n], repeats allowed
    keys = dequantize_keys(pool.k_rows, bits, torch.float32)[ids]                   # [B, n, bs, Hkv, D]
    values = dequantize_values(pool.v_rows, bits, torch.float32)[ids]
    expected_kt = keys.permute(0, 3, 4, 1, 2).reshape(2, 2, 64, 96)                 # [B, Hkv, D, n * bs]
    expected_v = values.permute(0, 3, 1, 2, 4).reshape(2, 2, 96, 64)               # [B, Hkv, n * bs, D]
    assert torch.equal(gather_keys_transposed(pool, ids), expected_kt)
    assert torch.equal(gather_values(pool, ids), expected_v)


def test_layout_checks_name_the_problem():
    with pytest.raises(ValueError, match="multiple of the value group size"):
        check_layout(48, 8, 32)
    with pytest.raises(ValueError, match="bits"):
        check_layout(64, 3, 32)
    with pytest.raises(ValueError, match="must be even"):
        check_layout(64, 4, 32, block_size=31)


def test_quantized_boundary_counts_complete_residual_groups():
    # residual 64 tokens, blocks of 32: a query sees whole 64-token groups before it quantized
    assert [quantized_boundary(p, 64, 32) for p in (0, 63, 64, 127, 128, 200)] == [0, 0, 2, 2, 4, 6]
    assert quantized_boundary(500, 0, 32) == 0
