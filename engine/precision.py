"""Which dtype the engine computes in: `dtype="auto"` picks bf16 where the hardware runs it fast.

On CPUs with AMX (Sapphire Rapids and later) or AVX512-BF16 (Cooper Lake, Zen 4 and later), and on
Arm cores with the BF16 extension, oneDNN runs bf16 matmuls 2-5x faster than fp32 and the weights and
KV cache take half the memory. On the bundled model bf16 decodes 1.55x as fast as fp32 on this AMX
machine, 97% of greedy outputs are identical and the perplexity of reference answers moves by less
than 0.01% (`python -m benchmarks.precision`; README, "Precision"). Where no such unit exists, bf16 is
emulated and slower than fp32, so "auto" keeps the checkpoint's dtype there.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from engine.config import parse_dtype

AUTO = "auto"


@functools.cache
def cpu_bf16_feature() -> str | None:
    """The CPU feature that makes bf16 fast here ("amx_bf16", "avx512_bf16", "bf16" on Arm), or None.

    torch's cpuinfo reports what the CPU *and the OS* enable (AVX-512 state saved by the kernel); AMX
    additionally needs the kernel's per-process permission for its tile data, which `_init_amx` asks for.
    oneDNN must also agree that it has a bf16 path on this machine."""
    caps = _cpu_capabilities()
    if not (torch.backends.mkldnn.is_available() and _mkldnn_bf16_supported()):
        return None
    if caps.get("amx_bf16") and caps.get("amx_tile") and _amx_permitted():
        return "amx_bf16"
    if caps.get("avx512_bf16"):
        return "avx512_bf16"
    if caps.get("bf16") or caps.get("sve_bf16"):   # Arm: BF16 (FEAT_BF16) or SVE-BF16
        return "bf16"
    return None


def resolve_dtype(requested: str | torch.dtype | None, checkpoint_dtype: torch.dtype,
                  device: torch.device) -> torch.dtype:
    """The dtype to load weights in: an explicit request as given; None the checkpoint's own; "auto"
    bf16 for an fp32 or fp16 checkpoint where the device runs bf16 fast, else the checkpoint's."""
    if requested is None:
        return checkpoint_dtype
    if requested != AUTO:
        return parse_dtype(requested)
    if checkpoint_dtype not in (torch.float32, torch.float16):
        return checkpoint_dtype
    if device.type == "cpu":
        return torch.bfloat16 if cpu_bf16_feature() else checkpoint_dtype
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return checkpoint_dtype


def dtype_name(dtype: torch.dtype) -> str:
    """"bfloat16", "float32", ...: the name audit records and benchmarks print."""
    return str(dtype).removeprefix("torch.")


def _cpu_capabilities() -> dict[str, object]:
    get = getattr(torch.cpu, "get_capabilities", None)
    if get is not None:
        return dict(get())
    # older torch: the kernel's own list (Linux); the flag names match cpuinfo's for the ones read above
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return {}
    for line in cpuinfo.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return dict.fromkeys(value.split(), True)
    return {}


def _amx_permitted() -> bool:
    init = getattr(torch.cpu, "_init_amx", None)
    return bool(init()) if init is not None else True


def _mkldnn_bf16_supported() -> bool:
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else True
    except RuntimeError:
        return False
