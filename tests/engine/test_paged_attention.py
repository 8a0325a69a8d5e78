"""The torch paged-attention paths against a naive per-token reference."""

from __future__ import annotations

import torch

from engine.kernels.paged_attention import (
    paged_attention_decode,
    paged_attention_decode_torch,
    paged_attention_prefill_torch,
    store_kv,
)


def _naive(q_tok: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """q_tok [H, D], keys/values [L, Hkv, D] -> [H, D], GQA by repeating kv heads."""
    group = q_tok.shape[0] // keys.shape[1]
    k = keys.repeat_interleave(group, dim=1)
    v = values.repeat_interleave(group, dim=1)
    probs = (torch.einsum("hd,lhd->hl", q_tok, k) * scale).softmax(-1)
    return torch.einsum("hl,lhd->hd", probs, v)


def _pools(num_blocks=12, block_size=4, kv_heads=2, head_dim=8):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=gen),
            torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=gen))


def _context(cache: torch.Tensor, table: list[int], length: int) -> torch.Tensor:
    bs = cache.shape[1]
    return torch.stack([cache[table[i // bs], i % bs] for i in range(length)])


def test_decode_matches_reference_with_gqa_and_ragged_contexts():
    k_cache, v_cache = _pools()
    tables = [[7, 2, 9], [4, 0, 0], [1, 3, 0]]     # second and third padded
    lens = [11, 1, 6]
    q = torch.randn(3, 4, 8)
    out = paged_attention_decode_torch(
        q, k_cache, v_cache, torch.tensor(tables, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32), 0.35
    )
    for b in range(3):
        expected = _naive(q[b], _context(k_cache, tables[b], lens[b]), _context(v_cache, tables[b], lens[b]), 0.35)
        torch.testing.assert_close(out[b], expected, atol=1e-5, rtol=1e-5)
    dispatched = paged_attention_decode(
        q, k_cache, v_cache, torch.tensor(tables, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32), 0.35
    )
    torch.testing.assert_close(dispatched, out)


def test_prefill_with_cached_prefix_is_causal_over_prefix_and_chunk():
    k_cache, v_cache = _pools()
    tables = [[5, 6, 8], [10, 11, 0]]
    cached, chunk = [6, 0], [4, 5]                 # seq 0: 6 cached + 4 new; seq 1: 5 fresh tokens
    n = sum(chunk)
    q, k, v = torch.randn(n, 4, 8), torch.randn(n, 2, 8), torch.randn(n, 2, 8)
    bs = k_cache.shape[1]
    slots = [tables[s][p // bs] * bs + p % bs for s in range(2) for p in range(cached[s], cached[s] + chunk[s])]
    store_kv(k, v, k_cache, v_cache, torch.tensor(slots))
    out = paged_attention_prefill_torch(
        q, k, v, k_cache, v_cache, torch.tensor(tables, dtype=torch.int32), chunk,
        [c + m for c, m in zip(cached, chunk, strict=True)], 0.35,
    )
    row = 0
    for s in range(2):
        for t in range(chunk[s]):
            visible = cached[s] + t + 1
            expected = _naive(q[row], _context(k_cache, tables[s], visible), _context(v_cache, tables[s], visible), 0.35)
            torch.testing.assert_close(out[row], expected, atol=1e-5, rtol=1e-5)
            row += 1


def test_bitmask_dispatch_on_cpu_matches_the_reference():
    from engine.kernels.bitmask import apply_token_bitmask_torch, bitmask_from_token_ids
    from engine.kernels.dispatch import apply_token_bitmask

    logits = torch.randn(4, 70)
    masks = torch.stack([bitmask_from_token_ids(ids, 70) for ids in ([1, 2, 69], [0], list(range(40)))])
    rows = torch.tensor([3, 0, 2])
    expected = logits.clone()
    apply_token_bitmask_torch(expected, masks, rows)
    apply_token_bitmask(logits, masks, rows)
    assert torch.equal(logits, expected)
    assert torch.isinf(logits[3]).sum() == 67 and torch.isfinite(logits[1]).all()


def test_grouped_decode_of_a_large_unsorted_batch_matches_reference():
    k_cache, v_cache = _pools(num_blocks=64, block_size=4)
    gen = torch.Generator().manual_seed(1)
    batch = 40  # above the grouping threshold; lengths shuffled so groups need a gather
    lens = torch.randint(1, 33, (batch,), generator=gen).tolist()
    tables = [torch.randperm(64, generator=gen)[:8].tolist() for _ in range(batch)]
    q = torch.randn(batch, 4, 8, generator=gen)
    out = paged_attention_decode_torch(
        q, k_cache, v_cache, torch.tensor(tables, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32), 0.3
    )
    for b in range(batch):
        expected = _naive(q[b], _context(k_cache, tables[b], lens[b]), _context(v_cache, tables[b], lens[b]), 0.3)
        torch.testing.assert_close(out[b], expected, atol=1e-5, rtol=1e-5)
