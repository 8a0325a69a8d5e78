"""The guard's vocabulary walk, split into what depends on the allowed set and what does not.

`SurfaceGuard._walk` applies the `advance_checked` rules to every token at once for one (state,
allowed set): a Python walk over trie nodes and token prefixes together, 1-4 ms from a shallow node
such as "di" with thousands of (node, prefix) pairs. With no obligation pending, two facts make
most of that work shareable:
- the walk from a set of open matches is the union of the walks from each match: a token's text
  moves every match along independently, and the matches at one token prefix are the union of
  each match's (at most one) node there;
- its decisions read the allowed set only through per-node facts: is the node an allowed name,
  does an allowed name lie at or below it, and does its space-continuation lead to one.
So the walk is done once per (trie node, boundary) per domain, allowed set aside, and kept as
`Records`: one per token prefix p that some token has and the node's trie continues (node . p):
- exact records: the tokens whose text is exactly p, the node p leads to, and whether p holds a
  word boundary (the dead-word steering only lengthens words);
- close records: the tokens that start with p + " " (a match closes at that boundary), the node
  before the boundary and its space child.
Evaluating a state for one allowed set (`evaluate`) is then a few numpy operations: per record,
the depth of the deepest dead, live, forbidden and allowed name in its group (a group spans the
state's matches at one prefix: max over the per-match records of that prefix), and the rules of
`advance_checked` on those depths. Depths tell the matches of a group apart: they began at
different word boundaries, so no two have the same depth.
A closing that would open an obligation (a forbidden name that a longer allowed one may still
cover) needs the carrier-tracking walk: `evaluate` returns None and the caller falls back to it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from knowledge_graphs.decoding.memo import arrays_bytes
from knowledge_graphs.decoding.surface_guard import MIN_DEAD_WORD_CHARS, SPACE, AllowedNodes, NameTrie

_MAX_CHAR = "\U0010ffff"
Ranges = tuple[np.ndarray, np.ndarray]   # (lo, hi) int64 over sorted token positions
_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Records:
    """Allowed-independent outcome of the walk from one trie node (see the module docstring)."""

    # Exact records come in three runs: [0, exact_names) a name ends at the node;
    # [exact_names, exact_words) no name ends there, no boundary in the prefix, and the node is
    # MIN_DEAD_WORD_CHARS deep or more (dead-word candidates); then the rest. Close records: the
    # first close_names have a name ending at the node. One open match needs only these runs.
    exact_lo: np.ndarray      # int64 [e] tokens [lo, hi) in sorted order equal to the prefix
    exact_hi: np.ndarray
    exact_key: np.ndarray     # int64 [e] the prefix's identity: (length, lo, hi)
    exact_node: np.ndarray    # int64 [e] trie node after the prefix
    exact_depth: np.ndarray   # int64 [e] its depth
    exact_name: np.ndarray    # bool [e] a name ends there
    exact_spaced: np.ndarray  # bool [e] the prefix holds a word boundary
    exact_names: int
    exact_words: int
    close_lo: np.ndarray      # int64 [c] tokens [lo, hi) that start with the prefix + " "
    close_hi: np.ndarray
    close_key: np.ndarray
    close_node: np.ndarray    # int64 [c] trie node before the boundary
    close_depth: np.ndarray   # int64 [c] its depth
    close_name: np.ndarray    # bool [c] a name ends there
    close_space: np.ndarray   # int64 [c] its space child, or the sentinel node (never live)
    close_names: int


_ARRAY_FIELDS = tuple(f.name for f in fields(Records) if f.name not in ("exact_names", "exact_words", "close_names"))
_EXACT_FIELDS = tuple(name for name in _ARRAY_FIELDS if name.startswith("exact_"))
_CLOSE_FIELDS = tuple(name for name in _ARRAY_FIELDS if name.startswith("close_"))
_BOOL_FIELDS = ("exact_name", "exact_spaced", "close_name")


RECORDS_OBJECT_BYTES = 200   # the Records object itself (slots) besides its arrays


def records_bytes(records: Records) -> int:
    """About what one `Records` holds: its arrays' objects and data. `walk_records` cuts its columns out of two
    arrays that only the record keeps alive, so the data of the arrays they view counts too."""
    arrays = [getattr(records, name) for name in _ARRAY_FIELDS]
    viewed = {id(a.base): a.base.nbytes for a in arrays if isinstance(a.base, np.ndarray)}
    return RECORDS_OBJECT_BYTES + arrays_bytes(*arrays) + sum(viewed.values())


class PackedRecords:
    """The records a guard keeps, (trie node, boundary) -> `Records`, held as one array per `Records` field
    concatenated over all records, plus where each record's rows start.

    Why: the medical index keeps ~23k records of 14 small arrays each, and unpickling ~320k arrays was half a
    second of the engine core's start (numpy's per-array cost); packed, the whole thing is ~20 arrays. A record
    is cut out as views on first use and kept (the same arrays as before, so `evaluate` reads it as it did)."""

    def __init__(self, records: Mapping[tuple[int, bool], Records]) -> None:
        keys = list(records)
        self._nodes = np.array([node for node, _ in keys], dtype=np.int64)
        self._boundaries = np.array([boundary for _, boundary in keys], dtype=bool)
        found = [records[key] for key in keys]
        # rows of record i: [offsets[i], offsets[i + 1]) in every column of its kind
        self._exact_offsets = np.cumsum([0] + [len(r.exact_lo) for r in found], dtype=np.int64)
        self._close_offsets = np.cumsum([0] + [len(r.close_lo) for r in found], dtype=np.int64)
        self._counts = np.array([(r.exact_names, r.exact_words, r.close_names) for r in found],
                                dtype=np.int64).reshape(-1, 3)
        self._columns = {name: np.concatenate([getattr(r, name) for r in found]) if found
                         else np.zeros(0, dtype=bool if name in _BOOL_FIELDS else np.int64) for name in _ARRAY_FIELDS}
        self._index_keys()

    def _index_keys(self) -> None:
        self._position = dict(zip(zip(self._nodes.tolist(), self._boundaries.tolist(), strict=True),
                                  range(len(self._nodes)), strict=True))
        self._cut: dict[tuple[int, bool], Records] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, key: object) -> bool:
        return key in self._position

    def keys(self) -> list[tuple[int, bool]]:
        return list(self._position)

    def get(self, key: tuple[int, bool]) -> Records | None:
        found = self._cut.get(key)
        if found is not None:
            return found
        i = self._position.get(key)
        if i is None:
            return None
        e0, e1 = self._exact_offsets[i], self._exact_offsets[i + 1]
        c0, c1 = self._close_offsets[i], self._close_offsets[i + 1]
        exact_names, exact_words, close_names = self._counts[i].tolist()
        columns = self._columns
        found = Records(**{name: columns[name][e0:e1] for name in _EXACT_FIELDS},
                        **{name: columns[name][c0:c1] for name in _CLOSE_FIELDS},
                        exact_names=exact_names, exact_words=exact_words, close_names=close_names)
        self._cut[key] = found   # two threads may cut the same record: equal either way
        return found

    def __getstate__(self) -> dict[str, Any]:
        return {name: value for name, value in vars(self).items() if name not in ("_position", "_cut")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._index_keys()


def prefix_range(strings: list[str], prefix: str, lo: int, hi: int) -> tuple[int, int]:
    """Positions [a, b) within [lo, hi) of the sorted `strings` that start with `prefix`."""
    a = bisect.bisect_left(strings, prefix, lo, hi)
    return a, bisect.bisect_left(strings, prefix + _MAX_CHAR, a, hi)


def _key(length: int, lo: int, hi: int, vocab: int) -> int:
    # two prefixes can share a token range (every token starting "acute " may start "acute bac "),
    # never a (length, range)
    return (length * (vocab + 1) + lo) * (vocab + 1) + hi


def walk_records(trie: NameTrie, strings: list[str], start: int) -> Records:
    """Depth-first over (trie node, token prefix) pairs from `start`, as `SurfaceGuard._walk` does
    with no obligation pending, recording instead of deciding. `strings`: the tokens' folded texts
    (as they read after the state's boundary flag), sorted."""
    vocab = len(strings)
    sentinel = trie.sentinel
    depth = trie.depth
    entities = trie.entities
    # rows (key, lo, hi, node, depth, name, spaced-or-space child), in the runs `Records` keeps
    names: list[tuple[int, ...]] = []
    words: list[tuple[int, ...]] = []
    other: list[tuple[int, ...]] = []
    closing_names: list[tuple[int, ...]] = []
    closing_other: list[tuple[int, ...]] = []
    stack: list[tuple[int, str, int, int, bool]] = [(start, "", 0, vocab, False)]
    while stack:
        node, prefix, lo, hi, spaced = stack.pop()
        extended = prefix + SPACE
        a, b = prefix_range(strings, extended, lo, hi)
        if a < b:
            space = trie.child(node, SPACE)
            named = node in entities
            if named or space >= 0:
                row = (_key(len(extended), a, b, vocab), a, b, node, depth[node], named, space if space >= 0 else sentinel)
                (closing_names if named else closing_other).append(row)
            if space >= 0:
                stack.append((space, extended, a, b, True))
        for ch, child in zip(trie.child_chars(node), trie.children(node), strict=True):
            if ch == SPACE:
                continue
            extended = prefix + ch
            a, b = prefix_range(strings, extended, lo, hi)
            if a == b:
                continue
            exact_end = bisect.bisect_right(strings, extended, a, b)
            if exact_end > a:
                named = child in entities
                row = (_key(len(extended), a, exact_end, vocab), a, exact_end, child, depth[child], named, spaced)
                if named:
                    names.append(row)
                elif not spaced and depth[child] >= MIN_DEAD_WORD_CHARS:
                    words.append(row)
                else:
                    other.append(row)
            stack.append((child, extended, a, b, spaced))
    ex = np.array(names + words + other, dtype=np.int64).reshape(-1, 7)
    cl = np.array(closing_names + closing_other, dtype=np.int64).reshape(-1, 7)
    return Records(ex[:, 1], ex[:, 2], ex[:, 0], ex[:, 3], ex[:, 4], ex[:, 5].astype(bool), ex[:, 6].astype(bool),
                   len(names), len(names) + len(words),
                   cl[:, 1], cl[:, 2], cl[:, 0], cl[:, 3], cl[:, 4], cl[:, 5].astype(bool), cl[:, 6], len(closing_names))


def _group_max(keys: np.ndarray, columns: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Rows with the same key merged: (first row of each group, per-column max)."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    return order[starts], [np.maximum.reduceat(c[order], starts) for c in columns]


def evaluate(parts: list[Records], allowed: AllowedNodes) -> tuple[Ranges, Ranges] | None:
    """(guard-blocked ranges, dead-word ranges) for the state whose open matches have these
    records, under one allowed set; None when a closing would open an obligation."""
    if len(parts) == 1:
        return _evaluate_one(parts[0], allowed)
    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts])

    # closings: the deepest forbidden name closing here (F), allowed one (A), and match whose
    # space-continuation is on the way to an allowed name (S)
    close_lo, close_hi = cat("close_lo"), cat("close_hi")
    bad = np.zeros(0, dtype=bool)
    if len(close_lo):
        node, d = cat("close_node"), cat("close_depth")
        allowed_here = allowed.is_allowed(node)
        forbidden = np.where(cat("close_name") & ~allowed_here, d, -1)
        allowed_depth = np.where(allowed_here, d, -1)
        carrier = np.where(allowed.is_live(cat("close_space")), d, -1)
        first, (forbidden, allowed_depth, carrier) = _group_max(cat("close_key"), [forbidden, allowed_depth, carrier])
        close_lo, close_hi = close_lo[first], close_hi[first]
        # a forbidden name closes with no longer allowed name closing over it (`forbidden_closing`)
        bad = (forbidden >= 0) & (allowed_depth < forbidden)
        if (bad & (carrier >= forbidden)).any():
            return None   # ... but a match as long continues toward an allowed name: an obligation
    # exact ends: the deepest dead name (D: complete, nothing allowed at or below), live match (L), any match (M)
    exact_lo, exact_hi = cat("exact_lo"), cat("exact_hi")
    dead_end = word_dead = np.zeros(0, dtype=bool)
    if len(exact_lo):
        d = cat("exact_depth")
        alive = allowed.is_live(cat("exact_node"))
        dead = np.where(cat("exact_name") & ~alive, d, -1)
        live_depth = np.where(alive, d, -1)
        spaced = cat("exact_spaced")
        first, (dead, live_depth, d) = _group_max(cat("exact_key"), [dead, live_depth, d])
        exact_lo, exact_hi, spaced = exact_lo[first], exact_hi[first], spaced[first]
        dead_end = (dead >= 0) & (live_depth < dead)          # `AllowedNodes.dead_end`
        word_dead = ~dead_end & ~spaced & (live_depth < 0) & (d >= MIN_DEAD_WORD_CHARS)
    guard = (np.concatenate([close_lo[bad], exact_lo[dead_end]]), np.concatenate([close_hi[bad], exact_hi[dead_end]]))
    return guard, (exact_lo[word_dead], exact_hi[word_dead])


