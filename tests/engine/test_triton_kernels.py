"""The Triton kernels against their plain-torch references: compiled on a CUDA device where there is one,
and always through Triton's CPU interpreter.

TRITON_INTERPRET=1 only takes effect if it is set before `triton` is first imported, and must stay
set while kernels launch. To stay independent of what other test modules imported first (and to
leave their environment alone), interpreted kernels run in one spawned worker process whose initializer
sets the variable. On CUDA they run here, on inputs copied to the device and results copied back.
References and assertions always run here, on the CPU.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
import torch

from engine.kernels.bitmask import (
    apply_token_bitmask_additive,
    apply_token_bitmask_torch,
    bitmask_words,
    pack_bool_mask,
)
from engine.kernels.kv_quant import QuantizedBlocks

# ---------------------------------------------------------------- worker side (spawned process)


def _enable_interpreter() -> None:
    if "triton" in sys.modules:  # cannot happen in a fresh spawned process; guard against misuse
        raise RuntimeError("triton was imported before TRITON_INTERPRET could be set")
    os.environ["TRITON_INTERPRET"] = "1"


def _run_bitmask_kernel(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    from engine.kernels.triton_bitmask import apply_token_bitmask_triton

    apply_token_bitmask_triton(logits, bitmask, rows)
    return logits


def _run_paged_attention_kernel(*args: Any) -> torch.Tensor:
    from engine.kernels.triton_paged_attention import paged_attention_decode_triton

    return paged_attention_decode_triton(*args)


# ---------------------------------------------------------------- test side


def _on(device: str, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, QuantizedBlocks):
        return QuantizedBlocks(value.bits, value.group_size, value.k_rows.to(device), value.v_rows.to(device))
    return value


def _on_cuda(fn: Callable[..., torch.Tensor], *args: Any) -> torch.Tensor:
    result = fn(*(_on("cuda", arg) for arg in args))
    torch.cuda.synchronize()
    return result.cpu()


@pytest.fixture(scope="module", params=["interpreter", "cuda"])
def interpreted(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """Run a kernel function and return its result on the CPU: in the interpreter process, or compiled on CUDA
    (skipped where there is no CUDA device)."""
    if request.param == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        yield _on_cuda
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_enable_interpreter) as pool:
        yield lambda fn, *args: pool.submit(fn, *args).result(timeout=120)


def _random_bitmask(rows: int, vocab: int, allowed_frac: float, generator: torch.Generator) -> torch.Tensor:
    allowed = torch.rand(rows, vocab, generator=generator) < allowed_frac  # [rows, vocab] bool
    return pack_bool_mask(allowed, vocab)                                   # [rows, words] int32


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("vocab", [1, 33, 1000, 2085])  # not multiples of 32, one over two kernel blocks
def test_bitmask_kernel_matches_reference_on_all_rows(interpreted, dtype, vocab):
    generator = torch.Generator().manual_seed(vocab)
    logits = torch.randn(4, vocab, generator=generator).to(dtype)
    bitmask = _random_bitmask(4, vocab, 0.5, generator)
    bitmask[2] = 0  # a dead-end row: everything masked

    expected = logits.clone()
    apply_token_bitmask_torch(expected, bitmask)
    got = interpreted(_run_bitmask_kernel, logits.clone(), bitmask, None)

    assert got.dtype == dtype
    assert torch.equal(got, expected)
    assert torch.isneginf(got[2]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bitmask_kernel_touches_only_the_named_rows(interpreted, dtype):
    generator = torch.Generator().manual_seed(7)
    vocab = 517
    logits = torch.randn(6, vocab, generator=generator).to(dtype)
    bitmask = _random_bitmask(3, vocab, 0.3, generator)
    rows = torch.tensor([5, 0, 3], dtype=torch.int64)

    expected = logits.clone()
    apply_token_bitmask_torch(expected, bitmask, rows)
    got = interpreted(_run_bitmask_kernel, logits.clone(), bitmask, rows)

    assert torch.equal(got, expected)
    for untouched in (1, 2, 4):
        assert torch.equal(got[untouched], logits[untouched])


def test_bitmask_kernel_single_row_applies_to_every_row(interpreted):
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 70, generator=generator)
    bitmask = _random_bitmask(1, 70, 0.5, generator)

    expected = logits.clone()
    apply_token_bitmask_torch(expected, bitmask)
    got = interpreted(_run_bitmask_kernel, logits.clone(), bitmask, None)
    assert torch.equal(got, expected)


def test_bitmask_kernel_refuses_a_bitmask_narrower_than_the_vocab():
    from engine.kernels.triton_bitmask import apply_token_bitmask_triton

    logits = torch.zeros(2, 100)
    with pytest.raises(ValueError, match="words"):
        apply_token_bitmask_triton(logits, torch.zeros(2, bitmask_words(64), dtype=torch.int32))
    with pytest.raises(ValueError, match="int32"):
        apply_token_bitmask_triton(logits, torch.zeros(2, 4, dtype=torch.int64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("vocab", [1, 33, 2085])
def test_additive_cpu_bitmask_matches_reference(dtype, vocab):
    # The fast CPU path beside the Triton one: same result as the reference on finite logits.
    generator = torch.Generator().manual_seed(vocab + 1)
    logits = torch.randn(5, vocab, generator=generator).to(dtype)
    logits[0, 0] = float("-inf")  # already masked stays masked
    bitmask = _random_bitmask(5, vocab, 0.4, generator)
    bitmask[3] = 0
    for rows in (None, torch.tensor([4, 1], dtype=torch.int64)):
        mask_rows = bitmask if rows is None else bitmask[:2]
        expected, got = logits.clone(), logits.clone()
        apply_token_bitmask_torch(expected, mask_rows, rows)
        apply_token_bitmask_additive(got, mask_rows, rows)
        assert torch.equal(got, expected)


def _reference_paged_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
) -> torch.Tensor:
    """Loop-free gather + softmax in fp32, independent of the engine's reference."""
    batch, num_heads, _ = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    positions = torch.arange(block_tables.shape[1] * block_size)                        # [T]
    physical = block_tables[:, positions // block_size].clamp(min=0).long()            # [B, T]
    keys = k_cache[physical, positions % block_size].float()                           # [B, T, Hkv, D]
    values = v_cache[physical, positions % block_size].float()                         # [B, T, Hkv, D]
    keys = keys.repeat_interleave(num_heads // num_kv_heads, dim=2)                    # [B, T, H, D]
    values = values.repeat_interleave(num_heads // num_kv_heads, dim=2)                # [B, T, H, D]
    scores = torch.einsum("bhd,bthd->bht", q.float(), keys) * scale                    # [B, H, T]
    beyond_context = positions[None, None, :] >= context_lens[:, None, None].long()
    # Blocks past the context may hold NaN garbage: zero them so 0 * NaN never reaches the sum.
    probs = scores.masked_fill(beyond_context, float("-inf")).softmax(-1)
    values = values.masked_fill(beyond_context.permute(0, 2, 1)[..., None], 0.0)
    return torch.einsum("bht,bthd->bhd", probs, values)                                # [B, H, D]


def _paged_attention_case(
    block_size: int, num_kv_heads: int, group: int, head_dim: int, dtype: torch.dtype, seed: int,
) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    batch, max_blocks, num_blocks = 4, 5, 24
    q = torch.randn(batch, num_kv_heads * group, head_dim, generator=generator).to(dtype)
    # Unused pool blocks hold NaN: a kernel that reads outside a sequence's blocks fails loudly.
    k_cache = torch.full((num_blocks, block_size, num_kv_heads, head_dim), float("nan"), dtype=dtype)
    v_cache = torch.full_like(k_cache, float("nan"))
    # Ragged contexts: one token, exactly one full block, a partial last block, everything.
    context_lens = torch.tensor(
        [1, block_size, 2 * block_size + block_size // 2 + 1, max_blocks * block_size], dtype=torch.int32
    )
    physical = torch.randperm(num_blocks, generator=generator).tolist()
    block_tables = torch.full((batch, max_blocks), -1, dtype=torch.int32)  # -1: no block (padding)
    for seq, context_len in enumerate(context_lens.tolist()):
        for logical in range((context_len + block_size - 1) // block_size):
            block = physical.pop()
            block_tables[seq, logical] = block
            k_cache[block] = torch.randn(block_size, num_kv_heads, head_dim, generator=generator).to(dtype)
            v_cache[block] = torch.randn(block_size, num_kv_heads, head_dim, generator=generator).to(dtype)
        # Slots past the context inside the last block are garbage too.
        last, used = divmod(context_len, block_size)
        if used:
            k_cache[block_tables[seq, last], used:] = float("nan")
            v_cache[block_tables[seq, last], used:] = float("nan")
    return q, k_cache, v_cache, block_tables, context_lens, head_dim**-0.5


@pytest.mark.parametrize(
    ("block_size", "num_kv_heads", "group", "head_dim", "dtype", "tolerance"),
    [
        (16, 2, 1, 16, torch.float32, 1e-5),
        (8, 1, 2, 32, torch.float32, 1e-5),
        (32, 2, 4, 64, torch.float32, 1e-5),
        (5, 2, 2, 24, torch.float32, 1e-5),    # block size and head_dim not powers of two
        (16, 2, 4, 64, torch.float16, 5e-3),
        (8, 1, 2, 32, torch.bfloat16, 3e-2),
    ],
)
def test_paged_attention_kernel_matches_reference(
    interpreted, block_size, num_kv_heads, group, head_dim, dtype, tolerance,
):
    case = _paged_attention_case(block_size, num_kv_heads, group, head_dim, dtype, seed=block_size * head_dim)
    expected = _reference_paged_attention(*case)

    got = interpreted(_run_paged_attention_kernel, *case)

    assert got.shape == case[0].shape and got.dtype == dtype
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), expected, atol=tolerance, rtol=tolerance)


def test_paged_attention_kernel_matches_the_engine_reference(interpreted):
    from engine.kernels.paged_attention import paged_attention_decode_torch

    q, k_cache, v_cache, block_tables, context_lens, scale = _paged_attention_case(8, 2, 2, 32, torch.float32, 11)
    # The engine's reference reads padding entries as block 0 and masks by context length: give it
    # finite garbage there instead of NaN (0 * NaN would poison its weighted sum).
    k_cache, v_cache = k_cache.nan_to_num(0.0), v_cache.nan_to_num(0.0)
    expected = paged_attention_decode_torch(q, k_cache, v_cache, block_tables, context_lens, scale)

    got = interpreted(_run_paged_attention_kernel, q, k_cache, v_cache, block_tables, context_lens, scale)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_paged_attention_refuses_mismatched_heads():
    from engine.kernels.triton_paged_attention import paged_attention_decode_triton

    q = torch.zeros(1, 3, 16)
    cache = torch.zeros(2, 4, 2, 16)
    tables = torch.zeros(1, 1, dtype=torch.int32)
    lens = torch.ones(1, dtype=torch.int32)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        paged_attention_decode_triton(q, cache, cache, tables, lens, 0.25)
    with pytest.raises(ValueError, match="block_tables must be int32"):
        paged_attention_decode_triton(torch.zeros(1, 4, 16), cache, cache, tables.long(), lens, 0.25)


# ---------------------------------------------------------------- quantized blocks


def _quantized_case(bits: int, block_size: int, num_kv_heads: int, group: int, head_dim: int, value_group: int,
                    seed: int) -> tuple[tuple[torch.Tensor, ...], QuantizedBlocks, torch.Tensor, torch.Tensor]:
    """A full-precision pool and a quantized pool, block tables mixing both (quantized ids come after
    the full ones); also the dequantized blocks laid out as one plain pool, for the reference."""
    generator = torch.Generator().manual_seed(seed)
    num_full, num_quantized, batch = 6, 10, 4
    q = torch.randn(batch, num_kv_heads * group, head_dim, generator=generator)
    k_cache = torch.randn(num_full, block_size, num_kv_heads, head_dim, generator=generator)
    v_cache = torch.randn(num_full, block_size, num_kv_heads, head_dim, generator=generator)
    quantized = QuantizedBlocks.allocate(num_quantized, block_size, num_kv_heads, head_dim, bits, value_group)
    keys = torch.randn(num_quantized, block_size, num_kv_heads, head_dim, generator=generator) * 2 + 0.5
    values = torch.randn(num_quantized, block_size, num_kv_heads, head_dim, generator=generator)
    quantized.write(torch.arange(num_quantized), keys, values)
    stored_k, stored_v = quantized.read(torch.arange(num_quantized), torch.float32)
    plain_k, plain_v = torch.cat((k_cache, stored_k)), torch.cat((v_cache, stored_v))
    # quantized history, full-precision residual at the end, as the block manager lays tables out
    block_tables = torch.tensor([[6, 7, 8, 0, 1], [9, 2, 0, 0, 0], [3, 0, 0, 0, 0], [10, 11, 12, 13, 4]],
                                dtype=torch.int32)
    context_lens = torch.tensor([4 * block_size + 3, block_size + 1, 5, 5 * block_size], dtype=torch.int32)
    case = (q, k_cache, v_cache, block_tables, context_lens, head_dim**-0.5)
    return case, quantized, plain_k, plain_v


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize(
    ("block_size", "num_kv_heads", "group", "head_dim", "value_group"),
    [(32, 2, 4, 64, 32), (32, 1, 2, 32, 32), (64, 2, 1, 64, 64), (16, 2, 2, 64, 32)],
)
def test_paged_attention_kernel_reads_quantized_blocks_like_the_reference(
    interpreted, bits, block_size, num_kv_heads, group, head_dim, value_group,
):
    from engine.kernels.paged_attention import paged_attention_decode_torch

    case, quantized, plain_k, plain_v = _quantized_case(bits, block_size, num_kv_heads, group, head_dim,
                                                        value_group, seed=bits * block_size + head_dim)
    q, k_cache, v_cache, block_tables, context_lens, scale = case
    engine_reference = paged_attention_decode_torch(*case, quantized, reference=True)
    independent = _reference_paged_attention(q, plain_k, plain_v, block_tables, context_lens, scale)

    got = interpreted(_run_paged_attention_kernel, *case, quantized)

    torch.testing.assert_close(got, engine_reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, independent, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize(
    ("block_size", "num_kv_heads", "group", "head_dim", "value_group"),
    [(32, 2, 4, 64, 32), (32, 1, 2, 32, 32), (64, 2, 1, 64, 64), (16, 2, 2, 64, 32)],
)
def test_cpu_decode_with_fused_gathers_matches_the_references(
    bits, block_size, num_kv_heads, group, head_dim, value_group,
):
    """The CPU decode path (fused gather-dequantize, one softmax over quantized and residual blocks)
    against dequantize-then-SDPA and against the independent loop."""
    from engine.kernels.paged_attention import paged_attention_decode_torch

    case, quantized, plain_k, plain_v = _quantized_case(bits, block_size, num_kv_heads, group, head_dim,
                                                        value_group, seed=bits + block_size + head_dim)
    q, k_cache, v_cache, block_tables, context_lens, scale = case
    got = paged_attention_decode_torch(*case, quantized)
    torch.testing.assert_close(got, paged_attention_decode_torch(*case, quantized, reference=True),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, _reference_paged_attention(q, plain_k, plain_v, block_tables, context_lens, scale),
                               atol=1e-5, rtol=1e-5)


def test_cpu_decode_with_fused_gathers_handles_mixed_and_grouped_tables():
    """Tables whose quantized and full-precision columns interleave across rows (a longer history
    next to a shorter one, padding after), in a batch large enough to be split into groups."""
    from engine.kernels import paged_attention as attention

    generator = torch.Generator().manual_seed(3)
    batch = attention.DECODE_GROUP_ROWS * 2 + 3
    block_size, heads, dim, num_full, num_quantized = 32, 2, 64, 8, 40
    quantized = QuantizedBlocks.allocate(num_quantized, block_size, heads, dim, 4, 32)
    quantized.write(torch.arange(num_quantized), torch.randn(num_quantized, block_size, heads, dim, generator=generator),
                    torch.randn(num_quantized, block_size, heads, dim, generator=generator))
    k_cache = torch.randn(num_full, block_size, heads, dim, generator=generator)
    v_cache = torch.randn(num_full, block_size, heads, dim, generator=generator)
    tables = torch.full((batch, 5), -1, dtype=torch.int32)
    lens = torch.empty(batch, dtype=torch.int32)
    for row in range(batch):
        history = row % 4                                      # 0..3 quantized blocks, then 1 full block
        ids = torch.randint(num_full, num_full + num_quantized, (history,), generator=generator).tolist()
        tables[row, : history + 1] = torch.tensor(ids + [row % num_full], dtype=torch.int32)
        lens[row] = history * block_size + 1 + row % block_size
    q = torch.randn(batch, heads * 2, dim, generator=generator)
    case = (q, k_cache, v_cache, tables, lens, dim**-0.5, quantized)
    torch.testing.assert_close(attention.paged_attention_decode_torch(*case),
                               attention.paged_attention_decode_torch(*case, reference=True), atol=1e-5, rtol=1e-5)


def test_paged_attention_kernel_refuses_a_mismatched_quantized_pool():
    from engine.kernels.triton_paged_attention import paged_attention_decode_triton

    case, quantized, _, _ = _quantized_case(8, 32, 2, 2, 64, 32, seed=0)
    wrong = QuantizedBlocks(8, 32, quantized.k_rows[..., :-4].contiguous(), quantized.v_rows)
    with pytest.raises(ValueError, match="k_rows"):
        paged_attention_decode_triton(*case, wrong)


def test_cpu_decode_with_fused_gathers_serves_a_bfloat16_model():
    """bf16 pools and queries: the fused path computes in fp32 and returns bf16, within a bf16 step of
    the reference (which runs SDPA on bf16-rounded dequantized blocks)."""
    from engine.kernels.paged_attention import paged_attention_decode_torch

    case, quantized, _, _ = _quantized_case(4, 32, 2, 4, 64, 32, seed=5)
    q, k_cache, v_cache, block_tables, context_lens, scale = case
    bf16 = (q.bfloat16(), k_cache.bfloat16(), v_cache.bfloat16(), block_tables, context_lens, scale, quantized)
    got = paged_attention_decode_torch(*bf16)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), paged_attention_decode_torch(*bf16, reference=True).float(),
                               atol=2e-2, rtol=2e-2)
