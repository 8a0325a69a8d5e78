"""Triton kernel: apply a packed token bitmask to logits in place (GPU path).

Same contract as `engine.kernels.bitmask.apply_token_bitmask_torch`, which is the CPU path and the
reference this kernel is tested against: bit (t % 32) of int32 word (t // 32) set <=> token t
allowed (XGrammar's layout); disallowed logits become -inf, allowed ones are left untouched.

The kernel never reads the logits: it only stores -inf where a bit is clear, so its cost is one read
of the (32x smaller) bitmask plus masked writes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.bitmask import BITS, bitmask_words

# Tokens handled by one program. A multiple of 32 so that one program reads whole bitmask words.
_BLOCK_TOKENS = 1024


@triton.jit
def _apply_token_bitmask_kernel(
    logits_ptr,             # [num_rows, vocab] float, row stride `logits_row_stride`
    bitmask_ptr,            # [k, words] int32, row stride `bitmask_row_stride` (0: one row for all)
    rows_ptr,               # [k] int64 logits row of each bitmask row (unused unless HAS_ROWS)
    vocab_size,
    logits_row_stride,
    bitmask_row_stride,
    HAS_ROWS: tl.constexpr,
    BLOCK_TOKENS: tl.constexpr,
):
    mask_row = tl.program_id(0)
    block_start = tl.program_id(1) * BLOCK_TOKENS
    if HAS_ROWS:
        logits_row = tl.load(rows_ptr + mask_row)
    else:
        logits_row = mask_row.to(tl.int64)

    # One program covers BLOCK_TOKENS tokens = BLOCK_TOKENS // 32 words.
    word_offsets = block_start // 32 + tl.arange(0, BLOCK_TOKENS // 32)            # [W]
    words = tl.load(
        bitmask_ptr + mask_row.to(tl.int64) * bitmask_row_stride + word_offsets,
        mask=word_offsets * 32 < vocab_size, other=-1,
    )                                                                              # [W] int32
    bit_index = tl.arange(0, 32)                                                   # [32]
    disallowed = ((words[:, None] >> bit_index[None, :]) & 1) == 0                # [W, 32]
    disallowed = tl.reshape(disallowed, (BLOCK_TOKENS,))                           # [BLOCK_TOKENS]

    token_offsets = block_start + tl.arange(0, BLOCK_TOKENS)                      # [BLOCK_TOKENS]
    tl.store(
        logits_ptr + logits_row * logits_row_stride + token_offsets,
        float("-inf"),
        mask=(token_offsets < vocab_size) & disallowed,
    )


def apply_token_bitmask_triton(
    logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None,
) -> None:
    """Set disallowed logits to -inf in place (Triton; CUDA, or CPU under TRITON_INTERPRET=1).

    logits [num_rows, vocab] float32/float16/bfloat16 with contiguous rows; bitmask int32 [k, words]
    with words >= ceil(vocab / 32); rows: int64 [k] logits row that bitmask[i] applies to (valid,
    distinct indices), or None (bitmask row i -> logits row i; a single bitmask row applies to every
    row, as in the reference).
    """
    _check_arguments(logits, bitmask, rows)
    num_rows, vocab_size = logits.shape
    if rows is None:
        num_mask_rows = num_rows
        # A single mask row broadcasts over all logits rows (stride 0), like the torch reference.
        bitmask_row_stride = 0 if bitmask.shape[0] == 1 else bitmask.stride(0)
    else:
        num_mask_rows = rows.shape[0]
        bitmask_row_stride = bitmask.stride(0)
    if num_mask_rows == 0 or vocab_size == 0:
        return
    grid = (num_mask_rows, triton.cdiv(vocab_size, _BLOCK_TOKENS))
    _apply_token_bitmask_kernel[grid](
        logits, bitmask, rows if rows is not None else bitmask,
        vocab_size, logits.stride(0), bitmask_row_stride,
        HAS_ROWS=rows is not None, BLOCK_TOKENS=_BLOCK_TOKENS,
    )


def _check_arguments(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None) -> None:
    # The kernel does raw pointer arithmetic, so a shape or dtype slip would corrupt memory silently.
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError(f"logits must be [num_rows, vocab] with contiguous rows, got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"logits must be float32, float16 or bfloat16, got {logits.dtype}")
    if bitmask.dtype != torch.int32 or bitmask.dim() != 2 or bitmask.stride(1) != 1:
        raise ValueError(f"bitmask must be a contiguous int32 [k, words] tensor, got {bitmask.dtype} {tuple(bitmask.shape)}")
    if bitmask.shape[1] < bitmask_words(logits.shape[1]):
        raise ValueError(
            f"bitmask has {bitmask.shape[1]} words ({bitmask.shape[1] * BITS} tokens), "
            f"logits have {logits.shape[1]} tokens"
        )
    if bitmask.device != logits.device:
        raise ValueError(f"bitmask is on {bitmask.device}, logits on {logits.device}")
    if rows is None:
        if bitmask.shape[0] != 1 and bitmask.shape[0] < logits.shape[0]:
            raise ValueError(f"bitmask has {bitmask.shape[0]} rows for {logits.shape[0]} logits rows")
        return
    if rows.dtype != torch.int64 or rows.dim() != 1 or rows.device != logits.device:
        raise ValueError("rows must be a 1-D int64 tensor on the logits' device")
    if rows.shape[0] > bitmask.shape[0]:
        raise ValueError(f"{rows.shape[0]} rows given for a bitmask of {bitmask.shape[0]} rows")
    if rows.shape[0] > 1 and rows.stride(0) != 1:
        raise ValueError("rows must be contiguous")
    # Row values are not range-checked here: that would cost a device sync every decode step.
