"""Returning freed memory to the operating system."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _libc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):   # not glibc
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def malloc_trim() -> bool:
    """glibc's malloc_trim(0): give freed heap pages back to the OS. Many small per-request and per-state
    allocations leave the heap fragmented, so without it RSS only ever grows even when live data does not.
    Returns False where there is no glibc (then it does nothing)."""
    trim = _libc_trim()
    if trim is None:
        return False
    trim(0)
    return True
