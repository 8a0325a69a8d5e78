"""Token tries over the tokenizer's encodings of entity surface forms (GENRE-style prefix trees).

Every surface form is encoded in its word-boundary variants (as written after a space and with no
space before it) and case variants (as written, lowercase, Capitalised). Leading pieces without a
letter or digit (a bare space piece) are dropped, so a mention starts at its first word token.

A full trie over every form of a large KG (the medical one: ~100k forms, ~600k encodings) costs
gigabytes as Python objects, and steering only needs two things from the forbidden side:
- `EncodingIndex` (all entities, built once): which tokens start an encoding, which second tokens
  follow each first token, and which single tokens are a complete name on their own;
- `TokenTrie` (one allowed set, built on demand): the trie over the allowed entities' encodings, its nodes
  made as decoding reaches them.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence

from tokenizers import Tokenizer

ROOT = 0
_BATCH = 4096


def surface_variants(form: str) -> list[str]:
    """The texts a model may write for `form`: case variants, each without and with a leading space."""
    cased = dict.fromkeys([form, form.lower(), form[:1].upper() + form[1:]])
    return [text for variant in cased for text in (variant, " " + variant)]


def encode_forms(
    tokenizer: Tokenizer, forms_by_entity: Mapping[str, Iterable[str]], has_word_chars: Sequence[bool],
) -> Iterable[tuple[str, list[int]]]:
    """(entity id, token ids) for every variant of every form, leading non-word pieces dropped.

    `has_word_chars[t]`: token t's text holds a letter or digit."""
    owners: dict[str, list[str]] = {}     # text -> the entities it is a variant of (one encoding per text)
    for entity_id, forms in forms_by_entity.items():
        for form in forms:
            for text in surface_variants(form):
                owners.setdefault(text, []).append(entity_id)
    texts = list(owners)
    for chunk in range(0, len(texts), _BATCH):
        # in chunks: an Encoding object is heavy, and a large KG has ~600k variants
        batch = texts[chunk : chunk + _BATCH]
        encodings = tokenizer.encode_batch_fast(batch, add_special_tokens=False)  # no offsets
        for text, encoding in zip(batch, encodings, strict=True):
            ids = encoding.ids
            start = 0
            while start < len(ids) and not (ids[start] < len(has_word_chars) and has_word_chars[ids[start]]):
                start += 1
            if start < len(ids):
                for entity_id in owners[text]:
                    yield entity_id, ids[start:]


class EncodingIndex:
    """First and second tokens of every encoding, and single-token names, for all constrained entities."""

    def __init__(self, encodings: Iterable[tuple[str, list[int]]]) -> None:
        self.second_tokens: dict[int, set[int]] = {}     # first token -> tokens that follow it in some encoding
        self.single_token_names: dict[int, set[str]] = {}  # token -> entities it spells completely
        for entity_id, ids in encodings:
            following = self.second_tokens.setdefault(ids[0], set())
            if len(ids) == 1:
                self.single_token_names.setdefault(ids[0], set()).add(entity_id)
            else:
                following.add(ids[1])

    def starts_mention(self, token_id: int) -> bool:
        return token_id in self.second_tokens


class TokenTrie:
    """Trie over the encodings of one allowed set; terminal nodes carry their entity ids.

    Nodes are made as decoding first reaches them (`children_of`), not when the set's view is built: a view is
    built for every first-seen allowed set, on the engine core's preparing threads, in pure Python that holds the
    GIL its step loop needs, and inserting every encoding (hundreds for a medical set, a dict per node) was 45% of
    a build, while decoding visits a handful of nodes. The encodings are kept sorted, so a node is a run of them
    sharing its path, and its children are the runs that share one more token (found by bisection)."""

    def __init__(self, encodings: Iterable[tuple[str, list[int]]] = ()) -> None:
        # (token ids, entity id), sorted: a node's encodings are one run, those ending at the node first
        self._encodings = sorted((tuple(ids), entity_id) for entity_id, ids in encodings if ids)
        self.parent: list[int] = [-1]
        self.token: list[int] = [-1]                       # token id on the edge into each node
        self.depth: list[int] = [0]                        # tokens from the root
        self.entities: dict[int, set[str]] = {}            # terminal node -> entity ids (of the nodes made so far)
        self._runs: list[tuple[int, int]] = [(0, len(self._encodings))]   # node -> its run in `_encodings`
        self._children: list[dict[int, int] | None] = [None]             # None: not made yet
        self._lock = threading.Lock()   # the step thread and the preparing threads may both reach a new node

    def __len__(self) -> int:
        """Nodes made so far."""
        return len(self.parent)

    @property
    def encoding_count(self) -> int:
        return len(self._encodings)

    def children_of(self, node: int) -> dict[int, int]:
        """token id -> child node, made on first use."""
        found = self._children[node]
        if found is None:
            with self._lock:
                found = self._children[node]
                if found is None:
                    found = self._children[node] = self._make_children(node)
        return found

    def step(self, node: int, token_id: int) -> int | None:
        return self.children_of(node).get(token_id)

    def _make_children(self, node: int) -> dict[int, int]:
        encodings, depth = self._encodings, self.depth[node]
        start, end = self._runs[node]
        while start < end and len(encodings[start][0]) == depth:   # these end at `node`
            start += 1
        children: dict[int, int] = {}
        while start < end:
            ids = encodings[start][0]
            token_id = ids[depth]
            # the first encoding past this token: (path + (token + 1,),) sorts after every (path + (token, ...), _)
            stop = bisect_left(encodings, (ids[:depth] + (token_id + 1,),), start, end)
            child = children[token_id] = len(self.parent)
            self.parent.append(node)
            self.token.append(token_id)
            self.depth.append(depth + 1)
            self._runs.append((start, stop))
            self._children.append(None)
            ending = start
            while ending < stop and len(encodings[ending][0]) == depth + 1:
                self.entities.setdefault(child, set()).add(encodings[ending][1])
                ending += 1
            start = stop
        return children

    def nearest_entity(self, node: int, usable: Callable[[int], bool] | None = None) -> str | None:
        """The entity closest below `node` (breadth first, smallest id on ties) through nodes `usable` accepts
        (None: any), or None."""
        level = [node]
        while level:
            hits = [entity for current in level for entity in self.entities.get(current, ())]
            if hits:
                return min(hits)
            level = [child for current in level for child in self.children_of(current).values()
                     if usable is None or usable(child)]
        return None
