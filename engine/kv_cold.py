"""The cold KV tier: prefix-cache blocks evicted from the pool, kept in a memory-mapped file.

The file lives under the configured folder (`kv_cache_cold_dir`), is created for this process
(`kv-cold-<host>-<pid>-<random>.bin`, mode 0600), has a fixed size (`kv_cache_cold_bytes`, reserved
with posix_fallocate so a full disk fails at start-up rather than mid-write) and is removed when the
engine goes away; files that processes of this host left behind when they were killed are removed
at start-up. It holds fixed-size slots, one block each, in the form the pool stores them;
the index (block hash -> slot, token ids, digest) is in memory and least recently used entries
give way when the file is full.

A block comes back only if its bytes still match the digest taken when it was written (HMAC-SHA256
under a key that lives in this process only, so whoever can write the file cannot forge a block that
passes; SHA-256 runs at about twice blake2b's speed on CPUs with SHA extensions), and the file is still
the one this process created: a corrupt slot, or a file that was deleted, replaced or truncated,
makes `load` return None and the engine recomputes the block. Never wrong KV.
"""

from __future__ import annotations

import hmac
import logging
import mmap
import os
import secrets
import socket
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger("engine")



@dataclass(slots=True)
class _Entry:
    slot: int
    token_ids: tuple[int, ...]
    digest: bytes


_PREFIX = f"kv-cold-{socket.gethostname()}-"


class _MappedFile:
    """One fixed-size file, memory-mapped read/write; closing it removes it."""

    def __init__(self, directory: Path, size: int) -> None:
        self.path = directory / f"{_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.bin"
        self.size = size
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                os.posix_fallocate(self.fd, 0, size)
            except OSError as exc:
                if exc.errno not in (95, 22):   # EOPNOTSUPP / EINVAL: a file system without fallocate
                    raise
                os.ftruncate(self.fd, size)
            self.inode = os.fstat(self.fd).st_ino
            self.map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            self.path.unlink(missing_ok=True)
            raise

    def intact(self) -> bool:
        """Still our file, at its full size (reading a truncated mapping would crash the process)."""
        try:
            on_disk = os.stat(self.path)
            return on_disk.st_ino == self.inode and os.fstat(self.fd).st_size >= self.size
        except OSError:
            return False

    def close(self) -> None:
        _close(self.map, self.fd, self.path, self.inode)


def remove_stale_files(directory: Path) -> list[Path]:
    """Remove the cold files of this host's processes that no longer run (killed before cleaning up)."""
    removed = []
    for path in directory.glob(f"{_PREFIX}*-*.bin"):
        pid = path.name.removeprefix(_PREFIX).split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process
        return True
    return True


def _close(mapping: mmap.mmap, fd: int, path: Path, inode: int) -> None:
    mapping.close()
    os.close(fd)
    try:
        if os.stat(path).st_ino == inode:   # never remove a file someone else put in its place
            path.unlink()
    except OSError:
        pass


