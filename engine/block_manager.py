"""Paged KV-cache bookkeeping: fixed-size blocks, ref counts, prefix caching with LRU eviction.

A full block is identified by a chained hash over (previous block's hash, its token ids); the first
block also mixes in the request's `cache_salt`, so two tenants with different salts never share a
block. Freed blocks keep their hash and stay findable until they are reallocated (oldest free first).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from engine.sequence import Sequence


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()      # kept to verify a hash hit token for token


def block_hash(parent: int | None, token_ids: tuple[int, ...], salt: str | None) -> int:
    # the salt only enters the first block; the chain carries it into every later block
    return hash((parent, token_ids, salt) if parent is None else (parent, token_ids))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        # ref_count == 0 blocks, least recently freed first: allocation evicts from the front
        self.free_blocks: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}   # block hash -> block id
        # counters in tokens, as vLLM reports them
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    def usage(self) -> float:
        return 1.0 - len(self.free_blocks) / len(self.blocks)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # ---- prefix cache -------------------------------------------------------------------------

    def find_cached_prefix(self, seq: Sequence) -> list[int]:
        """Block ids holding the longest cached prefix of seq's tokens, leaving >= 1 token to compute."""
        if not self.enable_prefix_caching:
            return []
        tokens = seq.all_token_ids()
        # at most n-1 tokens may come from the cache: the last one must run to give logits
        max_blocks = (len(tokens) - 1) // self.block_size
        hits: list[int] = []
        parent: int | None = None
        for i in range(max_blocks):
            chunk = tuple(tokens[i * self.block_size : (i + 1) * self.block_size])
            parent = block_hash(parent, chunk, seq.cache_salt)
            block_id = self.cached.get(parent)
            if block_id is None or self.blocks[block_id].token_ids != chunk:
                break
            hits.append(block_id)
        return hits

    def allocate_prompt(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Give a (re)admitted sequence its cached prefix plus blocks for its first chunk.

        `num_new_tokens` is counted after the cached prefix. Returns False (changing nothing) if the
        pool cannot hold it; on success seq.num_computed_tokens = cached tokens."""
        assert not seq.block_table
        hits = self.find_cached_prefix(seq)
        num_cached = len(hits) * self.block_size
        num_new_tokens = min(num_new_tokens, seq.num_tokens - num_cached)
        need = self.blocks_needed(num_cached + num_new_tokens) - len(hits)
        reclaimed = sum(1 for b in hits if self.blocks[b].ref_count == 0)  # hits that sit in the free list
        if need > len(self.free_blocks) - reclaimed:
            return False
        for block_id in hits:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_blocks[block_id]
            block.ref_count += 1
            assert block.hash is not None
            seq.block_hashes.append(block.hash)
            seq.block_table.append(block_id)
        for _ in range(need):
            seq.block_table.append(self._take_free_block())
        seq.num_computed_tokens = num_cached
        if self.enable_prefix_caching:
            self.prefix_cache_queries += seq.num_tokens
            self.prefix_cache_hits += num_cached
        return True

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

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= len(self.free_blocks)

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow seq's block table to hold num_new_tokens more tokens. False (no change) if out of blocks."""
        need = self.blocks_needed(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        if need > len(self.free_blocks):
            return False
        for _ in range(need):
            seq.block_table.append(self._take_free_block())
        return True

    def free(self, seq: Sequence) -> None:
        """Release seq's blocks (tail first, so a prefix's later blocks are evicted before its head)."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            assert block.ref_count >= 0, f"block {block_id} freed twice"
            if block.ref_count == 0:
                self.free_blocks[block_id] = None
        seq.block_table.clear()
        seq.block_hashes.clear()
        seq.num_computed_tokens = 0

    def _take_free_block(self) -> int:
        block_id, _ = self.free_blocks.popitem(last=False)
        block = self.blocks[block_id]
        assert block.ref_count == 0
        if block.hash is not None:  # evict: its old contents are about to be overwritten
            if self.cached.get(block.hash) == block_id:
                del self.cached[block.hash]
            block.hash, block.token_ids = None, ()
        block.ref_count = 1
        return block_id
