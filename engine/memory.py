"""Returning freed memory to the operating system."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _glibc_function(name: str, argtypes: tuple[type, ...]) -> Callable[..., int] | None:
    """One of glibc's malloc functions, typed (returns int); None where there is no glibc."""
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):   # not glibc
        return None
    function.argtypes, function.restype = list(argtypes), ctypes.c_int
    return function


def _libc_trim() -> Callable[[int], int] | None:
    return _glibc_function("malloc_trim", (ctypes.c_size_t,))


def _libc_mallopt() -> Callable[[int, int], int] | None:
    return _glibc_function("mallopt", (ctypes.c_int, ctypes.c_int))


# glibc's mallopt parameters
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8


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
