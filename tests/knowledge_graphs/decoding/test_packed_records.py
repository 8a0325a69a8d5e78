"""The guard's kept walk records, packed into a few flat arrays (`guard_records.PackedRecords`): every record reads
back exactly as `walk_records` built it, before and after a pickle round trip (what the index cache does), and
the packed form pickles as a handful of arrays however many records it holds (what makes a warm start fast)."""

from __future__ import annotations

import pickle
from dataclasses import fields

import numpy as np
import pytest

from knowledge_graphs.decoding.guard_records import PackedRecords, Records, walk_records
from knowledge_graphs.decoding.surface_guard import (
    SPACE,
    AllowedNodes,
    GuardState,
    NameTrie,
    advance_checked,
    fold,
)
from knowledge_graphs.decoding.vocab_guard import SurfaceGuard

# Names with shared prefixes, names inside names, and names across a space: records of every run.
NAMES = {
    "warfarin": ["w1"], "warfarin sodium": ["w2"], "war": ["w3"], "amoxicillin": ["a1"], "amox": ["a2"],
    "acute kidney injury": ["k1"], "acute": ["k2"], "kidney stone": ["k3"], "lisinopril": ["l1"],
    "lithium": ["l2"], "lithium carbonate": ["l3"],
}
ENTITY_IDS = sorted({i for ids in NAMES.values() for i in ids})


def _vocabulary() -> list[str]:
    pieces: set[str] = {" ", ",", ".", "-", " and", " or", " the"}
    for name in NAMES:
        text = name + " "
        for start in range(len(text)):
            for end in range(start + 1, min(len(text), start + 6) + 1):
                piece = text[start:end]
                pieces |= {piece, " " + piece, piece.upper()}
    return sorted(pieces)


VOCAB = _vocabulary()
TRIE = NameTrie(NAMES)


def _assert_same(found: Records, expected: Records) -> None:
    for field in fields(Records):
        got, want = getattr(found, field.name), getattr(expected, field.name)
        if isinstance(want, np.ndarray):
            assert got.dtype == want.dtype, field.name
            assert np.array_equal(got, want), field.name
        else:
            assert got == want, field.name


def _shallow_nodes(depth: int) -> list[tuple[int, bool]]:
    keys, frontier = [], [0]
    for _ in range(depth):
        frontier = [c for n in frontier for c in TRIE.children(n)]
        keys += [(node, TRIE.char(node) == SPACE) for node in frontier]
    return keys


@pytest.fixture(scope="module")
def guard() -> SurfaceGuard:
    return SurfaceGuard(TRIE, VOCAB, precompute_depth=6)


def test_every_kept_record_reads_back_as_the_walk_built_it(guard: SurfaceGuard) -> None:
    keys = _shallow_nodes(6)
    assert len(keys) > 20 and sorted(guard._records.keys()) == sorted(keys)
    for copy in (guard, pickle.loads(pickle.dumps(guard, protocol=pickle.HIGHEST_PROTOCOL))):
        for node, boundary in keys:
            _assert_same(copy.records(node, boundary), walk_records(TRIE, guard._sorted[boundary], node))


def test_an_unknown_key_is_none_and_an_empty_pack_round_trips() -> None:
    empty = pickle.loads(pickle.dumps(PackedRecords({})))
    assert len(empty) == 0 and empty.get((0, False)) is None and (0, False) not in empty
    record = walk_records(TRIE, SurfaceGuard(TRIE, VOCAB, precompute_depth=0)._sorted[False], 0)
    packed = pickle.loads(pickle.dumps(PackedRecords({(0, False): record})))
    assert packed.get((0, True)) is None
    _assert_same(packed.get((0, False)), record)


def test_a_read_back_guard_blocks_what_the_original_blocks(guard: SurfaceGuard) -> None:
    copy = pickle.loads(pickle.dumps(guard, protocol=pickle.HIGHEST_PROTOCOL))
    fragments = ["war", "warf", "warfarin", " sod", "amo", "acute", " kid", "ney", "lith", "ium", " carb", ", "]
    for allowed_ids in ([], ["w1"], ["k1", "l3"], ENTITY_IDS):
        allowed = AllowedNodes(TRIE, allowed_ids)
        state = GuardState()
        for fragment in fragments:
            if state.nodes:
                original, read_back = guard.blocked(state, allowed), copy.blocked(state, allowed)
                assert [sorted(ids.tolist()) for ids in original] == [sorted(ids.tolist()) for ids in read_back]
            state, violated = advance_checked(TRIE, state, fold(fragment), allowed)
            if violated:
                state = GuardState()


def test_the_packed_records_pickle_as_a_few_arrays_whatever_their_number(guard: SurfaceGuard) -> None:
    buffers: list[pickle.PickleBuffer] = []
    pickle.dumps(guard._records, protocol=5, buffer_callback=buffers.append)   # one buffer per numpy array
    assert len(guard._records) > 20
    assert len(buffers) <= len(fields(Records)) + 4


@pytest.mark.parametrize("allowed_ids", [[], ["w1"], ["w2", "k1"], ["l3", "a2", "k3"], ENTITY_IDS])
def test_vectorised_membership_answers_as_the_sets_do(allowed_ids: list[str]) -> None:
    """`is_allowed` / `is_live` (sorted arrays, no array over the whole trie) agree with the sets node by node,
    the sentinel included (it is never allowed nor live)."""
    allowed = AllowedNodes(TRIE, allowed_ids)
    every_node = np.arange(TRIE.sentinel + 1, dtype=np.int64)
    query = np.concatenate([every_node, every_node[::-1], every_node[:0]])   # repeats and reverse order
    assert allowed.is_allowed(query).tolist() == [int(n) in allowed.nodes for n in query]
    assert allowed.is_live(query).tolist() == [int(n) in allowed.live for n in query]
    assert not allowed.is_live(np.array([TRIE.sentinel]))[0] and allowed.is_allowed(np.zeros(0, dtype=np.int64)).size == 0
    for node, terminals in allowed.below.items():   # each allowed name at or below its nodes, once
        assert len(terminals) == len(set(terminals)) and all(t in allowed.nodes for t in terminals)
        assert all(node == t or _is_ancestor(node, t) for t in terminals)


def _is_ancestor(node: int, descendant: int) -> bool:
    while descendant > 0:
        descendant = TRIE.parent[descendant]
        if descendant == node:
            return True
    return False