def _evaluate_one(records: Records, allowed: AllowedNodes) -> tuple[Ranges, Ranges] | None:
    """`evaluate` for one open match: every group holds one node, so the depth comparisons drop
    out and only the records where a name ends, or a dead word may, matter."""
    guard = dead = (_EMPTY, _EMPTY)
    names = records.close_names
    if names:
        bad = ~allowed.is_allowed(records.close_node[:names])       # a forbidden name closes
        if bad.any():
            if allowed.is_live(records.close_space[:names][bad]).any():
                return None   # ... and goes on toward an allowed name: an obligation
            guard = (records.close_lo[:names][bad], records.close_hi[:names][bad])
    names, words = records.exact_names, records.exact_words
    if names:
        dead_end = ~allowed.is_live(records.exact_node[:names])                    # a name nothing allowed continues
        if dead_end.any():
            guard = (np.concatenate([guard[0], records.exact_lo[:names][dead_end]]),
                     np.concatenate([guard[1], records.exact_hi[:names][dead_end]]))
    if words > names:
        word_dead = ~allowed.is_live(records.exact_node[names:words])
        dead = (records.exact_lo[names:words][word_dead], records.exact_hi[names:words][word_dead])
    return guard, dead


def ranges_to_ids(ranges: Ranges, perm: np.ndarray) -> np.ndarray:
    """Token ids in the ranges (over sorted positions; `perm[position]` = token id)."""
    lo, hi = ranges
    if len(lo) <= 1:
        return perm[lo[0]:hi[0]] if len(lo) else _EMPTY
    lengths = hi - lo
    total = int(lengths.sum())
    # position of each covered slot: its range's lo plus its offset within the range
    offsets = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return perm[np.repeat(lo, lengths) + offsets]
