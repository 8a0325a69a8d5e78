"""Pick the kernel for the tensors at hand: Triton on CUDA when it imports, plain torch otherwise."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import torch

from engine.kernels.bitmask import apply_token_bitmask_additive

BitmaskApply = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], None]


@cache
def _triton_bitmask() -> BitmaskApply | None:
    try:
        from engine.kernels.triton_bitmask import apply_token_bitmask_triton
    except Exception:  # noqa: BLE001 - no Triton / no GPU build: the torch path serves
        return None
    return apply_token_bitmask_triton


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None) -> None:
    """Set disallowed logits to -inf in place (contract of `apply_token_bitmask_torch`).

    CUDA: the Triton kernel; CPU: the additive byte-lookup path, the fastest torch one measured here.
    """
    if logits.is_cuda:
        kernel = _triton_bitmask()
        if kernel is not None:
            kernel(logits, bitmask.to(logits.device), None if rows is None else rows.to(logits.device))
            return
    apply_token_bitmask_additive(logits, bitmask, rows)
