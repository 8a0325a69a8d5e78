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


M_ARENA_MAX = -8   # glibc's mallopt parameter


def limit_malloc_arenas(count: int) -> bool:
    """glibc's mallopt(M_ARENA_MAX, count): threads share at most `count` malloc arenas from now on (arenas
    already made stay). By default glibc makes up to 8 per core, one per thread that meets contention, and the
    freed pages of each stay fragmented and resident. 0 leaves glibc's default; False where there is no glibc."""
    if count <= 0:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):   # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, count))


def malloc_trim() -> bool:
    """glibc's malloc_trim(0): give freed heap pages back to the OS. Many small per-request and per-state
    allocations leave the heap fragmented, so without it RSS only ever grows even when live data does not.
    Returns False where there is no glibc (then it does nothing)."""
    trim = _libc_trim()
    if trim is None:
        return False
    trim(0)
    return True
