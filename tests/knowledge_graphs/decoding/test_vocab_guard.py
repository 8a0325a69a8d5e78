"""The per-node walk records give the same blocked tokens as the carrier-tracking walk they replace.

`vocab_guard.SurfaceGuard.blocked` evaluates allowed-independent records (`guard_records`) for
states with no obligation pending and falls back to `_walk` otherwise; `_walk` applies the
`advance_checked` rules directly and is the reference here. Names are chosen for the hard cases:
names that are prefixes of longer ones within a word and across a space, suffixes of longer names,
and several matches open at once.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_graphs.decoding.guard_records import evaluate, ranges_to_ids
from knowledge_graphs.decoding.surface_guard import AllowedNodes, GuardState, NameTrie, advance_checked, fold
from knowledge_graphs.decoding.vocab_guard import SurfaceGuard

NAMES = {
    "nicotine": ["n1"], "nicotine dependence": ["n2"], "heart failure": ["h1"], "heart failure nyha class iii": ["h2"],
    "diabetes": ["d1"], "type 2 diabetes": ["d2"], "dia": ["d3"], "diazepam": ["d4"], "dipivefrin": ["d5"],
    "estra": ["e1"], "estradiol": ["e2"], "acid": ["a1"], "valproic acid": ["a2"], "metabolic acidosis": ["a3"],
    "type": ["t1"], "ace": ["c1"], "ace inhibitor": ["c2"],
}
ENTITY_IDS = sorted({i for ids in NAMES.values() for i in ids})


def _vocabulary() -> list[str]:
    pieces: set[str] = {" ", ",", ", ", ".", "-", " and", " the", "2", " 2"}
    for name in NAMES:
        text = name + " "
        for start in range(len(text)):
            for end in range(start + 1, min(len(text), start + 7) + 1):
                piece = text[start:end]
                pieces |= {piece, " " + piece, piece.capitalize()}
    return sorted(pieces)


VOCAB = _vocabulary()
TRIE = NameTrie(NAMES)
# texts that leave several matches open: whole names, their prefixes and their words, with separators
FRAGMENTS = sorted({" ", ", ", "-", " the "} | {name[:k] for name in NAMES for k in range(1, len(name) + 1)}
                   | {word for name in NAMES for word in name.split()})


@pytest.fixture(scope="module", params=[0, 2], ids=["lazy-records", "precomputed-records"])
def guard(request: pytest.FixtureRequest) -> SurfaceGuard:
    return SurfaceGuard(TRIE, VOCAB, precompute_depth=request.param)


def _walked(guard: SurfaceGuard, state: GuardState, allowed: AllowedNodes) -> tuple[set[int], set[int]]:
    perm = guard._perm[state.boundary]
    out = []
    for ranges in guard._walk(state, allowed):
        pairs = np.array(ranges, dtype=np.int64).reshape(-1, 2)
        out.append(set(ranges_to_ids((pairs[:, 0], pairs[:, 1]), perm).tolist()))
    return out[0], out[1]


def _state(tokens: list[str], allowed: AllowedNodes) -> GuardState | None:
    state = GuardState()
    for token in tokens:
        state, violated = advance_checked(TRIE, state, fold(token), allowed)
        if violated:
            return None
    return state


@settings(max_examples=300, deadline=None)
@given(allowed_mask=st.lists(st.booleans(), min_size=len(ENTITY_IDS), max_size=len(ENTITY_IDS)),
       fragments=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6))
def test_records_block_what_the_walk_blocks(guard: SurfaceGuard, allowed_mask: list[bool], fragments: list[str]) -> None:
    allowed = AllowedNodes(TRIE, [i for i, keep in zip(ENTITY_IDS, allowed_mask, strict=True) if keep])
    state = _state(fragments, allowed)
    if state is None or not state.nodes:
        return
    walked_guard, walked_dead = _walked(guard, state, allowed)
    guard_ids, dead_ids = guard.blocked(state, allowed)
    assert set(guard_ids.tolist()) == walked_guard
    assert set(dead_ids.tolist()) == walked_dead
    guard_only, no_dead = guard.blocked(state, allowed, dead_words=False)   # what a state outside a mention asks
    assert set(guard_only.tolist()) == walked_guard and not len(no_dead)
    if state.carriers is None:
        found = evaluate([guard.records(n, state.boundary) for n in state.nodes], allowed)
        if found is not None:   # the records path itself, not the fallback, agrees
            perm = guard._perm[state.boundary]
            assert set(ranges_to_ids(found[0], perm).tolist()) == walked_guard
            assert set(ranges_to_ids(found[1], perm).tolist()) == walked_dead


def test_a_forbidden_name_that_an_allowed_one_may_cover_falls_back_to_the_walk(guard: SurfaceGuard) -> None:
    allowed = AllowedNodes(TRIE, ["n2"])                       # "nicotine dependence" only
    state = _state(["nicotine"], allowed)
    assert state is not None and state.carriers is None
    records = [guard.records(n, state.boundary) for n in state.nodes]
    assert evaluate(records, allowed) is None           # " " would open an obligation
    guard_ids, _ = guard.blocked(state, allowed)
    blocked = set(guard_ids.tolist())
    assert VOCAB.index(" dep") not in blocked                 # on the way to the allowed name
    assert VOCAB.index(" ") not in blocked                    # the space itself opens the obligation
    assert VOCAB.index(", ") not in blocked                   # punctuation is a boundary too
    assert VOCAB.index(" and") in blocked                     # closes "nicotine" and leaves it
    assert VOCAB.index(" the") in blocked


def test_several_open_matches_are_judged_together(guard: SurfaceGuard) -> None:
    # "type 2 diabetes" allowed, "diabetes" forbidden: closing "diabetes" here is covered
    allowed = AllowedNodes(TRIE, ["d2"])
    state = _state(["type", " 2", " diabet"], allowed)
    assert state is not None and len(state.nodes) == 2
    guard_ids, _ = guard.blocked(state, allowed)
    assert VOCAB.index("es ") not in set(guard_ids.tolist())
    # the same word after a text that opened no longer match: "diabetes" alone is blocked
    alone = _state([" diabet"], allowed)
    assert alone is not None and len(alone.nodes) == 1
    guard_ids, _ = guard.blocked(alone, allowed)
    assert VOCAB.index("es ") in set(guard_ids.tolist())


@pytest.mark.parametrize("boundary", [False, True])
def test_static_closings_scan_only_tokens_with_an_inner_boundary(guard: SurfaceGuard, boundary: bool) -> None:
    """Closings inside a token, found by scanning the tokens with a boundary after a word character, are
    those a scan of every token finds (a leading space only ends the text before the token)."""
    from knowledge_graphs.decoding.surface_guard import advance

    singles, multis = [], []
    for token_id, text in enumerate(fold(t) for t in VOCAB):
        for group in advance(TRIE, GuardState(frozenset(), boundary), text)[1]:
            (singles.append((token_id, group[0])) if len(group) == 1 else multis.append((token_id, group)))
    assert singles
    assert list(zip(guard._single_tok[boundary].tolist(), guard._single_node[boundary].tolist(), strict=True)) == singles
    assert guard._multi[boundary] == multis
