"""Paged KV-cache bookkeeping: fixed-size blocks, ref counts, prefix caching with LRU eviction, tiers.

A full block is identified by a chained hash over (previous block's hash, its token ids); the first
block also mixes in the request's `cache_salt`, so two tenants with different salts never share a
block. Freed blocks keep their hash and stay findable until they are reallocated (oldest free first).

Tiers (see engine/kv_spec.py). Ids [0, num_blocks) are full-precision blocks; with a quantized
cache, ids [num_blocks, num_blocks + num_quantized_blocks) are quantized ones. A sequence's blocks
before its residual (`quantized_boundary`) are kept quantized: a block a step writes whole goes
straight to a quantized block; a block filled over several steps is converted at the next step that
schedules the sequence. A prefix hit is used only as far as the same rule allows, so a query sees
exactly the keys it would see without the hit: outputs do not depend on what else runs.
With a cold store, a cached block evicted from the pool is saved there, and a later prefix hit
restores it (after checking its digest) instead of recomputing it.

The copies this implies are queued as `KVOps` for the model runner, which performs them before the
next forward: saves read evicted blocks before anything overwrites them, then conversions, then
restores. Ops are only queued for sequences scheduled in the same step, so none outlives a step.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from engine.kernels.kv_quant import quantized_boundary
from engine.sequence import Sequence


@dataclass(slots=True)
class Block:
    block_id: int
    quantized: bool = False
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()      # kept to verify a hash hit token for token


@dataclass(slots=True)
class KVOps:
    """Pool copies for the model runner, performed in this order before the next forward."""

    saves: list[tuple[int, int, tuple[int, ...]]] = field(default_factory=list)  # (block, hash, tokens) -> cold
    conversions: list[tuple[int, int]] = field(default_factory=list)             # (full block, quantized block)
    restores: list[tuple[int, torch.Tensor]] = field(default_factory=list)       # (block, payload) <- cold

    def __bool__(self) -> bool:
        return bool(self.saves or self.conversions or self.restores)


class ColdTier(Protocol):
    """What the block manager needs of the cold store (engine.kv_cold.ColdStore)."""

    def contains(self, block_hash: int, token_ids: tuple[int, ...]) -> bool: ...

    def load(self, block_hash: int, token_ids: tuple[int, ...]) -> torch.Tensor | None: ...


@dataclass(frozen=True, slots=True)
class _ColdHit:
    hash: int
    token_ids: tuple[int, ...]


@dataclass(slots=True)
class _Growth:
    convert: list[int]       # table indices of full-precision blocks to quantize
    settled: int             # once converted, table entries [0, settled) are all quantized
    new_quantized: int       # blocks appended as quantized (written whole this step, older than the window)
    new_full: int            # full-precision blocks appended


def block_hash(parent: int | None, token_ids: tuple[int, ...], salt: str | None) -> int:
    # the salt only enters the first block; the chain carries it into every later block
    return hash((parent, token_ids, salt) if parent is None else (parent, token_ids))


class BlockManager:
    def __init__(
        self, num_blocks: int, block_size: int, enable_prefix_caching: bool, *, num_quantized_blocks: int = 0,
        residual_tokens: int = 0, cold: ColdTier | None = None,
    ) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.num_full_blocks = num_blocks
        self.num_quantized_blocks = num_quantized_blocks
        self.residual_tokens = residual_tokens if num_quantized_blocks else 0
        self.cold = cold
        self.blocks = [Block(i, quantized=i >= num_blocks) for i in range(num_blocks + num_quantized_blocks)]
        # ref_count == 0 blocks per kind, least recently freed first: allocation evicts from the front
        self._free: dict[bool, OrderedDict[int, None]] = {
            False: OrderedDict((i, None) for i in range(num_blocks)),
            True: OrderedDict((i, None) for i in range(num_blocks, len(self.blocks))),
        }
        self.cached: dict[int, int] = {}   # block hash -> block id
        self.pending = KVOps()
        # counters in tokens, as vLLM reports them
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        # counters in blocks
        self.num_conversions = 0
        self.cold_restored_blocks = 0
        self.cold_restore_failures = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free[False]) + len(self._free[True])

    def num_free(self, quantized: bool) -> int:
        return len(self._free[quantized])

    def usage(self) -> float:
        """The fuller of the two pools: either one running out holds new requests back."""
        sizes = {False: self.num_full_blocks, True: self.num_quantized_blocks}
        return max(1.0 - len(self._free[kind]) / size for kind, size in sizes.items() if size)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def quantized_boundary(self, position: int) -> int:
        """A query at `position` sees blocks [0, boundary) quantized (engine.kv_spec)."""
        return quantized_boundary(position, self.residual_tokens, self.block_size)

    def fits(self, num_tokens: int) -> bool:
        """Whether one sequence of num_tokens tokens could ever be held, the pool otherwise empty."""
        if not self.residual_tokens:
            return self.blocks_needed(num_tokens) <= self.num_full_blocks
        residual = min(self.blocks_needed(num_tokens), self.residual_tokens // self.block_size)
        # +1: a prefill chunk may complete a block that is converted only at the next step
        return (self.quantized_boundary(num_tokens) <= self.num_quantized_blocks
                and residual + 1 <= self.num_full_blocks)

    @property
    def max_seq_tokens(self) -> int:
        """The longest sequence `fits` accepts."""
        low, high = 0, (len(self.blocks) + 1) * self.block_size
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self.fits(mid) else (low, mid - 1)
        return low

    def take_ops(self) -> KVOps:
        ops, self.pending = self.pending, KVOps()
        return ops

    # ---- prefix cache -------------------------------------------------------------------------

    def find_cached_prefix(self, seq: Sequence) -> list[int]:
        """Block ids in the pool holding the longest cached prefix of seq's tokens (>= 1 token left to compute)."""
        hits = []
        for hit in self._lookup_prefix(seq):
            if isinstance(hit, _ColdHit):
                break
            hits.append(hit)
        return hits

    def _lookup_prefix(self, seq: Sequence) -> list[int | _ColdHit]:
        """The longest cached prefix, block by block from the pool or (listed only) from the cold tier."""
        if not self.enable_prefix_caching:
            return []
        tokens = seq.all_token_ids()
        # at most n-1 tokens may come from the cache: the last one must run to give logits
        max_blocks = (len(tokens) - 1) // self.block_size
        hits: list[int | _ColdHit] = []
        parent: int | None = None
        for i in range(max_blocks):
            chunk = tuple(tokens[i * self.block_size : (i + 1) * self.block_size])
            parent = block_hash(parent, chunk, seq.cache_salt)
            block_id = self.cached.get(parent)
            if block_id is not None and self.blocks[block_id].token_ids == chunk:
                hits.append(block_id)
            elif self.cold is not None and self.cold.contains(parent, chunk):
                hits.append(_ColdHit(parent, chunk))
            else:
                break
        return self._usable_prefix(hits)

    def _usable_prefix(self, hits: list[int | _ColdHit]) -> list[int | _ColdHit]:
        """The longest part of `hits` whose residual (the blocks its first new query sees in full
        precision) is in full precision: a quantized block there would change what that query sees."""
        count = len(hits)
        while count:
            residual = hits[self.quantized_boundary(count * self.block_size) : count]
            if all(self._full_precision_hit(hit) for hit in residual):
                break
            count -= 1
        return hits[:count]

    def _full_precision_hit(self, hit: int | _ColdHit) -> bool:
        if isinstance(hit, _ColdHit):
            return not self.num_quantized_blocks   # cold blocks of a quantized cache come back quantized
        return not self.blocks[hit].quantized

    def allocate_prompt(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Give a (re)admitted sequence its cached prefix plus blocks for its first chunk.

        `num_new_tokens` is counted after the cached prefix. Returns False (changing nothing) if the
        pool cannot hold it; on success seq.num_computed_tokens = cached tokens. A cold block whose
        data fails its check is dropped from the cold tier and the prefix is looked up again."""
        assert not seq.block_table
        while True:
            hits = self._lookup_prefix(seq)
            num_cached = len(hits) * self.block_size
            num_new = min(num_new_tokens, seq.num_tokens - num_cached)
            restore_into_quantized = self.num_quantized_blocks > 0
            kinds = [self.blocks[h].quantized if isinstance(h, int) else restore_into_quantized for h in hits]
            growth = self._growth(kinds.__getitem__, len(kinds), 0, num_cached, num_new)
            cold_hits = sum(isinstance(h, _ColdHit) for h in hits)
            need = {False: growth.new_full, True: growth.new_quantized + len(growth.convert)}
            need[restore_into_quantized] += cold_hits
            for hit in hits:  # hits that sit in a free list are taken out of it, not allocated
                if isinstance(hit, int) and self.blocks[hit].ref_count == 0:
                    need[self.blocks[hit].quantized] += 1
            if any(need[kind] > len(self._free[kind]) for kind in (False, True)):
                return False
            payloads = self._load_cold(hits)
            if payloads is not None:
                break
        self._attach_prefix(seq, hits, payloads, restore_into_quantized)
        seq.num_computed_tokens = num_cached
        self._apply_growth(seq, growth)
        if self.enable_prefix_caching:
            self.prefix_cache_queries += seq.num_tokens
            self.prefix_cache_hits += num_cached
        return True

    def _load_cold(self, hits: list[int | _ColdHit]) -> dict[int, torch.Tensor] | None:
        """Payloads of the cold hits by position; None if one failed its check (it is gone from the index)."""
        payloads: dict[int, torch.Tensor] = {}
        for position, hit in enumerate(hits):
            if isinstance(hit, _ColdHit):
                assert self.cold is not None
                payload = self.cold.load(hit.hash, hit.token_ids)
                if payload is None:
                    self.cold_restore_failures += 1
                    return None
                payloads[position] = payload
        return payloads

    def _attach_prefix(
        self, seq: Sequence, hits: list[int | _ColdHit], payloads: dict[int, torch.Tensor], into_quantized: bool,
    ) -> None:
        for hit in hits:  # pool hits first, so taking blocks for the restores cannot evict one of them
            if isinstance(hit, int):
                block = self.blocks[hit]
                if block.ref_count == 0:
                    del self._free[block.quantized][hit]
                block.ref_count += 1
        for position, hit in enumerate(hits):
            if isinstance(hit, int):
                block_id = hit
            else:
                block_id = self._take_free_block(into_quantized)
                block = self.blocks[block_id]
                block.hash, block.token_ids = hit.hash, hit.token_ids
                self.cached[hit.hash] = block_id
                self.pending.restores.append((block_id, payloads[position]))
                self.cold_restored_blocks += 1
            block_hash_value = self.blocks[block_id].hash
            assert block_hash_value is not None
            seq.block_hashes.append(block_hash_value)
            seq.block_table.append(block_id)

    def register_full_blocks(self, seq: Sequence) -> None:
        """Hash and publish the blocks of seq that are full and computed."""
        if not self.enable_prefix_caching:
            return
        num_full = seq.num_computed_tokens // self.block_size
        tokens: list[int] | None = None
        for i in range(len(seq.block_hashes), num_full):
            tokens = tokens or seq.all_token_ids()
            chunk = tuple(tokens[i * self.block_size : (i + 1) * self.block_size])
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            h = block_hash(parent, chunk, seq.cache_salt)
            seq.block_hashes.append(h)
            block = self.blocks[seq.block_table[i]]
            if block.hash is None and h not in self.cached:
                block.hash, block.token_ids = h, chunk
                self.cached[h] = block.block_id

    # ---- growth and release --------------------------------------------------------------------

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow seq's block table to hold num_new_tokens more tokens, quantizing the blocks this step's
        queries see quantized. False (no change) if out of blocks."""
        table = seq.block_table
        growth = self._growth(lambda i: self.blocks[table[i]].quantized, len(table), seq.quantized_prefix_blocks,
                              seq.num_computed_tokens, num_new_tokens)
        # converted blocks held by seq alone go back to the free list before new ones are taken
        released = sum(1 for i in growth.convert if self.blocks[table[i]].ref_count == 1)
        if growth.new_full > len(self._free[False]) + released:
            return False
        if growth.new_quantized + len(growth.convert) > len(self._free[True]):
            return False
        self._apply_growth(seq, growth)
        return True

    def _growth(
        self, is_quantized: Callable[[int], bool], table_len: int, scan_from: int, computed: int, num_new: int,
    ) -> _Growth:
        """What a table of table_len blocks holding `computed` tokens needs for num_new more.

        The step's first query sees blocks below quantized_boundary(computed) quantized: convert the
        ones still in full precision (all full). New blocks below quantized_boundary(end) are written
        whole by this step: quantize them on the way in. A block the step completes but did not start
        stays in full precision until the next step converts it."""
        end = computed + num_new
        convertible = min(self.quantized_boundary(computed), table_len)
        convert = [i for i in range(scan_from, convertible) if not is_quantized(i)]
        boundary = self.quantized_boundary(end)
        new_quantized = max(0, boundary - table_len)
        new_full = max(0, self.blocks_needed(end) - max(table_len, boundary))
        return _Growth(convert, max(scan_from, convertible), new_quantized, new_full)

    def _apply_growth(self, seq: Sequence, growth: _Growth) -> None:
        for index in growth.convert:
            self._convert(seq, index)
        seq.quantized_prefix_blocks = growth.settled
        for _ in range(growth.new_quantized):
            seq.block_table.append(self._take_free_block(quantized=True))
        for _ in range(growth.new_full):
            seq.block_table.append(self._take_free_block(quantized=False))

    def _convert(self, seq: Sequence, index: int) -> None:
        """Replace seq's full-precision block at `index` by a quantized copy (an existing one if cached)."""
        old_id = seq.block_table[index]
        chain_hash = seq.block_hashes[index] if index < len(seq.block_hashes) else None
        chunk: tuple[int, ...] = ()
        target: int | None = None
        if chain_hash is not None:
            chunk = tuple(seq.token_slice(index * self.block_size, (index + 1) * self.block_size))
            cached_id = self.cached.get(chain_hash)
            if cached_id is not None and self.blocks[cached_id].quantized and self.blocks[cached_id].token_ids == chunk:
                target = cached_id
                if self.blocks[target].ref_count == 0:
                    del self._free[True][target]
                self.blocks[target].ref_count += 1
        if target is None:
            target = self._take_free_block(quantized=True)
            self.pending.conversions.append((old_id, target))
            self.num_conversions += 1
            if chain_hash is not None:
                block = self.blocks[target]
                block.hash, block.token_ids = chain_hash, chunk
                self.cached[chain_hash] = target
        seq.block_table[index] = target
        old = self.blocks[old_id]
        self._release(old_id, stale=old.hash is None or self.cached.get(old.hash) != old_id)

    def free(self, seq: Sequence) -> None:
        """Release seq's blocks (tail first, so a prefix's later blocks are evicted before its head)."""
        for block_id in reversed(seq.block_table):
            self._release(block_id)
        seq.block_table.clear()
        seq.block_hashes.clear()
        seq.num_computed_tokens = 0
        seq.quantized_prefix_blocks = 0

    def _release(self, block_id: int, stale: bool = False) -> None:
        """Drop one reference; a block nobody holds joins its free list (first in line if `stale`)."""
        block = self.blocks[block_id]
        block.ref_count -= 1
        assert block.ref_count >= 0, f"block {block_id} freed twice"
        if block.ref_count:
            return
        free = self._free[block.quantized]
        free[block_id] = None
        if stale:   # a converted block: its data lives on quantized, so reuse it before any cached block
            free.move_to_end(block_id, last=False)

    def _take_free_block(self, quantized: bool = False) -> int:
        block_id, _ = self._free[quantized].popitem(last=False)
        block = self.blocks[block_id]
        assert block.ref_count == 0
        if block.hash is not None:  # evict: its old contents are about to be overwritten
            if self.cached.get(block.hash) == block_id:
                del self.cached[block.hash]
                if self.cold is not None and not self.cold.contains(block.hash, block.token_ids):
                    self.pending.saves.append((block_id, block.hash, block.token_ids))
            block.hash, block.token_ids = None, ()
        block.ref_count = 1
        return block_id
