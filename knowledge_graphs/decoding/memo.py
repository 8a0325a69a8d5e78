"""A memo bounded by the bytes it holds, not by its entry count.

The KG constraint's shared memos (guard results, walk records, plain guard steps) hold entries whose size
follows the vocabulary: a guard result over a 152k-token vocabulary can hold thousands of token ids, one over
a 32k vocabulary a handful. A count bound sized for one is far too loose for the other (65k entries of a
152k-vocabulary domain grow the engine core by hundreds of MB over an hour), so each memo is bounded by an
estimate of its bytes, and the oldest entries go first (insertion order: a dict's own order, no bookkeeping
per hit on the step thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ENTRY_OVERHEAD = 200        # dict slot, key tuple and its small members (CPython, 64 bits), roughly
ARRAY_OVERHEAD = 112        # a numpy array object besides its data


def arrays_bytes(*arrays: np.ndarray) -> int:
    """What numpy arrays take: their data and their objects (views count their objects only)."""
    return sum(ARRAY_OVERHEAD + (a.nbytes if a.base is None else 0) for a in arrays)


class ByteBoundedMemo(Generic[K, V]):
    """key -> value, at most about `max_bytes` of them by `size_of`; the oldest entries are dropped first."""

    __slots__ = ("_entries", "_lock", "_sizes", "bytes", "entry_bytes", "max_bytes", "size_of")

    def __init__(self, max_bytes: int, size_of: Callable[[V], int], *, entry_bytes: int = ENTRY_OVERHEAD) -> None:
        """entry_bytes: what an entry takes besides `size_of(value)` (its dict slot and its key)."""
        self.max_bytes = max_bytes
        self.size_of = size_of
        self.entry_bytes = entry_bytes
        self._entries: dict[K, V] = {}
        self._sizes: dict[K, int] = {}
        self.bytes = 0
        # writers: the engine core's step thread and its input thread (building a view) both put; without it,
        # two evicting at once could delete the same oldest entry (KeyError) and lose byte counts
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, object]:   # the index cache pickles memos; a lock does not pickle
        return {name: getattr(self, name) for name in self.__slots__ if name != "_lock"}

    def __setstate__(self, state: dict[str, object] | tuple[None, dict[str, object]]) -> None:
        if isinstance(state, tuple):   # pickled before the lock existed: (None, slots)
            state = state[1]
        for name, value in state.items():
            setattr(self, name, value)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def put(self, key: K, value: V) -> V:
        """Keep `value` under `key` (replacing what was there) and return it."""
        size = self.entry_bytes + self.size_of(value)
        with self._lock:
            self.bytes += size - self._sizes.pop(key, 0)
            self._entries.pop(key, None)
            self._entries[key] = value
            self._sizes[key] = size
            entries, sizes = self._entries, self._sizes
            while self.bytes > self.max_bytes and len(entries) > 1:
                oldest = next(iter(entries))
                del entries[oldest]
                self.bytes -= sizes.pop(oldest)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._sizes.clear()
            self.bytes = 0
