"""Per-domain compiled constraint data and the per-(state, allowed set) mask cache.

`DomainMasks` is built once per (engine, KG): the character trie + vocabulary guard and the index
of every entity encoding's first tokens. `AllowedView` is one allowed set of it: the token trie of
the allowed entities' encodings and every mask computed for that set, keyed by the decoding state
(token-trie node, guard state), computed on the first visit of a state and then reused; views are
shared by requests with the same allowed set. A mask is kept as its blocked token ids when they
are few (the common case, applied sparsely) and as a packed int32 bitmask
(`engine.kernels.bitmask` layout) otherwise or on demand. What a first visit costs is mostly the
vocabulary guard's (`knowledge_graphs.decoding.vocab_guard`), whose allowed-independent part is shared by
all views of a domain.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from engine.kernels.bitmask import BITS, bitmask_words, pack_bool_mask
from knowledge_graphs.decoding.memo import ByteBoundedMemo, arrays_bytes
from knowledge_graphs.decoding.surface_guard import (
    SPACE,
    AllowedNodes,
    GuardState,
    NameTrie,
    advance,
    advance_checked,
    advance_folded,
    end_violates,
)
from knowledge_graphs.decoding.trie import ROOT, EncodingIndex, TokenTrie, encode_forms
from knowledge_graphs.decoding.vocab_guard import SortedVocabulary, SurfaceGuard
from knowledge_graphs.linking import MIN_FORM_CHARS
from knowledge_graphs.model import KgOutline, KnowledgeGraph, normalise_alias

MAX_CACHED_ENCODINGS = 50_000   # entities


@dataclass(frozen=True, slots=True)
class CacheLimits:
    """How much a long-running engine keeps: least recently used entries go first (the service sizes these
    from its settings). Every allowed set a prompt links to is a new view, so without a bound the cache
    grows with traffic."""

    views: int = 64               # allowed sets kept per domain
    # and at most about this much of them per domain (`AllowedView.approx_bytes`: what a view holds when built and
    # the masks and transitions it has cached since)
    view_bytes: int = 48 * 2**20
    masks_per_view: int = 4096    # decoding states (their masks, transitions, guard walks) kept per allowed set
    # each of a domain's memos shared by all its allowed sets (guard results, walk records, plain guard steps),
    # by bytes: their entries grow with the vocabulary (a 152k-token guard result holds thousands of ids)
    memo_bytes: int = 8 * 2**20


def pack_allowed(allowed: np.ndarray, vocab_size: int) -> torch.Tensor:
    """bool [vocab] -> packed int32 [words] (engine.kernels.bitmask layout); numpy's packbits is
    ~10x faster than the torch reference on CPU, and this runs on every mask-cache miss."""
    if sys.byteorder != "little":
        return pack_bool_mask(torch.from_numpy(allowed), vocab_size)
    padded = allowed
    if vocab_size % BITS:
        padded = np.zeros(bitmask_words(vocab_size) * BITS, dtype=bool)
        padded[:vocab_size] = allowed
    # little-endian: byte j holds tokens 8j..8j+7, so int32 word w holds tokens 32w..32w+31
    return torch.from_numpy(np.packbits(padded, bitorder="little").view(np.int32))


SPARSE_FRACTION = 1 / 16   # at most this share of the vocabulary blocked -> the sparse apply
# CPython / torch objects behind one cached entry (64 bits, roughly): a mask's OrderedDict slot, CachedMask and
# tensor objects; a transition's dict slot, key tuple and DecodeState
MASK_ENTRY_BYTES = 600
MASK_SLOT_BYTES = 100        # a state whose mask is one of the view's two shared plain masks: the slot alone
TRANSITION_BYTES = 250
REACHED_BYTES = 100          # a token-trie node whose guard state a view has found (`AllowedView._reach`)
TRIE_NODE_BYTES = 300        # a token-trie node made (its children dict and list slots)
TRIE_ENCODING_BYTES = 160    # an encoding a view's token trie keeps sorted (two tuples and a list slot)


class CachedMask:
    """One state's mask. Most block few tokens and are applied through their ids alone, so the
    packed bitmask of such a mask is built on first use; the ids of a dense one are not kept."""

    __slots__ = ("_packed", "blocked_ids", "vocab_size")

    def __init__(self, parts: list[np.ndarray], vocab_size: int) -> None:
        """parts: int64 arrays of blocked token ids; together they are the mask (repeats are harmless)."""
        self.vocab_size = vocab_size
        self._packed: torch.Tensor | None = None
        self.blocked_ids: torch.Tensor | None = None   # int64 [n]: few tokens blocked, a cheaper sparse apply
        if sum(len(p) for p in parts) <= SPARSE_FRACTION * vocab_size:
            self.blocked_ids = torch.from_numpy(parts[0] if len(parts) == 1 else np.concatenate([_NONE, *parts]))
        else:
            self._packed = pack_allowed(~_union(parts, vocab_size), vocab_size)

    @property
    def nbytes(self) -> int:
        """What this entry holds in a view's mask cache, roughly: its objects, its ids or its packed words."""
        data = self.blocked_ids if self.blocked_ids is not None else self._packed
        return MASK_ENTRY_BYTES + (data.numel() * data.element_size() if data is not None else 0)

    @property
    def packed(self) -> torch.Tensor:
        """int32 [words]: the mask itself."""
        if self._packed is None:
            self._packed = pack_allowed(~_union([self.blocked_ids.numpy()], self.vocab_size), self.vocab_size)  # type: ignore[union-attr]
        return self._packed


