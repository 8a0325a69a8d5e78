"""The character guard's rules applied to the whole vocabulary at once: token ids blocked per state.

Tokens are sorted by their normalised text (as it reads after the state's boundary flag), so
"every token that starts with `prefix`" is one contiguous range of sorted positions, and a
depth-first walk of the name trie from a state's open matches visits only the prefixes some token
has. With no obligation pending, that walk is done once per (trie node, boundary) and domain, the
allowed set aside (`guard_records`): nodes up to PRECOMPUTE_DEPTH characters deep, whose walks are
the long ones ("di": thousands of (node, prefix) pairs), at start-up; deeper ones on first use.
A state with an obligation pending, or one where some token would open one, takes the
carrier-tracking walk (`_walk`), memoised per allowed set.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import numpy as np

from knowledge_graphs.decoding.guard_records import (
    PackedRecords,
    Records,
    evaluate,
    prefix_range,
    ranges_to_ids,
    records_bytes,
    walk_records,
)
from knowledge_graphs.decoding.memo import ByteBoundedMemo, arrays_bytes
from knowledge_graphs.decoding.surface_guard import (
    MAX_IDLE,
    MIN_DEAD_WORD_CHARS,
    SPACE,
    AllowedNodes,
    ClosingGroup,
    GuardState,
    NameTrie,
    advance,
    fold,
)

PRECOMPUTE_DEPTH = 4      # walk records built at start-up for trie nodes this shallow
MEMO_BYTES = 8 * 2**20    # per shared memo (guard results, deeper walk records); DomainMasks sets it from its limits
SHARED_KEY_BYTES = 600    # a guard result's key: two small frozensets in a tuple, and its dict slot
NO_IDS = np.zeros(0, dtype=np.int64)


class SortedVocabulary:
    """The vocabulary as the guard reads it, the same for every domain and so built once per processor:
    each token's folded text, and per boundary flag the tokens sorted by the text they add after it
    (sorted on first use: a guard read back from the index cache brings its own copy, `share_vocabulary`)."""

    def __init__(self, token_texts: Sequence[str]) -> None:
        self.folded = [fold(t) for t in token_texts]
        # tokens with a boundary after some word character: the only ones inside which a match can both
        # start and close (a leading space only ends the text before the token)
        self.inner_boundary = [token_id for token_id, text in enumerate(self.folded) if SPACE in text.lstrip(SPACE)]
        self._sorted: dict[bool, list[str]] | None = None
        self._perm: dict[bool, np.ndarray] | None = None     # sorted position -> token id

    def __len__(self) -> int:
        return len(self.folded)

    @property
    def sorted(self) -> dict[bool, list[str]]:
        if self._sorted is None:
            self._sort()
        return self._sorted  # type: ignore[return-value]

    @property
    def perm(self) -> dict[bool, np.ndarray]:
        if self._perm is None:
            self._sort()
        return self._perm  # type: ignore[return-value]

    @property
    def is_sorted(self) -> bool:
        return self._sorted is not None

    def adopt(self, sorted_texts: dict[bool, list[str]], perm: dict[bool, np.ndarray]) -> None:
        """Take an equal ordering built elsewhere (a cached guard's) instead of sorting again."""
        self._sorted, self._perm = sorted_texts, perm

    def _sort(self) -> None:
        # At a boundary a leading space of the token collapses into the previous one.
        effective = {False: self.folded, True: [s[1:] if s.startswith(SPACE) else s for s in self.folded]}
        self._sorted, self._perm = {}, {}
        for boundary in (False, True):
            order = sorted(range(len(self.folded)), key=effective[boundary].__getitem__)
            self._sorted[boundary] = [effective[boundary][i] for i in order]
            self._perm[boundary] = np.array(order, dtype=np.int64)


class SurfaceGuard:
    """Per-state blocked token ids for one domain's name trie and one vocabulary."""

    def __init__(self, trie: NameTrie, vocabulary: SortedVocabulary | Sequence[str], *,
                 precompute_depth: int = PRECOMPUTE_DEPTH) -> None:
        self.trie = trie
        self.vocab_size = len(vocabulary)
        self.max_walks = 50_000               # carrier walks, per allowed set (DomainMasks sets it from its limits)
        if not isinstance(vocabulary, SortedVocabulary):
            vocabulary = SortedVocabulary(vocabulary)
        self._sorted = vocabulary.sorted
        self._perm = vocabulary.perm
        # Closings that happen inside a token whatever came before (matches that start inside it).
        self._single_tok: dict[bool, np.ndarray] = {}
        self._single_node: dict[bool, np.ndarray] = {}
        self._multi: dict[bool, list[tuple[int, ClosingGroup]]] = {}
        for boundary in (False, True):
            single_tok: list[int] = []
            single_node: list[int] = []
            multi: list[tuple[int, ClosingGroup]] = []
            start = GuardState(frozenset(), boundary)
            for token_id in vocabulary.inner_boundary:
                for group in advance(trie, start, vocabulary.folded[token_id])[1]:
                    if len(group) == 1:
                        single_tok.append(token_id)
                        single_node.append(group[0])
                    else:
                        multi.append((token_id, group))
            self._single_tok[boundary] = np.array(single_tok, dtype=np.int64)
            self._single_node[boundary] = np.array(single_node, dtype=np.int64)
            self._multi[boundary] = multi
        # `blocked` memo: (open matches, boundary, allowed names below them) -> (guard ids, dead-word ids)
        self._shared: ByteBoundedMemo[tuple[frozenset[int], bool, frozenset[int]], tuple[np.ndarray, np.ndarray]] = \
            ByteBoundedMemo(MEMO_BYTES, _ids_bytes, entry_bytes=SHARED_KEY_BYTES)
        self._lazy_records: ByteBoundedMemo[tuple[int, bool], Records] = ByteBoundedMemo(MEMO_BYTES, records_bytes)
        shallow: dict[tuple[int, bool], Records] = {}
        frontier = [0]
        for _ in range(precompute_depth):
            frontier = [c for n in frontier for c in trie.children(n)]
            for node in frontier:
                boundary = trie.char(node) == SPACE
                shallow[node, boundary] = walk_records(trie, self._sorted[boundary], node)
        self._records = PackedRecords(shallow)   # shallow nodes, kept (packed: the index cache reads it fast)

    def limit_memos(self, max_bytes: int) -> None:
        """Bound each shared memo (guard results, deeper walk records) to about `max_bytes`."""
        for memo in (self._shared, self._lazy_records):
            memo.max_bytes = max_bytes

    @property
    def memo_bytes(self) -> int:
        """What the shared memos hold now, by their estimates (each is bounded by `limit_memos`)."""
        return self._shared.bytes + self._lazy_records.bytes

    def share_vocabulary(self, vocabulary: SortedVocabulary) -> None:
        """Hold the processor's one copy of the sorted vocabulary instead of this guard's own (a guard read
        back from the index cache unpickles a copy per domain; the cache key pins the same tokenizer)."""
        assert len(vocabulary) == self.vocab_size
        if vocabulary.is_sorted:
            self._sorted, self._perm = vocabulary.sorted, vocabulary.perm
        else:
            vocabulary.adopt(self._sorted, self._perm)

    def static_blocked(self, boundary: bool, allowed: AllowedNodes) -> np.ndarray:
        """bool [vocab]: tokens that close a forbidden name inside themselves."""
        blocked = np.zeros(self.vocab_size, dtype=bool)
        nodes = self._single_node[boundary]
        blocked[self._single_tok[boundary][~allowed.is_allowed(nodes)]] = True   # single forbidden closings
        for token_id, group in self._multi[boundary]:
            if allowed.violates(group):
                blocked[token_id] = True
        return blocked

    def blocked(self, state: GuardState, allowed: AllowedNodes, *, dead_words: bool = True,
                ) -> tuple[np.ndarray, np.ndarray]:
        """Token ids (int64, possibly repeated) blocked after `state`, continuing its open matches:
        (guard, dead word).

        guard: the text would close a forbidden name that nothing allowed covers, or leave a
        pending obligation unmet (see `advance_checked`); plus the steering dead ends ("Heli" + "um").
        dead word (steering, not the guarantee): tokens that only lengthen the current word (no
        word boundary in them) and leave it a prefix of forbidden names alone (every open match
        after the token has no allowed name at or below it). A token after which the word is no
        prefix of any constrained form at all ("JP" + "Y") is not blocked: the mention is over.
        dead_words=False: the caller has no use for them (left empty)."""
        if not state.nodes:
            return NO_IDS, NO_IDS
        perm = self._perm[state.boundary]
        if state.carriers is None:
            # The records read the allowed set only at and below the open matches, so the answer
            # is shared by every allowed set with the same allowed names there: usually none (an
            # ordinary word, or a forbidden name), else the names the text is on its way to.
            below = frozenset().union(*(allowed.below.get(n, ()) for n in state.nodes))
            key = (state.nodes, state.boundary, below)
            ids = self._shared.get(key)
            if ids is None:
                found = evaluate([self.records(n, state.boundary) for n in state.nodes], allowed)
                if found is not None:   # None: an obligation may open, the walk below decides
                    ids = self._shared.put(key, (ranges_to_ids(found[0], perm), ranges_to_ids(found[1], perm)))
            if ids is not None:
                return ids[0], ids[1] if dead_words else NO_IDS
        walked = allowed.walks.get(state)
        if walked is None:
            if len(allowed.walks) > self.max_walks:
                allowed.walks.clear()
            walked = allowed.walks[state] = self._walk(state, allowed)
        guard_ranges, dead_ranges = (np.array(r, dtype=np.int64).reshape(-1, 2) for r in walked)
        dead = ranges_to_ids((dead_ranges[:, 0], dead_ranges[:, 1]), perm) if dead_words else NO_IDS
        return ranges_to_ids((guard_ranges[:, 0], guard_ranges[:, 1]), perm), dead

    def records(self, node: int, boundary: bool) -> Records:
        key = (node, boundary)
        found = self._records.get(key) or self._lazy_records.get(key)
        if found is None:
            found = self._lazy_records.put(key, walk_records(self.trie, self._sorted[boundary], node))
        return found

    def _walk(self, state: GuardState, allowed: AllowedNodes) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(guard ranges, dead-word ranges) over sorted token positions, for one allowed set: the
        `advance_checked` rules applied to every token at once (see `_CarrierWalk`)."""
        return _CarrierWalk(self._sorted[state.boundary], self.trie, state, allowed).run()


def _ids_bytes(ids: tuple[np.ndarray, np.ndarray]) -> int:
    return arrays_bytes(*ids)


# (open matches, obligation carriers or None, token prefix so far, sorted range [lo, hi) of the
# tokens that start with it, whether the prefix holds a word boundary)
_Frame = tuple[tuple[int, ...], frozenset[int] | None, str, int, int, bool]


class _CarrierWalk:
    """One carrier-tracking walk of `SurfaceGuard._walk`. Depth-first over trie nodes and token
    prefixes together; a token that leaves the trie with no obligation pending ends the mention and
    is never visited. Each next character is a boundary (`_across_boundary`) or goes on along the
    word (`_along_word`); with an obligation pending, tokens that take neither way are blocked
    (`_block_exposed`)."""

    def __init__(self, strings: list[str], trie: NameTrie, state: GuardState, allowed: AllowedNodes) -> None:
        self.strings = strings          # token texts in sorted order, as they read after state.boundary
        self.trie = trie
        self.state = state
        self.allowed = allowed
        self.guard_bad: list[tuple[int, int]] = []
        self.word_dead: list[tuple[int, int]] = []

    def run(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(guard ranges, dead-word ranges)."""
        trie, strings = self.trie, self.strings
        stack: list[_Frame] = [(tuple(self.state.nodes), self.state.carriers, "", 0, len(strings), False)]
        while stack:
            nodes, carriers, prefix, lo, hi, spaced = stack.pop()
            chars = {SPACE}
            for node in nodes:
                chars.update(trie.child_chars(node))
            covered: list[tuple[int, int]] = []     # subranges handled per next character
            for ch in chars:
                extended = prefix + ch
                a, b = prefix_range(strings, extended, lo, hi)
                if a == b:
                    continue
                if ch == SPACE:
                    covered.append((a, b))
                    frame = self._across_boundary(nodes, carriers, extended, a, b)
                else:
                    frame = self._along_word(nodes, carriers, extended, a, b, spaced)
                    if frame is None:
                        continue    # blocked below, with every other way out of the carriers
                    covered.append((a, b))
                if frame is not None:
                    stack.append(frame)
            if carriers is not None:
                self._block_exposed(prefix, lo, hi, covered)
        return self.guard_bad, self.word_dead

    def _across_boundary(self, nodes: tuple[int, ...], carriers: frozenset[int] | None, extended: str,
                         a: int, b: int) -> _Frame | None:
        """Tokens [a, b) put a word boundary after `nodes`: names that close there and are forbidden
        (or a pending obligation) must go on through a live carrier, else the tokens are blocked."""
        trie, allowed = self.trie, self.allowed
        group = [n for n in nodes if n in trie.entities]
        pending = carriers
        if pending is not None and any(n in pending and n in allowed.nodes for n in group):
            pending = None
        bad = allowed.forbidden_closing(group)
        pool: Iterable[int] = nodes if pending is None else pending
        if bad:
            need = max(trie.depth[n] for n in bad)
            pool = [n for n in pool if trie.depth[n] >= need]
        if bad or pending is not None:
            pending = frozenset(c for n in pool if (c := trie.child(n, SPACE)) >= 0 and c in allowed.live)
            if not pending:
                self.guard_bad.append((a, b))
                return None
        nxt = tuple(c for n in nodes if (c := trie.child(n, SPACE)) >= 0)
        return (nxt, pending, extended, a, b, True) if nxt else None

    def _along_word(self, nodes: tuple[int, ...], carriers: frozenset[int] | None, extended: str,
                    a: int, b: int, spaced: bool) -> _Frame | None:
        """Tokens [a, b) go on along the word by `extended[-1]`; None when no carrier of a pending
        obligation goes on by it. Tokens that end exactly here are blocked when they strand the
        text at a steering dead end (guard) or in a word only forbidden names start (dead word)."""
        trie, live, ch = self.trie, self.allowed.live, extended[-1]
        next_carriers = carriers
        if carriers is not None:
            next_carriers = frozenset(c for n in carriers if (c := trie.child(n, ch)) >= 0 and c in live)
            if not next_carriers:
                return None
        nxt = tuple(c for n in nodes if (c := trie.child(n, ch)) >= 0)
        exact_end = bisect.bisect_right(self.strings, extended, a, b)   # tokens == extended
        if exact_end > a:
            if any(n in trie.entities for n in nxt) and next_carriers is None and self.allowed.dead_end(nxt):
                self.guard_bad.append((a, exact_end))
            elif (not spaced and not any(n in live for n in nxt)
                  and max(trie.depth[n] for n in nxt) >= MIN_DEAD_WORD_CHARS):
                self.word_dead.append((a, exact_end))
        return (nxt, next_carriers, extended, a, b, spaced)

    def _block_exposed(self, prefix: str, lo: int, hi: int, covered: list[tuple[int, int]]) -> None:
        """An obligation is pending: a token that goes on past `prefix` by a character no carrier
        (nor a boundary) continues leaves the forbidden names it covers exposed."""
        start = bisect.bisect_right(self.strings, prefix, lo, hi)   # tokens == prefix end here: fine,
        if not prefix and self.state.boundary and self.state.idle >= MAX_IDLE:
            # except at the start, after a boundary: tokens that add nothing but boundary
            # characters make no progress; one more after the token that opened the
            # obligation is punctuation and spacing ("failure" + "," + " " + "NYHA"), more
            # would let the obligation hang on ("Nicotine." + "," + "," ...)
            start = lo
        for a, b in sorted(covered):
            if a > start:
                self.guard_bad.append((start, a))
            start = max(start, b)
        if start < hi:
            self.guard_bad.append((start, hi))
