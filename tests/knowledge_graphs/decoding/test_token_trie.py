"""The token trie of an allowed set makes its nodes as decoding reaches them: the same paths, children and
terminal entities as a trie with every encoding inserted, whatever order nodes are reached in and from however
many threads, and a view counts the nodes made after its build toward its size."""

from __future__ import annotations

import random
import sys
import threading

from knowledge_graphs.decoding.constraint import KGConstraintProcessor
from knowledge_graphs.decoding.constraint_masks import TRIE_NODE_BYTES, AllowedView, DecodeState
from knowledge_graphs.decoding.surface_guard import GuardState
from knowledge_graphs.decoding.trie import ROOT, TokenTrie

ENCODINGS = [
    ("e:heart", [5, 9]), ("e:heart-failure", [5, 9, 12]), ("e:heart-failure", [5, 9, 12, 3]),
    ("e:heartburn", [5, 9, 40]), ("e:hepar", [5, 2]), ("e:aspirin", [7]), ("e:aspirin-2", [7]),
    ("e:big", [300_000, 1]), ("e:empty", []), ("e:heart", [5, 9]),   # a repeat, and an empty encoding
]


def _reference(encodings: list[tuple[str, list[int]]]) -> dict[tuple[int, ...], set[str]]:
    """Every path of a trie with each encoding inserted, with the entities ending there."""
    paths: dict[tuple[int, ...], set[str]] = {(): set()}
    for entity_id, ids in encodings:
        for depth in range(1, len(ids) + 1):
            paths.setdefault(tuple(ids[:depth]), set())
        if ids:
            paths[tuple(ids)].add(entity_id)
    return paths


def _walk(trie: TokenTrie, order: int = 1, rng: random.Random | None = None) -> dict[tuple[int, ...], set[str]]:
    """Every path of `trie`, made by reaching its nodes (breadth first, or in a shuffled order)."""
    found: dict[tuple[int, ...], set[str]] = {}
    pending = [((), ROOT)]
    while pending:
        if rng is not None:
            rng.shuffle(pending)
        path, node = pending.pop(0 if order > 0 else -1)
        assert trie.depth[node] == len(path) and (not path or trie.token[node] == path[-1])
        found[path] = set(trie.entities.get(node, ()))
        for token_id, child in trie.children_of(node).items():
            assert trie.parent[child] == node and trie.step(node, token_id) == child
            pending.append(((*path, token_id), child))
    return found


def test_the_paths_and_entities_are_those_of_every_encoding_inserted() -> None:
    for order in (1, -1):
        assert _walk(TokenTrie(ENCODINGS), order) == _reference(ENCODINGS)
    rng = random.Random(7)
    for _ in range(20):   # random encodings with shared prefixes, repeats and tokens past any vocabulary
        encodings = [(f"e{rng.randrange(30)}", [rng.choice([1, 2, 3, 70_000]) for _ in range(rng.randrange(0, 6))])
                     for _ in range(rng.randrange(1, 80))]
        assert _walk(TokenTrie(encodings), rng=rng) == _reference(encodings)


def test_nodes_are_made_only_when_reached() -> None:
    trie = TokenTrie(ENCODINGS)
    assert len(trie) == 1 and trie.encoding_count == 9 and not trie.entities
    heart = trie.step(ROOT, 5)
    assert len(trie) == 1 + 3   # the root's children: 5, 7 and 300000
    assert trie.step(heart, 9) is not None and len(trie) == 4 + 2
    assert trie.step(ROOT, 8) is None and len(trie) == 6   # no such child: nothing made
    assert trie.entities[trie.step(ROOT, 7)] == {"e:aspirin", "e:aspirin-2"}
    assert trie.nearest_entity(heart) == "e:heart"


def test_threads_reaching_the_same_new_nodes_make_each_once() -> None:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # threads switch inside a node's making, as they can in the engine core
    try:
        _race_makers()
    finally:
        sys.setswitchinterval(interval)


def _race_makers() -> None:
    encodings = [(f"e{i}", [i % 7, i % 5, i % 3, i]) for i in range(300)]
    for _ in range(5):
        trie = TokenTrie(encodings)
        barrier = threading.Barrier(6)
        walks: list[dict[tuple[int, ...], set[str]]] = []
        threads = [threading.Thread(target=_reach_all, args=(trie, barrier, seed, walks)) for seed in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        expected = _reference(encodings)
        assert walks == [expected] * 6
        assert len(trie) == len(expected)   # no node made twice


def _reach_all(trie: TokenTrie, barrier: threading.Barrier, seed: int,
               walks: list[dict[tuple[int, ...], set[str]]]) -> None:
    barrier.wait()
    walks.append(_walk(trie, rng=random.Random(seed)))


def test_a_view_counts_the_nodes_decoding_makes_toward_its_size(kg, tokenizer) -> None:
    processor = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                      kgs={"medical": kg})
    domain = processor.domains["medical"]
    view = AllowedView(domain, frozenset(domain.entity_ids))
    domain_before = domain.cached_view_bytes
    state = DecodeState(None, GuardState(boundary=True))
    made_before, view_before = len(view.trie), view.approx_bytes
    for token_id in sorted(view.trie.children_of(ROOT))[:20]:
        after = view.next_state(state, token_id, domain.token_folded[token_id])
        if after.trie_node is not None:
            view.blocked(after)   # the mention's live continuations: its children are made
    made = len(view.trie) - made_before
    assert made > 0
    counted = view.approx_bytes - view_before
    assert counted >= TRIE_NODE_BYTES * made
    assert domain.cached_view_bytes - domain_before in (0, counted)   # counted by the domain when it holds the view