_NONE = np.zeros(0, dtype=np.int64)


def guard_state_bytes(state: GuardState) -> int:
    """A plain guard step's result: the state and its set of open matches."""
    return sys.getsizeof(state) + sys.getsizeof(state.nodes)


def _without(ids: np.ndarray, remove: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """`ids` less those in `remove`. scratch: a bool [vocab] array of False, left as found (a
    lookup table beats np.isin's sort by tens of microseconds at these sizes)."""
    if not len(ids) or not len(remove):
        return ids
    scratch[remove] = True
    hit = scratch[ids]
    scratch[remove] = False
    return ids[~hit] if hit.any() else ids


def _union(parts: list[np.ndarray], vocab_size: int) -> np.ndarray:
    """bool [vocab]: the tokens in any part."""
    blocked = np.zeros(vocab_size, dtype=bool)
    for part in parts:
        blocked[part] = True
    return blocked


@dataclass(frozen=True, slots=True)
class DecodeState:
    trie_node: int | None       # token-trie node of the mention being written, None outside one
    guard: GuardState


COMPILED_PARTS = ("entity_ids", "forms_by_entity", "name_trie", "guard", "index")


def compile_domain(kg: KnowledgeGraph, types: Collection[str], tokenizer: Tokenizer, token_texts: Sequence[str],
                   has_word_chars: Sequence[bool], vocabulary: SortedVocabulary | None = None) -> dict[str, Any]:
    """The expensive, allowed-set-independent part of a domain (seconds): the character trie of every
    constrained surface form, the vocabulary guard's walk records, and the index of every entity encoding.
    Plain data, so it can be cached on disk (`COMPILED_PARTS` are its keys)."""
    entity_ids = frozenset(e.id for t in types for e in kg.entities(t))
    forms: dict[str, list[str]] = {}
    forms_by_entity: dict[str, list[str]] = {}
    for entity_id in sorted(entity_ids):
        entity = kg.entity(entity_id)
        assert entity is not None
        kept = [(f, key) for f in entity.surface_forms if len(key := normalise_alias(f)) >= MIN_FORM_CHARS]
        forms_by_entity[entity_id] = [f for f, _ in kept]
        for _, key in kept:
            forms.setdefault(key, []).append(entity_id)
    name_trie = NameTrie(forms)
    return {"entity_ids": entity_ids, "forms_by_entity": forms_by_entity, "name_trie": name_trie,
            "guard": SurfaceGuard(name_trie, vocabulary or token_texts),
            "index": EncodingIndex(encode_forms(tokenizer, forms_by_entity, has_word_chars))}


class DomainMasks:
    def __init__(
        self, kg: KnowledgeGraph | KgOutline, types: Collection[str], tokenizer: Tokenizer, token_texts: Sequence[str],
        eos_token_ids: Collection[int], limits: CacheLimits | None = None, compiled: dict[str, Any] | None = None,
        vocabulary: SortedVocabulary | None = None,
    ) -> None:
        """compiled: what `compile_domain` returns for this (KG, types, tokenizer), e.g. read back from the
        on-disk index cache (`knowledge_graphs.decoding.index_cache`); built here when not given (then `kg` must be
        the whole KG, not its outline).
        vocabulary: `token_texts` folded and sorted, one for every domain of a processor (built here if None)."""
        # the KG itself is not kept: an engine core holds these masks for its whole life, and needs of the KG
        # only which ids exist (to refuse unknown ones)
        outline = kg if isinstance(kg, KgOutline) else KgOutline.of(kg)
        self.kg_version = outline.version
        self.known_entity_ids = outline.entity_ids
        self.limits = limits or CacheLimits()
        self.types = frozenset(types)
        self.vocab_size = len(token_texts)
        self.tokenizer = tokenizer
        self.token_texts = token_texts
        vocabulary = vocabulary or SortedVocabulary(token_texts)
        folded = vocabulary.folded
        self.has_word_chars = [f.strip() != "" for f in folded]
        if compiled is None:
            assert isinstance(kg, KnowledgeGraph), "compiling needs the whole KG"
            compiled = compile_domain(kg, self.types, tokenizer, token_texts, self.has_word_chars, vocabulary)
        self.entity_ids: frozenset[str] = compiled["entity_ids"]
        self.forms_by_entity: dict[str, list[str]] = compiled["forms_by_entity"]
        self.name_trie: NameTrie = compiled["name_trie"]
        self.guard: SurfaceGuard = compiled["guard"]
        self.guard.limit_memos(self.limits.memo_bytes)
        self.guard.max_walks = self.limits.masks_per_view
        self.guard.share_vocabulary(vocabulary)
        self.index: EncodingIndex = compiled["index"]
        self.token_folded = folded
        # A token that begins with a word boundary can close a mention (or start a new one anywhere).
        self.boundary_start: list[bool] = [f.startswith(SPACE) for f in folded]
        self.eos_ids = np.array(sorted({i for i in eos_token_ids if 0 <= i < self.vocab_size}), dtype=np.int64)
        self._views: OrderedDict[frozenset[str], AllowedView] = OrderedDict()   # LRU
        self._view_bytes = 0   # what the cached views take, by their estimates (`AllowedView.approx_bytes`)
        self._views_lock = threading.Lock()   # views are built off the step thread (`prepare`)
        self._scratch = threading.local()
        # per boundary flag: the token's text closes no match (no boundary after its leading ones)
        self._closes_nothing = {False: [SPACE not in f for f in folded],
                                True: [SPACE not in f.lstrip(SPACE) for f in folded]}
        # memo of `step`, all views
        self._plain_steps: ByteBoundedMemo[tuple[GuardState, int], GuardState] = ByteBoundedMemo(
            self.limits.memo_bytes, guard_state_bytes)
        self._encodings: dict[str, list[list[int]]] = {}                     # memo of `encodings`
        self._encodings_lock = threading.Lock()

    @property
    def scratch(self) -> np.ndarray:
        """For `_without`: a bool [vocab] array, all False between uses, one per thread (views are
        built on the engine's input thread while the step thread computes masks)."""
        found = getattr(self._scratch, "array", None)
        if found is None:
            found = self._scratch.array = np.zeros(self.vocab_size, dtype=bool)
        return found

    def encodings(self, entity_ids: Collection[str]) -> list[tuple[str, list[int]]]:
        """(entity id, token ids) of every variant of every form of `entity_ids` (`encode_forms`),
        encoded once per domain: allowed sets overlap, and encoding is most of a view's build."""
        with self._encodings_lock:   # two threads may build views at once (see `view`)
            return self._encodings_locked(entity_ids)

    def _encodings_locked(self, entity_ids: Collection[str]) -> list[tuple[str, list[int]]]:
        missing = sorted(i for i in entity_ids if i not in self._encodings)
        if missing:
            if len(self._encodings) > MAX_CACHED_ENCODINGS:
                self._encodings.clear()
            for entity_id in missing:
                self._encodings[entity_id] = []
            for entity_id, ids in encode_forms(self.tokenizer, {i: self.forms_by_entity[i] for i in missing},
                                               self.has_word_chars):
                self._encodings[entity_id].append(ids)
        return [(i, ids) for i in sorted(entity_ids) for ids in self._encodings[i]]

    def step(self, guard: GuardState, token_id: int, allowed: AllowedNodes) -> tuple[GuardState, bool]:
        """`advance_checked` by the token's own text. A token that closes no match, with no
        obligation pending, moves the state the same way whatever the allowed set: memoised for all views."""
        if guard.carriers is None and self._closes_nothing[guard.boundary][token_id]:
            key = (guard, token_id)
            found = self._plain_steps.get(key)
            if found is None:
                found = self._plain_steps.put(key, advance_folded(self.name_trie, guard, self.token_folded[token_id])[0])
            return found, False
        return advance_checked(self.name_trie, guard, self.token_folded[token_id], allowed)

    def view(self, allowed_ids: Collection[str]) -> AllowedView:
        """The view of one allowed set, built on first use and kept while recently used (`CacheLimits.views`).
        A request holds its view for its whole life, so dropping one from the cache never disturbs it."""
        key = frozenset(allowed_ids) & self.entity_ids
        with self._views_lock:
            found = self._views.get(key)
            if found is not None:
                self._views.move_to_end(key)
                return found
        built = AllowedView(self, key)   # outside the lock: the step thread may need another view meanwhile
        with self._views_lock:
            found = self._views.get(key)
            if found is None:
                found = self._views[key] = built
                self._view_bytes += built.approx_bytes
            self._views.move_to_end(key)
            self._evict_locked()
        return found

    def _evict_locked(self) -> None:
        # by count and by size: a medical allowed set's view is ~1-2 MB when built (arrays over the whole name
        # trie), a finance one a few kB, and either grows with the decoding states it caches, so a count alone
        # keeps either far too many or far too few
        while len(self._views) > 1 and (len(self._views) > self.limits.views
                                        or self._view_bytes > self.limits.view_bytes):
            _, dropped = self._views.popitem(last=False)
            self._view_bytes -= dropped.approx_bytes

    def account(self, view: AllowedView, delta: int) -> None:
        """`view` cached or dropped `delta` bytes of masks or transitions (the step thread): its estimate follows,
        and so does the budget while the view is in the cache. A view dropped from the cache but still decoding
        for a request counts for nobody: it goes when its requests end."""
        with self._views_lock:
            view.approx_bytes += delta
            if self._views.get(view.allowed_ids) is view:
                self._view_bytes += delta
                self._evict_locked()

    @property
    def cached_views(self) -> int:
        return len(self._views)

    @property
    def cached_view_bytes(self) -> int:
        return self._view_bytes

    @property
    def memo_bytes(self) -> int:
        """What the memos shared by all views hold (guard results, walk records, plain steps), by their estimates."""
        return self.guard.memo_bytes + self._plain_steps.bytes

    @property
    def budget_bytes(self) -> int:
        """The most the caches above may hold, about: the views' budget and each of the three memos'."""
        return self.limits.view_bytes + 3 * self.limits.memo_bytes

    def advance_guard(self, guard: GuardState, text: str) -> tuple[GuardState, list[tuple[int, ...]]]:
        return advance(self.name_trie, guard, text)


class AllowedView:
    """Masks for one allowed set. `mask(state)` -> packed int32 [words]."""

    def __init__(self, domain: DomainMasks, allowed_ids: frozenset[str]) -> None:
        self.domain = domain
        self.allowed_ids = allowed_ids
        self.approx_bytes = 0   # when built (below), then the masks and transitions it caches (`DomainMasks.account`)
        self.allowed_nodes = AllowedNodes(domain.name_trie, allowed_ids)
        self.trie = TokenTrie(domain.encodings(allowed_ids))   # its nodes made as decoding reaches them
        # Which token-trie nodes steering may lead to, found on first use (`_reach`): a medical set's trie has
        # thousands of nodes, and walking them all was most of a view's build (pure Python, holding the GIL the
        # step loop needs) while decoding visits a handful. Token-trie node -> the guard state after its text,
        # or None where a token on the way leaves a forbidden name linked (the node is not live).
        self._reached: dict[int, GuardState | None] = {ROOT: GuardState()}
        # token-trie node -> the tokens that continue it toward an allowed name without a violation
        self._live_children: dict[int, list[int]] = {}
        # token ids per boundary flag: what the guard blocks whatever is open, what the root rule blocks
        self._static = {b: np.flatnonzero(domain.guard.static_blocked(b, self.allowed_nodes)) for b in (False, True)}
        self._root_blocked = {b: np.flatnonzero(self._root_mask(b)) for b in (False, True)}
        self._both = {b: np.union1d(self._static[b], self._root_blocked[b]) for b in (False, True)}
        self._root_off_mention: dict[tuple[int, bool], np.ndarray] = {}   # root rule minus a node's live continuations
        self._live_tokens: dict[int, np.ndarray] = {}   # token-trie node -> its live continuations
        self._masks: OrderedDict[DecodeState, CachedMask] = OrderedDict()   # LRU
        # outside a mention with no match open, the mask depends on the boundary flag alone
        self._plain = {b: CachedMask(self.blocked(DecodeState(None, GuardState(boundary=b))), domain.vocab_size)
                       for b in (False, True)}
        self._transitions: dict[tuple[DecodeState, int], DecodeState] = {}   # memo of next_state
        self.approx_bytes += self._estimate_bytes()
        self._trie_nodes_counted = len(self.trie)   # those made later are counted as they come (`_count_new_nodes`)

    def _estimate_bytes(self) -> int:
        """What this view holds when built, roughly (CPython object sizes on 64 bits): its arrays, the allowed
        nodes' sets, the token trie (a dict per node) and the live nodes. The masks and transitions it caches later
        are added as they come (`DomainMasks.account`)."""
        nodes = self.allowed_nodes
        arrays = [*self._static.values(), *self._root_blocked.values(), *self._both.values()]
        below = sum(len(names) for names in nodes.below.values())
        return (nodes.nbytes + sum(array.nbytes for array in arrays) + 200 * (len(nodes.live) + len(nodes.below)) + 40 * below
                + TRIE_NODE_BYTES * len(self.trie) + TRIE_ENCODING_BYTES * self.trie.encoding_count + 60 * len(nodes.nodes))

    def _count_new_nodes(self) -> None:
        """Count the token-trie nodes made since last asked toward this view's size (step thread)."""
        grown = len(self.trie) - self._trie_nodes_counted
        if grown:
            self._trie_nodes_counted += grown
            self.domain.account(self, TRIE_NODE_BYTES * grown)

    def is_live(self, node: int) -> bool:
        """Whether the text of token-trie `node` leaves no forbidden name linked on the way (per
        `advance_checked`: "Nicotine" + " dependence" is fine when "Nicotine dependence" is allowed): the guard
        would block the others, so steering must not lead there."""
        return node != ROOT and self._reach(node) is not None

    def _reach(self, node: int) -> GuardState | None:
        """The guard state after `node`'s text, None when it is not live; computed along the path from the
        nearest node already reached, and remembered."""
        reached = self._reached
        if node in reached:
            return reached[node]
        path = []
        while node not in reached:
            path.append(node)
            node = self.trie.parent[node]
        guard = reached[node]
        for child in reversed(path):
            if guard is not None:
                guard, violated = self.domain.step(guard, self.trie.token[child], self.allowed_nodes)
                guard = None if violated else guard
            reached[child] = guard
        self.domain.account(self, REACHED_BYTES * len(path))
        return guard

    def _live_children_of(self, node: int) -> list[int]:
        """The tokens that continue live `node` (or the root) to a live node."""
        found = self._live_children.get(node)
        if found is None:
            vocab = self.domain.vocab_size
            found = self._live_children[node] = [token_id for token_id, child in self.trie.children_of(node).items()
                                                 if token_id < vocab and self._reach(child) is not None]
            self.domain.account(self, REACHED_BYTES + 8 * len(found))
            self._count_new_nodes()
        return found

    def next_state(self, state: DecodeState, token_id: int, folded: str, *, memo: bool = True) -> DecodeState:
        """The state after `token_id`, whose decoded text, passed through `fold`, is `folded`.

        memo: the text is the token's own (no partial UTF-8 character around it), so the transition
        depends on (state, token) alone and is remembered."""
        if memo:
            key = (state, token_id)
            found = self._transitions.get(key)
            if found is None:
                if len(self._transitions) >= self.domain.limits.masks_per_view:
                    self.domain.account(self, -TRANSITION_BYTES * len(self._transitions))
                    self._transitions.clear()
                found = self._transitions[key] = self._next_state(state, token_id, folded)
                self.domain.account(self, TRANSITION_BYTES)
            return found
        return self._next_state(state, token_id, folded)

    def _next_state(self, state: DecodeState, token_id: int, folded: str) -> DecodeState:
        if 0 <= token_id < self.domain.vocab_size and folded == self.domain.token_folded[token_id]:   # its own text
            guard, _ = self.domain.step(state.guard, token_id, self.allowed_nodes)
        else:
            guard, _ = advance_checked(self.domain.name_trie, state.guard, folded, self.allowed_nodes)
        node: int | None = None
        if state.trie_node is not None:
            node = self.trie.step(state.trie_node, token_id)
        if node is None and (state.guard.boundary or self.domain.boundary_start[token_id]):
            node = self.trie.step(ROOT, token_id)   # the token starts a new mention
        if node is not None and not self.is_live(node):
            node = None
        self._count_new_nodes()
        return DecodeState(node, guard)

    def _root_mask(self, boundary: bool) -> np.ndarray:
        """bool [vocab] blocked: outside a mention, only tokens that would start a mention which is
        already a complete forbidden name with no allowed continuation."""
        blocked = np.zeros(self.domain.vocab_size, dtype=bool)
        live_roots = self.trie.children_of(ROOT)
        ids = [
            token_id for token_id, names in self.domain.index.single_token_names.items()
            if token_id < self.domain.vocab_size and not ((root := live_roots.get(token_id)) is not None
                                                          and self.is_live(root))
            and (boundary or self.domain.boundary_start[token_id]) and not (names & self.allowed_ids)
        ]
        blocked[ids] = True
        return blocked

    def blocked(self, state: DecodeState) -> list[np.ndarray]:
        """Token ids (int64 arrays, repeats harmless) masked after `state`, the guard's and the steering's together.

        Guard (the invariant): tokens closing a forbidden name inside themselves or with the open
        matches, and EOS when ending here would leave one linked. Steering: outside a live mention,
        the root rule; inside one, the root rule plus the mention's live continuations, minus
        (within a word) the tokens that leave the word a prefix of forbidden names only; a token
        that leaves the name index altogether ends the mention and is allowed ("JP" + "Y"), and so
        is every token holding a word boundary ("U.S" + "."): whether a name closes there is the
        guard's business. Steering that leaves no token is dropped, never the guard."""
        guard_state = state.guard
        boundary = guard_state.boundary
        # after a word boundary (a bare space piece, "v." in a case name) the mention may be over:
        # only the root rule applies there, plus the live continuations
        dead_words = state.trie_node is not None and not boundary
        guard_ids, dead_ids = self.domain.guard.blocked(guard_state, self.allowed_nodes, dead_words=dead_words)
        eos = end_violates(self.domain.name_trie, guard_state, self.allowed_nodes)  # ending here closes a forbidden name
        guard = [self._static[boundary], guard_ids, *([self.domain.eos_ids] if eos else [])]
        if state.trie_node is None:
            parts = [self._both[boundary], *guard[1:]]
        else:
            # a live continuation may be a single-token name the root rule blocks (" Ohio" in
            # "Brandenburg v. Ohio" while court:ohio is forbidden), or a word the guard finds dead
            live = self._live_continuations(state.trie_node)
            if len(dead_ids) and len(live):
                dead_ids = _without(dead_ids, live, self.domain.scratch)
            parts = [*guard, self._root_without(state.trie_node, boundary), dead_ids]
        parts = [p for p in parts if len(p)]
        vocab = self.domain.vocab_size
        if sum(len(p) for p in parts) >= vocab and _union(parts, vocab).all():
            return [p for p in guard if len(p)]   # the steering left nothing: keep the guarantee alone
        return parts

    def _root_without(self, node: int, boundary: bool) -> np.ndarray:
        key = (node, boundary)
        found = self._root_off_mention.get(key)
        if found is None:
            root = self._root_blocked[boundary]
            found = self._root_off_mention[key] = _without(root, self._live_continuations(node), self.domain.scratch)
            self.domain.account(self, arrays_bytes(found))
        return found

    def _live_continuations(self, node: int) -> np.ndarray:
        found = self._live_tokens.get(node)
        if found is None:
            found = self._live_tokens[node] = np.array(self._live_children_of(node), dtype=np.int64)
            self.domain.account(self, arrays_bytes(found))
        return found

    def mask(self, state: DecodeState) -> torch.Tensor:
        """Packed int32 [words] mask for `state`."""
        return self.entry(state).packed

    def entry(self, state: DecodeState) -> CachedMask:
        masks = self._masks
        found = masks.get(state)
        if found is not None:
            masks.move_to_end(state)
            return found
        guard = state.guard
        if state.trie_node is None and not guard.nodes and guard.carriers is None:
            found = self._plain[guard.boundary]   # nothing open, and EOS closes nothing
        else:
            found = CachedMask(self.blocked(state), self.domain.vocab_size)
        masks[state] = found
        grown = self._entry_bytes(found)
        if len(masks) > self.domain.limits.masks_per_view:
            grown -= self._entry_bytes(masks.popitem(last=False)[1])
        self.domain.account(self, grown)
        return found

    def _entry_bytes(self, mask: CachedMask) -> int:
        return MASK_SLOT_BYTES if mask is self._plain[False] or mask is self._plain[True] else mask.nbytes

    def explain(self, state: DecodeState, token_id: int, text: str) -> list[str]:
        """Entity ids that `token_id` would have completed or headed for, against the constraint."""
        name_trie = self.domain.name_trie
        found: dict[str, None] = {}
        after, groups = self.domain.advance_guard(state.guard, text)
        for group in groups:
            if self.allowed_nodes.violates(group):
                for node in group:
                    if node not in self.allowed_nodes.nodes:
                        found.update(dict.fromkeys(name_trie.entities[node]))
        if not found and after.nodes:
            # the deepest open match, if it already spells something specific (>= 2 characters)
            deepest = max(after.nodes, key=lambda n: name_trie.depth[n])
            if name_trie.depth[deepest] >= 2:
                found.update(dict.fromkeys(self._forbidden_below(deepest)))
        return list(found)[:10]

    def _forbidden_below(self, node: int, limit: int = 5, max_visits: int = 128) -> list[str]:
        """Nearest forbidden names below `node`; the search is capped, as it runs inside a decode step."""
        name_trie = self.domain.name_trie
        found: list[str] = []
        queue = deque([node])
        visits = 0
        while queue and len(found) < limit and visits < max_visits:
            visits += 1
            current = queue.popleft()
            ids = name_trie.entities.get(current, ())
            if ids and not any(i in self.allowed_ids for i in ids):
                found.extend(sorted(ids))
            queue.extend(name_trie.children(current))
        return found[:limit]

    def chosen(self, state: DecodeState) -> str | None:
        """The allowed entity the mention in progress is heading for, if any."""
        if state.trie_node is None:
            return None
        found = self.trie.nearest_entity(state.trie_node, self.is_live)
        self._count_new_nodes()
        return found
