"""Rotary position embedding with precomputed cos/sin tables (incl. Llama 3 frequency scaling)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Llama 3.x: stretch low frequencies by `factor`, keep high ones, blend those between."""
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
    high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
    old_context_len = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    def __init__(
        self, head_dim: int, max_positions: int, theta: float, scaling: dict[str, Any] | None,
        dtype: torch.dtype,
    ) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        if scaling is not None and scaling.get("rope_type") == "llama3":
            inv_freq = llama3_inv_freq(inv_freq, scaling)
        positions = torch.arange(max_positions, dtype=torch.float32)
        freqs = positions[:, None] * inv_freq[None, :]          # [max_positions, D/2], fp32 like HF
        # cast like HF does (cos/sin in the model dtype) so bf16/fp16 round the same way
        self.register_buffer("cos", freqs.cos().to(dtype), persistent=False)
        self.register_buffer("sin", freqs.sin().to(dtype), persistent=False)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Rotate x [N, heads, D] (q and k heads side by side, one call) at positions int64 [N]."""
        cos = self.cos[positions].unsqueeze(1)  # [N, 1, D/2]
        sin = self.sin[positions].unsqueeze(1)
        # rotate-half layout: dims i and i + D/2 form one 2-D rotation
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