class ColdStore:
    def __init__(self, directory: str | Path, capacity_bytes: int, block_bytes: int) -> None:
        if block_bytes < 1:
            raise ValueError(f"block_bytes must be > 0, got {block_bytes}")
        self.directory = Path(directory)
        self.block_bytes = block_bytes
        self.num_slots = capacity_bytes // block_bytes
        if self.num_slots < 1:
            raise ValueError(f"kv_cache_cold_bytes={capacity_bytes} cannot hold one KV block ({block_bytes} bytes)")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for stale in remove_stale_files(self.directory):
                logger.info("kv cold tier: removed %s, left by a process that no longer runs", stale)
            self._file: _MappedFile | None = self._open()
        except OSError as exc:
            raise ValueError(f"kv_cache_cold_dir {self.directory}: cannot create the cold file: {exc}") from exc
        self._key = secrets.token_bytes(32)
        self._index: OrderedDict[int, _Entry] = OrderedDict()   # least recently used first
        self._free_slots = list(range(self.num_slots - 1, -1, -1))
        # counters in blocks
        self.stored = 0
        self.hits = 0
        self.corrupt = 0
        self.file_lost = 0
        self.evicted = 0
        self._disabled = False           # a lost file that could not be recreated: go on without a cold tier

    def _open(self) -> _MappedFile:
        mapped = _MappedFile(self.directory, self.num_slots * self.block_bytes)
        self._finalizer = weakref.finalize(self, _close, mapped.map, mapped.fd, mapped.path, mapped.inode)
        return mapped

    @property
    def path(self) -> Path | None:
        return self._file.path if self._file is not None else None

    def __len__(self) -> int:
        return len(self._index)

    def contains(self, block_hash: int, token_ids: tuple[int, ...]) -> bool:
        entry = self._index.get(block_hash)
        return entry is not None and entry.token_ids == token_ids

    def put(self, block_hash: int, token_ids: tuple[int, ...], payload: torch.Tensor) -> None:
        """Keep one block (uint8 [block_bytes]); the least recently used entry gives way when full."""
        if self.contains(block_hash, token_ids):
            self._index.move_to_end(block_hash)
            return
        if not self._usable():
            return
        assert self._file is not None
        data = payload.contiguous().view(torch.uint8).numpy()
        if data.nbytes != self.block_bytes:
            raise ValueError(f"cold block payload has {data.nbytes} bytes, expected {self.block_bytes}")
        self._drop(block_hash)
        if not self._free_slots:
            _, oldest = self._index.popitem(last=False)
            self._free_slots.append(oldest.slot)
            self.evicted += 1
        slot = self._free_slots.pop()
        offset = slot * self.block_bytes
        self._file.map[offset : offset + self.block_bytes] = data.data
        self._index[block_hash] = _Entry(slot, token_ids, self._digest(data.data))
        self.stored += 1

    def load(self, block_hash: int, token_ids: tuple[int, ...]) -> torch.Tensor | None:
        """The block's bytes, or None: not here, or they no longer match their digest (the entry is dropped)."""
        entry = self._index.get(block_hash)
        if entry is None or entry.token_ids != token_ids or not self._usable():
            return None
        assert self._file is not None
        offset = entry.slot * self.block_bytes
        data = bytearray(self._file.map[offset : offset + self.block_bytes])
        if not hmac.compare_digest(self._digest(data), entry.digest):
            logger.warning("kv cold tier: block in slot %d failed its digest check; recomputing it", entry.slot)
            self.corrupt += 1
            self._drop(block_hash)
            return None
        self._index.move_to_end(block_hash)
        self.hits += 1
        return torch.frombuffer(data, dtype=torch.uint8)

    def stats(self) -> dict[str, Any]:
        return {
            "kv_cache_cold_entries": len(self._index),
            "kv_cache_cold_capacity_blocks": self.num_slots,
            "kv_cache_cold_stored_blocks": self.stored,
            "kv_cache_cold_hit_blocks": self.hits,
            "kv_cache_cold_corrupt_blocks": self.corrupt,
            "kv_cache_cold_file_lost": self.file_lost,
            "kv_cache_cold_evicted_blocks": self.evicted,
        }

    def close(self) -> None:
        self._finalizer()
        self._file = None
        self._index.clear()

    def _digest(self, data: Any) -> bytes:
        return hmac.digest(self._key, data, "sha256")

    def _drop(self, block_hash: int) -> None:
        entry = self._index.pop(block_hash, None)
        if entry is not None:
            self._free_slots.append(entry.slot)

    def _usable(self) -> bool:
        """The file is intact; if it is not, forget every entry and start a new file (or go without)."""
        if self._file is not None and self._file.intact():
            return True
        if self._disabled:
            return False
        if self._file is not None:
            logger.warning("kv cold tier: %s was removed, replaced or truncated; dropping %d blocks",
                           self._file.path, len(self._index))
            self.file_lost += 1
            self._finalizer()
            self._file = None
        self._index.clear()
        self._free_slots = list(range(self.num_slots - 1, -1, -1))
        try:
            self._file = self._open()
        except OSError as exc:
            logger.warning("kv cold tier: cannot recreate the cold file (%s); continuing without it", exc)
            self._disabled = True
            return False
        return True
