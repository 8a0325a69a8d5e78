"""Token tries over the tokenizer's encodings of entity surface forms (GENRE-style prefix trees).

Every surface form is encoded in its word-boundary variants (as written after a space and with no
space before it) and case variants (as written, lowercase, Capitalised). Leading pieces without a
letter or digit (a bare space piece) are dropped, so a mention starts at its first word token.

A full trie over every form of a large KG (the medical one: ~100k forms, ~600k encodings) costs
gigabytes as Python objects, and steering only needs two things from the forbidden side:
- `EncodingIndex` (all entities, built once): which tokens start an encoding, which second tokens
  follow each first token, and which single tokens are a complete name on their own;
- `TokenTrie` (one allowed set, built on demand): the full trie over the allowed entities' encodings.
"""

from __future__ import annotations

from collections import deque
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
    """Trie over the encodings of one allowed set; terminal nodes carry their entity ids."""

    def __init__(self, encodings: Iterable[tuple[str, list[int]]] = ()) -> None:
        self.children: list[dict[int, int]] = [{}]
        self.parent: list[int] = [-1]
        self.token: list[int] = [-1]                       # token id on the edge into each node
        self.depth: list[int] = [0]                        # tokens from the root
        self.entities: dict[int, set[str]] = {}            # terminal node -> entity ids
        for entity_id, ids in encodings:
            self.insert(ids, entity_id)

    def insert(self, token_ids: Sequence[int], entity_id: str) -> None:
        if not token_ids:
            return
        node = ROOT
        for token_id in token_ids:
            nxt = self.children[node].get(token_id)
            if nxt is None:
                nxt = len(self.children)
                self.children.append({})
                self.parent.append(node)
                self.token.append(token_id)
                self.depth.append(self.depth[node] + 1)
                self.children[node][token_id] = nxt
            node = nxt
        self.entities.setdefault(node, set()).add(entity_id)

    def __len__(self) -> int:
        return len(self.children)

    def step(self, node: int, token_id: int) -> int | None:
        return self.children[node].get(token_id)

    def nearest_entity(self, node: int, usable: Callable[[int], bool] | None = None) -> str | None:
        """The entity closest below `node` (breadth first, smallest id on ties) through nodes `usable` accepts
        (None: any), or None."""
        queue = deque([node])
        while queue:
            current = queue.popleft()
            hits = sorted(self.entities.get(current, ()))
            if hits:
                return hits[0]
            queue.extend(c for c in self.children[current].values() if usable is None or usable(c))
        return None
