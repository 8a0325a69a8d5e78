"""Character-level guard: no token may complete a forbidden surface form at a word boundary.

The exact linker (knowledge_graphs.linking) finds a name wherever its normalised form (casefold,
non-alphanumerics -> one space) stands between word boundaries. The guard follows the generated
text in exactly that normalised character stream, so it does not care how a name was split into
tokens, in which case it was written, or which punctuation surrounds it:

- `NameTrie` is a character trie over the normalised forms of the constrained entities.
- `GuardState` is the set of trie nodes matched by the text's tail (each a match that began at a
  word boundary) plus whether the tail ends at a boundary.
- A match *closes* when a boundary character (or the end of the text) follows it. Closing a node
  whose entities are all forbidden is a violation, unless a longer allowed name covers it, as the
  linker's longest-match rule then reports the longer name: one closing at the same boundary (a
  suffix: "diabetes" in "type 2 diabetes"), or one still open that began at or before it and goes
  on past the boundary toward an allowed name ("Nicotine" in "Nicotine dependence"). The latter is
  an obligation carried in `GuardState.carriers` (`advance_checked`): from then on every character
  must keep one of those matches on the way to an allowed name until one closes on it, EOS is
  blocked meanwhile, and at most MAX_IDLE tokens in a row may add nothing but boundary characters.
  These checks depend on the allowed set, so a `GuardState` belongs to one `AllowedNodes`.

Steering on top (not needed for the guarantee): a token that continues an open match and ends
exactly on a complete forbidden name that no allowed name continues is blocked too ("Heli" + "um"),
so the model is not left with a name it can never close; and the dead-word rule gives the token
steering (constraint_masks) the tokens that lengthen a word into a prefix of forbidden names only.

These rules, applied to the whole vocabulary at once, are `knowledge_graphs.decoding.vocab_guard`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

SPACE = " "
MAX_IDLE = 1   # boundary-only tokens in a row allowed while an obligation is pending (after the one that opened it)
# Steering blocks a dead word (a prefix of forbidden names only) from this many characters on:
# shorter prefixes are too often ordinary text ("E16" in an ICD-10 code vs "e16 membrane protein").
MIN_DEAD_WORD_CHARS = 4

ClosingGroup = tuple[int, ...]   # trie nodes (terminals) that close at the same boundary


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
        # numpy views for vectorised checks, with one sentinel node at the end (no name, never live)
        self.sentinel = len(self._chars)
        self.depth_array = np.append(np.frombuffer(self.depth, dtype=np.int32).astype(np.int64), -1)
        self.terminal_array = np.full(self.sentinel + 1, False)
        if self.entities:
            self.terminal_array[np.fromiter(self.entities, dtype=np.int64)] = True

    def __len__(self) -> int:
        return len(self._chars)

    def child(self, node: int, ch: str) -> int:
        """The child of `node` along `ch`, or -1."""
        k = self._chars[node].find(ch)
        return -1 if k < 0 else self._first[node] + k

    def char(self, node: int) -> str:
        """The character on the edge into `node` ("" for the root)."""
        if node <= 0:
            return ""
        parent = self.parent[node]
        return self._chars[parent][node - self._first[parent]]

    def child_chars(self, node: int) -> str:
        return self._chars[node]

    def children(self, node: int) -> range:
        first = self._first[node]
        return range(first, first + len(self._chars[node]))


@dataclass(frozen=True, slots=True)
class GuardState:
    nodes: frozenset[int] = frozenset()
    boundary: bool = True   # the tail ends at a word boundary (or nothing was generated yet)
    # A pending obligation (see `advance_checked`): the open matches, a subset of `nodes`, of which
    # one must close on an allowed name, as it would cover forbidden names already closed inside
    # it. None: nothing pending. Only states built by `advance_checked` (one allowed set) have one.
    carriers: frozenset[int] | None = None
    idle: int = 0   # tokens in a row, while an obligation is pending, that added no letter or digit


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


def advance_checked(trie: NameTrie, state: GuardState, folded: str, allowed: AllowedNodes,
                    ) -> tuple[GuardState, bool]:
    """`advance_folded` for one allowed set, with the linker's longest-match rule for names that
    are prefixes (or inner parts) of longer allowed names: returns (new state, violated).

    A forbidden name F that closes at a boundary is not a violation if an open match N that began
    at or before F (F itself, or a deeper one) continues past the boundary toward an allowed name: the text
    may still become that longer allowed name L, which the linker prefers (longest first) and
    which then covers F ("Nicotine" in "Nicotine dependence", "Heart failure" in "Heart failure,
    NYHA class III or IV"). The continuations of such N become the state's carriers; from then on
    the text must close one of them on an allowed name: a character (or the end of the text) after
    which no carrier is still on the way to an allowed name is a violation. A new forbidden closing
    while an obligation is pending must be covered by the same carriers (one name covering all)."""
    nodes = list(state.nodes)
    boundary = state.boundary
    carriers = None if state.carriers is None else set(state.carriers)
    child = trie.child
    live = allowed.live
    depth = trie.depth
    for ch in folded:
        if ch == SPACE:
            if boundary:
                continue
            group = [n for n in nodes if n in trie.entities]
            if carriers is not None and any(n in carriers and n in allowed.nodes for n in group):
                carriers = None   # an allowed name closed over the pending forbidden ones
            bad = allowed.forbidden_closing(group)
            pool = nodes if carriers is None else carriers
            if bad:
                need = max(depth[n] for n in bad)
                pool = [n for n in pool if depth[n] >= need]
            if bad or carriers is not None:
                carriers = {c for n in pool if (c := child(n, SPACE)) >= 0 and c in live}
                if not carriers:
                    return GuardState(frozenset(), True), True
            nodes = [c for n in nodes if (c := child(n, SPACE)) >= 0]
            boundary = True
            continue
        nxt = [c for n in nodes if (c := child(n, ch)) >= 0]
        if carriers is not None:
            carriers = {c for n in carriers if (c := child(n, ch)) >= 0 and c in live}
            if not carriers:
                return GuardState(frozenset(), False), True
        if boundary and (c := child(0, ch)) >= 0:
            nxt.append(c)  # a new match may start right after a boundary
        nodes = nxt
        boundary = False
    if carriers is None:
        return GuardState(frozenset(nodes), boundary), False
    idle = state.idle + 1 if state.carriers is not None and not folded.strip() else 0
    return GuardState(frozenset(nodes), boundary, frozenset(carriers), idle), False


def end_violates(trie: NameTrie, state: GuardState, allowed: AllowedNodes) -> bool:
    """True if ending the text here (EOS) would leave a forbidden name linked."""
    group = final_group(trie, state)
    if state.carriers is not None and not any(n in state.carriers and n in allowed.nodes for n in group):
        return True
    return bool(allowed.forbidden_closing(list(group)))


class AllowedNodes:
    """Which terminal nodes carry an allowed entity, for one allowed set."""

    def __init__(self, trie: NameTrie, allowed_ids: Iterable[str]) -> None:
        self.trie = trie
        self.nodes = frozenset(n for i in allowed_ids for n in trie.nodes_of_entity.get(i, ()))
        # nodes with an allowed name at or below them: a match there may still become allowed;
        # `below`: which allowed names (their terminal nodes) lie at or below each such node. Lists: each
        # terminal walks its own ancestors once, so no list repeats one, and the guard's only reader unions them
        below: dict[int, list[int]] = {}
        for terminal in self.nodes:
            node = terminal
            while node > 0:
                below.setdefault(node, []).append(terminal)
                node = trie.parent[node]
        self.live: set[int] = set(below)
        self.below: dict[int, list[int]] = below
        # the same as sorted arrays for vectorised membership checks (`is_allowed`, `is_live`): a view holds a
        # few thousand of a medical trie's 900k nodes, where bool arrays over the whole trie cost 1.8 MB per view
        self._allowed_sorted = np.sort(np.fromiter(self.nodes, dtype=np.int64, count=len(self.nodes)))
        self._live_sorted = np.sort(np.fromiter(self.live, dtype=np.int64, count=len(self.live)))
        self.walks: dict[GuardState, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}   # vocab_guard walk memo

    @property
    def nbytes(self) -> int:
        return self._allowed_sorted.nbytes + self._live_sorted.nbytes

    def is_allowed(self, nodes: np.ndarray) -> np.ndarray:
        """bool per node: an allowed name ends there."""
        return _members(self._allowed_sorted, nodes)

    def is_live(self, nodes: np.ndarray) -> np.ndarray:
        """bool per node: an allowed name ends at or below it."""
        return _members(self._live_sorted, nodes)

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

    def forbidden_closing(self, group: Sequence[int]) -> list[int]:
        """The forbidden names in `group` (matches closing at one boundary) that are not the suffix
        of a longer allowed name closing there too."""
        depth = self.trie.depth
        return [node for node in group if node not in self.nodes
                and not any(other in self.nodes and depth[other] > depth[node] for other in group)]

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


def _members(sorted_ids: np.ndarray, query: np.ndarray) -> np.ndarray:
    """bool per query value: it is in `sorted_ids` (ascending, unique)."""
    if not len(sorted_ids):
        return np.zeros(np.shape(query), dtype=bool)
    positions = np.searchsorted(sorted_ids, query)
    np.minimum(positions, len(sorted_ids) - 1, out=positions)
    return sorted_ids[positions] == query
