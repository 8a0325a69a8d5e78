"""Which malloc the engine core runs on: glibc's, or jemalloc preloaded into the core's process.

Why: the core's heap mixes entries kept for minutes (allowed-set views and their memos) with buffers that live for
one step. Under a sustained mix, glibc keeps the pages between them resident after they are freed: in a soak the
core's heap in use stayed at 138-141 MB while the freed-but-kept part grew 23 -> 42 MB, and `malloc_trim` returns
only whole free pages. jemalloc packs blocks by size class and hands unused pages back on its own (the README's
soak table has the comparison). A process cannot change its malloc once running, so the library is preloaded
(LD_PRELOAD) into the core as it is launched; the API process keeps glibc's. In a core on jemalloc, the glibc
tunings of `engine.memory` (arenas, mmap threshold, trims) act on glibc's unused heap: harmless, and left in
place so that a core on glibc's keeps them.
"""

from __future__ import annotations

import ctypes.util
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

ALLOCATORS = ("auto", "jemalloc", "system")
JEMALLOC = "jemalloc"
SYSTEM = "system"


class AllocatorUnavailable(RuntimeError):
    """jemalloc was asked for and this system has no jemalloc library."""


@cache
def find_jemalloc() -> str | None:
    """jemalloc's shared library as the dynamic loader names it (e.g. Debian's libjemalloc2: 'libjemalloc.so.2'), or
    None. Looks it up without loading it: loaded into a running process it would not replace that process's malloc."""
    return ctypes.util.find_library("jemalloc")


def preload_for(choice: str) -> str | None:
    """The library to preload into the engine core for the `engine_allocator` setting; None: glibc's malloc.
    "auto" takes jemalloc where the system has it; "jemalloc" raises AllocatorUnavailable where it has not."""
    if choice not in ALLOCATORS:
        raise ValueError(f"engine allocator must be one of {', '.join(ALLOCATORS)}, got {choice!r}")
    if choice == SYSTEM:
        return None
    library = find_jemalloc()
    if library is None and choice == JEMALLOC:
        raise AllocatorUnavailable("AUDITOR_ENGINE_ALLOCATOR=jemalloc, but this system has no jemalloc library "
                                   "(Debian: apt-get install libjemalloc2); set it to auto or system")
    return library


_ENVIRONMENT_LOCK = threading.Lock()


@contextmanager
def preloaded(library: str | None) -> Iterator[None]:
    """Processes started inside this block load `library` before anything else (LD_PRELOAD, ahead of any already
    set); the environment is as it was afterwards. None: nothing changes."""
    if library is None:
        yield
        return
    with _ENVIRONMENT_LOCK:
        before = os.environ.get("LD_PRELOAD")
        os.environ["LD_PRELOAD"] = f"{library}:{before}" if before else library
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("LD_PRELOAD", None)
            else:
                os.environ["LD_PRELOAD"] = before


def active_allocator() -> str:
    """"jemalloc" where this process runs on it (its library is mapped), else "system"."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:   # not Linux: nothing here preloads there
        return SYSTEM
    return JEMALLOC if "libjemalloc" in maps else SYSTEM
