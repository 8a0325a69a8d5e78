"""Sentence vectors already computed in this process, the least recently used dropped first.

Why: a request's sentences are embedded while it streams (to detect its domain), and the in-process scoring of
its record detects the domain again from the same prompt and output. Each MiniLM forward is most of the API
process's CPU per no-domain request; with the vectors kept, scoring embeds only what it had not seen. The
encoder is deterministic, so a kept vector is the vector the encoder would give again. Bounded by entries
(one vector of 384 float32 is 1.5 KB: 1,024 entries are about 1.6 MB), so memory stays flat under traffic.
Scoring in the API process lags its requests by at most ~10 s (the embedded worker holds back under load), and
a soak sees ~25 new sentences a second: 1,024 covers that window several times over without the cache taking
minutes of a run to fill (with 4,096, a 10-minute soak's API slope was 1.14 MB/min, against 0.74 before the cache).
Entries are keyed by a digest of the sentence, not the sentence: the cache keeps no customer text in memory
after its request (a tenant whose trail stores only hashes keeps that promise here too).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

Encode = Callable[[list[str]], np.ndarray]


class EmbeddingCache:
    """Thread-safe; `capacity` 0 keeps nothing."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"embedding cache capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._vectors: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._vectors)

    def vectors(self, pieces: list[str], encode: Encode) -> np.ndarray:
        """[len(pieces), dim]: kept vectors where there are, `encode` (called once, outside the lock) for the rest."""
        if self.capacity == 0:
            return encode(pieces)
        keys = {piece: _key(piece) for piece in pieces}
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for piece, key in keys.items():
                vector = self._vectors.get(key)
                if vector is not None:
                    self._vectors.move_to_end(key)
                    found[piece] = vector
        missing = [p for p in keys if p not in found]
        if missing:
            for piece, vector in zip(missing, encode(missing), strict=True):
                vector = np.array(vector, dtype=np.float32)      # its own copy, read-only: nobody can alter a kept one
                vector.setflags(write=False)
                found[piece] = vector
        with self._lock:
            for piece in missing:
                self._vectors[keys[piece]] = found[piece]
                self._vectors.move_to_end(keys[piece])
            while len(self._vectors) > self.capacity:
                self._vectors.popitem(last=False)
            self.hits += len(pieces) - len(missing)
            self.misses += len(missing)
        return np.stack([found[p] for p in pieces])


def _key(piece: str) -> bytes:
    return hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=16).digest()
