"""Character-level guard: no token may complete a forbidden surface form at a word boundary.

The exact linker (knowledge_graphs.linking) finds a name wherever its normalised form (casefold,
non-alphanumerics -> one space) stands between word boundaries. The guard follows the generated
text in exactly that normalised character stream, so it does not care how a name was split into
tokens, in which case it was written, or which punctuation surrounds it:

- `NameTrie` is a character trie over the normalised forms of the constrained entities.
- `GuardState` is the set of trie nodes matched by the text's tail (each a match that began at a
  word boundary) plus whether the tail ends at a boundary.
- A match *closes* when a boundary character (or the end of the text) follows it. Closing a node
  whose entities are all forbidden is a violation, unless a longer allowed name closes at the same
  boundary (it is a suffix of that name: "diabetes" in "type 2 diabetes", which the linker's
  longest-match rule reports as the longer name).

Steering on top (not needed for the guarantee): a token that continues an open match and ends
exactly on a complete forbidden name that no allowed name continues is blocked too ("Heli" + "um"),
so the model is not left with a name it can never close.

Masks for a state are computed for the whole vocabulary at once: tokens are sorted by their
normalised text, so "every token that starts with `prefix`" is one contiguous range, and a
depth-first walk of the trie from the state's nodes visits only prefixes some token has.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

SPACE = " "
_MAX_CHAR = "\U0010ffff"

ClosingGroup = tuple[int, ...]   # trie nodes (terminals) that close at the same boundary
WalkRecord = tuple[int, int, tuple[int, ...], int]   # (lo, hi, nodes, kind) over sorted token positions
CLOSES, OPEN_NAME, OPEN_WORD = 0, 1, 2               # WalkRecord kinds (see SurfaceGuard._walk)


def fold(text: str) -> str:
    """Normalise like `normalise_alias` but keep a leading/trailing space (runs collapse to one)."""
    out: list[str] = []
    for raw in text:
        for ch in raw.casefold():
            if ch.isalnum():
                out.append(ch)
            elif not out or out[-1] != SPACE:
                out.append(SPACE)
    return "".join(out)


class NameTrie:
    """Character trie over normalised surface forms; terminal nodes carry their entity ids.

    Compact for large KGs (~100k forms, ~1M nodes): built level by level from the sorted forms so
    that each node's children are numbered consecutively; a node stores only the string of its
    children's characters and the number of its first child.
    """

    def __init__(self, forms: Mapping[str, Sequence[str]]) -> None:
        ordered = sorted(f for f in forms if f)
        self._chars: list[str] = [""]                   # node -> its children's characters, in order
        self._first = array("i", [0])                   # node -> number of its first child
        self.depth = array("i", [0])
        self.parent = array("i", [-1])
        self.entities: dict[int, tuple[str, ...]] = {}  # terminal node -> entity ids
        self.nodes_of_entity: dict[str, list[int]] = {}
        frontier = [(0, 0, len(ordered))]               # (node, lo, hi): forms[lo:hi] share the node's prefix
        level = 0
        while frontier:
            following: list[tuple[int, int, int]] = []
            for node, lo, hi in frontier:
                index = lo
                if index < hi and len(ordered[index]) == level:   # the form ending here sorts first
                    ids = tuple(dict.fromkeys(forms[ordered[index]]))
                    self.entities[node] = ids
                    for entity_id in ids:
                        self.nodes_of_entity.setdefault(entity_id, []).append(node)
                    index += 1
                self._first[node] = len(self._chars)
                chars: list[str] = []
                while index < hi:
                    ch = ordered[index][level]
                    end = index + 1
                    while end < hi and ordered[end][level] == ch:
                        end += 1
                    child = len(self._chars)
                    self._chars.append("")
                    self._first.append(0)
                    self.depth.append(level + 1)
                    self.parent.append(node)
                    chars.append(ch)
                    following.append((child, index, end))
                    index = end
                self._chars[node] = "".join(chars)
            frontier = following
            level += 1

    def __len__(self) -> int:
        return len(self._chars)

    def child(self, node: int, ch: str) -> int:
        """The child of `node` along `ch`, or -1."""
        k = self._chars[node].find(ch)
        return -1 if k < 0 else self._first[node] + k

    def child_chars(self, node: int) -> str:
        return self._chars[node]

    def children(self, node: int) -> range:
        first = self._first[node]
        return range(first, first + len(self._chars[node]))


@dataclass(frozen=True, slots=True)
class GuardState:
    nodes: frozenset[int] = frozenset()
    boundary: bool = True   # the tail ends at a word boundary (or nothing was generated yet)


def advance(trie: NameTrie, state: GuardState, text: str) -> tuple[GuardState, list[ClosingGroup]]:
    """Feed `text`; return the new state and the groups of matches that closed on the way."""
    return advance_folded(trie, state, fold(text))


def advance_folded(trie: NameTrie, state: GuardState, folded: str) -> tuple[GuardState, list[ClosingGroup]]:
    """`advance` for text already passed through `fold` (per-token texts are folded once, up front)."""
    nodes = list(state.nodes)
    boundary = state.boundary
    closed: list[ClosingGroup] = []
    child = trie.child
    for ch in folded:  # `fold` output: each character is final (casefolded; boundaries are one space)
        if ch == SPACE:
            if boundary:
                continue  # runs of boundary characters count once, as in normalise_alias
            group = tuple(n for n in nodes if n in trie.entities)
            if group:
                closed.append(group)
            nodes = [c for n in nodes if (c := child(n, SPACE)) >= 0]
            boundary = True
            continue
        nxt = [c for n in nodes if (c := child(n, ch)) >= 0]
        if boundary and (c := child(0, ch)) >= 0:
            nxt.append(c)  # a new match may start right after a boundary
        nodes = nxt
        boundary = False
    return GuardState(frozenset(nodes), boundary), closed


def final_group(trie: NameTrie, state: GuardState) -> ClosingGroup:
    """Matches that the end of the text would close."""
    return tuple(n for n in state.nodes if n in trie.entities)


class AllowedNodes:
    """Which terminal nodes carry an allowed entity, for one allowed set."""

    def __init__(self, trie: NameTrie, allowed_ids: Iterable[str]) -> None:
        self.trie = trie
        self.nodes = frozenset(n for i in allowed_ids for n in trie.nodes_of_entity.get(i, ()))
        self.tensor = torch.zeros(len(trie), dtype=torch.bool)   # [num_nodes]
        if self.nodes:
            self.tensor[torch.tensor(sorted(self.nodes))] = True
        # nodes with an allowed name at or below them: a match there may still become allowed
        self.live: set[int] = set()
        for node in self.nodes:
            while node > 0 and node not in self.live:
                self.live.add(node)
                node = trie.parent[node]

    def dead_end(self, group: tuple[int, ...]) -> bool:
        """True if a match in `group` (open matches where a token ends) spells a complete forbidden
        name that nothing allowed continues, and no longer open match may still cover it."""
        depth = self.trie.depth
        for node in group:
            if node not in self.trie.entities or node in self.live:
                continue
            if any(other in self.live and depth[other] > depth[node] for other in group):
                continue
            return True
        return False

    def violates(self, group: ClosingGroup) -> bool:
        """True if some forbidden name in `group` is not the suffix of a longer allowed one."""
        depth = self.trie.depth
        for node in group:
            if node in self.nodes:
                continue
            if any(other in self.nodes and depth[other] > depth[node] for other in group):
                continue
            return True
        return False


class SurfaceGuard:
    """Vocabulary-wide masks for guard states: `blocked(state, allowed)` -> bool [vocab]."""

    def __init__(self, trie: NameTrie, token_texts: Sequence[str]) -> None:
        self.trie = trie
        self.vocab_size = len(token_texts)
        folded = [fold(t) for t in token_texts]
        # At a boundary a leading space of the token collapses into the previous one.
        effective = {False: folded, True: [s[1:] if s.startswith(SPACE) else s for s in folded]}
        self._sorted: dict[bool, list[str]] = {}
        self._perm: dict[bool, torch.Tensor] = {}
        # Closings that happen inside a token whatever came before (matches that start inside it).
        self._single_tok: dict[bool, torch.Tensor] = {}
        self._single_node: dict[bool, torch.Tensor] = {}
        self._multi: dict[bool, list[tuple[int, ClosingGroup]]] = {}
        for boundary in (False, True):
            order = sorted(range(self.vocab_size), key=effective[boundary].__getitem__)
            self._sorted[boundary] = [effective[boundary][i] for i in order]
            self._perm[boundary] = torch.tensor(order, dtype=torch.long)
            single_tok: list[int] = []
            single_node: list[int] = []
            multi: list[tuple[int, ClosingGroup]] = []
            start = GuardState(frozenset(), boundary)
            for token_id, text in enumerate(folded):
                if SPACE not in text:
                    continue  # no boundary inside this token -> nothing can close inside it
                for group in advance(trie, start, text)[1]:
                    if len(group) == 1:
                        single_tok.append(token_id)
                        single_node.append(group[0])
                    else:
                        multi.append((token_id, group))
            self._single_tok[boundary] = torch.tensor(single_tok, dtype=torch.long)
            self._single_node[boundary] = torch.tensor(single_node, dtype=torch.long)
            self._multi[boundary] = multi
        self._walks: dict[tuple[frozenset[int], bool], list[WalkRecord]] = {}

    def static_blocked(self, boundary: bool, allowed: AllowedNodes) -> torch.Tensor:
        """bool [vocab]: tokens that close a forbidden name inside themselves."""
        blocked = torch.zeros(self.vocab_size, dtype=torch.bool)
        nodes = self._single_node[boundary]
        if nodes.numel():
            bad = ~allowed.tensor[nodes]                      # single forbidden closings
            blocked[self._single_tok[boundary][bad]] = True
        for token_id, group in self._multi[boundary]:
            if allowed.violates(group):
                blocked[token_id] = True
        return blocked

    def continuation_blocked(self, state: GuardState, allowed: AllowedNodes) -> torch.Tensor | None:
        """bool [vocab]: tokens whose text, continuing the state's open matches, closes a forbidden
        name (None when nothing is blocked)."""
        records = self._records(state)
        if records is None:
            return None
        bad = [(lo, hi) for lo, hi, group, kind in records
               if (allowed.violates(group) if kind == CLOSES else kind == OPEN_NAME and allowed.dead_end(group))]
        return self._ranges_blocked(state.boundary, bad)

    def dead_word_blocked(self, state: GuardState, allowed: AllowedNodes) -> torch.Tensor | None:
        """Steering, not the guarantee: bool [vocab], tokens that only lengthen the current word
        (no word boundary in them) and leave it a prefix of forbidden names alone (every open match
        after the token has no allowed name at or below it). A token after which the word is no
        prefix of any constrained form at all ("JP" + "Y") is not blocked: the mention is over.
        None when nothing is blocked."""
        records = self._records(state)
        if records is None:
            return None
        live = allowed.live
        bad = [(lo, hi) for lo, hi, group, kind in records
               if kind == OPEN_WORD and not any(n in live for n in group)]
        return self._ranges_blocked(state.boundary, bad)

    def _records(self, state: GuardState) -> list[WalkRecord] | None:
        if not state.nodes:
            return None
        key = (state.nodes, state.boundary)
        records = self._walks.get(key)
        if records is None:
            if len(self._walks) > 100_000:
                self._walks.clear()
            records = self._walks[key] = self._walk(tuple(state.nodes), state.boundary)
        return records

    def _ranges_blocked(self, boundary: bool, bad: list[tuple[int, int]]) -> torch.Tensor | None:
        if not bad:
            return None
        delta = torch.zeros(self.vocab_size + 1, dtype=torch.int32)   # difference array over sorted order
        bounds = torch.tensor(bad, dtype=torch.long)                   # [k, 2]
        delta.index_add_(0, bounds[:, 0], torch.ones(len(bad), dtype=torch.int32))
        delta.index_add_(0, bounds[:, 1], -torch.ones(len(bad), dtype=torch.int32))
        blocked_sorted = delta.cumsum(0)[:-1] > 0                      # [vocab], sorted positions
        blocked = torch.zeros(self.vocab_size, dtype=torch.bool)
        blocked[self._perm[boundary]] = blocked_sorted
        return blocked

    def _walk(self, start: tuple[int, ...], boundary: bool) -> list[WalkRecord]:
        """(lo, hi, group, kind): tokens at sorted positions [lo, hi) close `group` (terminals of
        `start`'s continuations; kind CLOSES), end with `group` open and holding a complete name
        (kind OPEN_NAME), or end with `group` open without having passed a word boundary (kind
        OPEN_WORD: the token only lengthened the current word; used by steering).
        Depth-first over trie nodes and token prefixes together."""
        strings = self._sorted[boundary]
        trie = self.trie
        records: list[WalkRecord] = []
        stack: list[tuple[tuple[int, ...], str, int, int, bool]] = [(start, "", 0, len(strings), False)]
        while stack:
            nodes, prefix, lo, hi, spaced = stack.pop()
            chars = {SPACE}
            for node in nodes:
                chars.update(trie.child_chars(node))
            for ch in chars:
                extended = prefix + ch
                a = bisect.bisect_left(strings, extended, lo, hi)
                b = bisect.bisect_left(strings, extended + _MAX_CHAR, a, hi)
                if a == b:
                    continue
                if ch == SPACE:
                    group = tuple(n for n in nodes if n in self.trie.entities)
                    if group:
                        records.append((a, b, group, CLOSES))
                nxt = tuple(c for n in nodes if (c := trie.child(n, ch)) >= 0)
                if nxt:
                    word = not spaced and ch != SPACE
                    if word or any(n in trie.entities for n in nxt):
                        exact_end = bisect.bisect_right(strings, extended, a, b)   # tokens == extended
                        if exact_end > a:
                            if ch != SPACE and any(n in trie.entities for n in nxt):
                                records.append((a, exact_end, nxt, OPEN_NAME))
                            if word:
                                records.append((a, exact_end, nxt, OPEN_WORD))
                    stack.append((nxt, extended, a, b, spaced or ch == SPACE))
        return records
