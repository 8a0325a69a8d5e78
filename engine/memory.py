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


# glibc's mallopt parameters
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8


@cache
def _libc_mallopt() -> Callable[[int, int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):   # not glibc
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


def limit_malloc_arenas(count: int) -> bool:
    """glibc's mallopt(M_ARENA_MAX, count): threads share at most `count` malloc arenas from now on (arenas
    already made stay). By default glibc makes up to 8 per core, one per thread that meets contention, and the
    freed pages of each stay fragmented and resident. 0 leaves glibc's default; False where there is no glibc."""
    mallopt = _libc_mallopt()
    return count > 0 and mallopt is not None and bool(mallopt(M_ARENA_MAX, count))


def pin_mmap_threshold(size_bytes: int) -> bool:
    """glibc's mallopt(M_MMAP_THRESHOLD, size): blocks of at least `size_bytes` get pages of their own (mmap),
    which go back to the OS the moment they are freed. glibc's default starts at 128 kB but rises to the
    largest mmapped block ever freed (up to 32 MB): after torch frees one large activation, every array and
    dict table below that size is carved from the heap, where blocks freed between long-lived ones fragment it
    and its resident size only grows. Pinning the threshold also stops that rise. 0 leaves glibc's default;
    False where there is no glibc."""
    mallopt = _libc_mallopt()
    return size_bytes > 0 and mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, size_bytes))


def configure_malloc(*, arena_max: int, mmap_threshold_bytes: int) -> None:
    """The process's malloc settings, before its threads start allocating (`limit_malloc_arenas`,
    `pin_mmap_threshold`)."""
    limit_malloc_arenas(arena_max)
    pin_mmap_threshold(mmap_threshold_bytes)


def malloc_trim() -> bool:
    """glibc's malloc_trim(0): give freed heap pages back to the OS. Many small per-request and per-state
    allocations leave the heap fragmented, so without it RSS only ever grows even when live data does not.
    Returns False where there is no glibc (then it does nothing)."""
    trim = _libc_trim()
    if trim is None:
        return False
    trim(0)
    return True
