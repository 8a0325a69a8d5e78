"""Packed token bitmasks: bit (t % 32) of word (t // 32) set <=> token t allowed.

This is XGrammar's layout (int32 words, all bits set = unconstrained), so grammar masks and KG
masks combine with a bitwise AND and share one apply kernel. The plain-torch functions here are the
CPU path and the reference the Triton kernel is tested against.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

BITS = 32


def bitmask_words(vocab_size: int) -> int:
    return (vocab_size + BITS - 1) // BITS


def full_bitmask(rows: int, vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """[rows, words] int32, every token allowed."""
    return torch.full((rows, bitmask_words(vocab_size)), -1, dtype=torch.int32, device=device)


def bitmask_from_token_ids(token_ids: Iterable[int], vocab_size: int) -> torch.Tensor:
    """[words] int32 with exactly `token_ids` allowed. Built once and cached by callers, never per step."""
    bits = torch.zeros(bitmask_words(vocab_size) * BITS, dtype=torch.bool)
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    if ids.numel():
        bits[ids] = True
    return pack_bool_mask(bits[:vocab_size], vocab_size)


def pack_bool_mask(allowed: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """bool [..., vocab] -> int32 [..., words]."""
    words = bitmask_words(vocab_size)
    padded = torch.zeros((*allowed.shape[:-1], words * BITS), dtype=torch.bool, device=allowed.device)
    padded[..., : allowed.shape[-1]] = allowed
    weights = (torch.ones(BITS, dtype=torch.int64, device=allowed.device) << torch.arange(BITS, device=allowed.device))
    packed = (padded.view(*allowed.shape[:-1], words, BITS).to(torch.int64) * weights).sum(-1)
    return packed.to(torch.int64).where(packed < 2**31, packed - 2**32).to(torch.int32)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int32 [..., words] -> bool [..., vocab] (True = allowed)."""
    shifts = torch.arange(BITS, device=bitmask.device, dtype=torch.int32)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1  # [..., words, 32]
    return bits.flatten(-2)[..., :vocab_size].bool()


def apply_token_bitmask_torch(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None) -> None:
    """Set disallowed logits to -inf in place.

    logits [num_rows, vocab]; bitmask [k, words]; rows: int64 [k] row indices of `logits` that
    bitmask[i] applies to (None: bitmask row i -> logits row i for all rows).
    """
    vocab = logits.shape[-1]
    allowed = unpack_bitmask(bitmask, vocab)  # [k, vocab]
    if rows is None:
        logits.masked_fill_(~allowed[: logits.shape[0]], float("-inf"))
    else:
        target = logits.index_select(0, rows)
        target.masked_fill_(~allowed, float("-inf"))
        logits.index_copy_(0, rows, target)
