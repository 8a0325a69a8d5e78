"""glibc malloc settings (`engine.memory`): each check runs in a fresh interpreter, as a setting lasts for the
process that makes it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GLIBC = any(Path(p).exists() for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"))

# A 4 MB block, mmapped and freed, raises glibc's dynamic threshold to 4 MB (as torch freeing a large activation
# does); a 512 kB block asked for afterwards then comes from the heap, unless the threshold was pinned.
_PROBE = """
import ctypes, sys
from engine.memory import pin_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
libc.free(libc.malloc(4 << 20))
if sys.argv[1] == "pinned":
    assert pin_mmap_threshold(128 * 1024)
before = libc.mallinfo2().hblkhd
block = libc.malloc(512 * 1024)
print("mmapped" if libc.mallinfo2().hblkhd - before >= 512 * 1024 else "heap")
libc.free(block)
"""


def _probe(mode: str) -> str:
    result = subprocess.run([sys.executable, "-c", _PROBE, mode], cwd=Path(__file__).resolve().parents[2],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_a_pinned_threshold_keeps_large_blocks_off_the_heap_after_a_larger_one_was_freed() -> None:
    assert _probe("default") == "heap"       # glibc's threshold rose to 4 MB: the block fragments the heap
    assert _probe("pinned") == "mmapped"     # pinned at 128 kB: it gets its own pages, returned when freed


def test_zero_leaves_glibc_default() -> None:
    from engine.memory import limit_malloc_arenas, pin_mmap_threshold

    assert pin_mmap_threshold(0) is False
    assert limit_malloc_arenas(0) is False
