"""Entity linking: exact alias matching with an Aho-Corasick automaton, plus an embedding fallback.

Exact pass: the text is normalised exactly like `normalise_alias` (casefold, every non-alphanumeric
character becomes a space, runs of spaces collapse) while keeping, for every normalised character,
the index of the original character it came from, so mention spans point into the original text.
The automaton holds every normalised surface form padded with one space on each side; the
normalised text is padded the same way, so a hit always starts and ends on a word boundary
("aspirin" is found in "non-aspirin," but not in "aspirinate"). Overlapping hits are resolved
longest first, then leftmost.

Fallback pass (optional): word n-grams the exact pass left uncovered and that look like names are
scored against the KG's surface forms with MiniLM (see `knowledge_graphs.embedding`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import ahocorasick

from knowledge_graphs import snapshot
from knowledge_graphs.model import KnowledgeGraph, normalise_alias

# MiniLM cosine between a typo and its word is ~0.6-0.95 (ibuprofin 0.61, metfromin 0.72); unrelated
# words score ~0.1-0.2 and mostly never pass the trigram prefilter in the first place.
DEFAULT_FALLBACK_THRESHOLD = 0.6
# Surface forms shorter than this (after normalisation) are neither linked nor constrained: the KG
# holds aliases such as "he" (Helium) or ICD chapter numbers ("2", "10") that are ordinary words.
MIN_FORM_CHARS = 3


@dataclass(frozen=True, slots=True)
class EntityMention:
    start: int                 # offset into the original text
    end: int                   # exclusive
    text: str                  # original_text[start:end]
    entity_id: str             # the preferred reading (an entity whose canonical name matches first)
    entity_type: str
    score: float               # 1.0 for exact matches, cosine similarity for embedding matches
    method: Literal["exact", "embedding"]
    # Every entity id that carries this surface form (ambiguous aliases), preferred reading first.
    candidate_ids: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class NormalisedText:
    text: str                  # " " + normalised + " "
    offsets: tuple[int, ...]   # offsets[i] = original index of text[i] (padding spaces map to -1)


def normalise_with_offsets(original: str) -> NormalisedText:
    """Normalise like `normalise_alias`, keeping a map from normalised positions to original ones."""
    chars: list[str] = [" "]
    offsets: list[int] = [-1]
    for index, ch in enumerate(original):
        for folded in ch.casefold():  # casefold may expand one character ("ß" -> "ss")
            if folded.isalnum():
                chars.append(folded)
                offsets.append(index)
            elif chars[-1] != " ":
                chars.append(" ")
                offsets.append(index)
    if chars[-1] != " ":
        chars.append(" ")
        offsets.append(-1)
    return NormalisedText("".join(chars), tuple(offsets))


class EntityLinker:
    """Finds KG entity mentions in text. Build through `get_linker` to share one per KG version."""

    def __init__(
        self,
        kg: KnowledgeGraph,
        *,
        types: Collection[str] | None = None,
        fallback: bool = False,
        fallback_threshold: float = DEFAULT_FALLBACK_THRESHOLD,
        min_chars: int = MIN_FORM_CHARS,
    ) -> None:
        """`min_chars`: ignore surface forms shorter than this after normalisation (the KG constraint
        uses the same MIN_FORM_CHARS, so a linker built with the defaults sees what it governs)."""
        self.kg = kg
        self.types = frozenset(types) if types is not None else None
        self.fallback = fallback
        self.fallback_threshold = fallback_threshold
        self._automaton = ahocorasick.Automaton()
        # normalised form -> entity ids of the wanted types, preferred reading first
        self.forms: dict[str, tuple[str, ...]] = {}
        for form, ids in kg.aliases().items():
            wanted = [i for i in ids if self._wanted(i)]
            if len(form) < max(min_chars, 1) or not wanted:
                continue
            wanted.sort(key=lambda i: self._preference(i, form))
            self.forms[form] = tuple(wanted)
            self._automaton.add_word(f" {form} ", form)
        if self.forms:
            self._automaton.make_automaton()
        self._fallback_index = None

    def _wanted(self, entity_id: str) -> bool:
        entity = self.kg.entity(entity_id)
        return entity is not None and (self.types is None or entity.type in self.types)

    def _preference(self, entity_id: str, form: str) -> int:
        # An entity whose canonical name is this form beats one that only has it as an alias.
        entity = self.kg.entity(entity_id)
        return 0 if entity is not None and normalise_alias(entity.name) == form else 1

    def link(self, text: str) -> list[EntityMention]:
        """Mentions in `text`, ordered by start offset, non-overlapping."""
        normalised = normalise_with_offsets(text)
        mentions = self._exact(text, normalised)
        if self.fallback:
            mentions.extend(self._embedding_pass(text, mentions))
            mentions.sort(key=lambda m: m.start)
        return mentions

    def _exact(self, text: str, normalised: NormalisedText) -> list[EntityMention]:
        if not self.forms:
            return []
        hits: list[tuple[int, int, str]] = []  # (start, end) in normalised text, without the padding spaces
        for last, form in self._automaton.iter(normalised.text):
            start = last - len(form)  # `last` is the index of the closing space
            hits.append((start, last, form))
        # longest first, then leftmost; keep the hits that do not overlap a kept one
        hits.sort(key=lambda h: (-(h[1] - h[0]), h[0]))
        taken: list[tuple[int, int]] = []
        mentions: list[EntityMention] = []
        for start, end, form in hits:
            if any(start < t_end and t_start < end for t_start, t_end in taken):
                continue
            taken.append((start, end))
            original_start = normalised.offsets[start]
            original_end = normalised.offsets[end - 1] + 1
            ids = self.forms[form]
            entity = self.kg.entity(ids[0])
            assert entity is not None
            mentions.append(EntityMention(
                original_start, original_end, text[original_start:original_end], ids[0], entity.type,
                1.0, "exact", ids,
            ))
        mentions.sort(key=lambda m: m.start)
        return mentions

    def _embedding_pass(self, text: str, exact: list[EntityMention]) -> list[EntityMention]:
        from knowledge_graphs.embedding import FallbackIndex, candidate_spans

        if self._fallback_index is None:
            self._fallback_index = FallbackIndex(self.forms)
        covered = [(m.start, m.end) for m in exact]
        spans = list(candidate_spans(text, covered))
        scored = [
            (match[1], start, end, match[0])
            for (start, end), match in zip(spans, self._fallback_index.best_matches([text[a:b] for a, b in spans]), strict=True)
            if match is not None and match[1] >= self.fallback_threshold
        ]
        # best score first; a span overlapping an already chosen one is dropped
        scored.sort(key=lambda s: (-s[0], s[2] - s[1]))
        found: list[EntityMention] = []
        for score, start, end, form in scored:
            if any(start < c_end and c_start < end for c_start, c_end in covered):
                continue
            ids = self.forms[form]
            entity = self.kg.entity(ids[0])
            assert entity is not None
            found.append(EntityMention(start, end, text[start:end], ids[0], entity.type, score, "embedding", ids))
            covered.append((start, end))
        return found


@dataclass(frozen=True, slots=True)
class _KGRef:
    """Compares equal to any other: the cache key is (version, types, ...), not the object identity."""

    kg: KnowledgeGraph = field(compare=False, hash=False)


@lru_cache(maxsize=8)   # each KG version is a new key; an entry holds its KG and automaton
def _cached_linker(
    kg_version: str, types: frozenset[str] | None, fallback: bool, min_chars: int, kg_ref: _KGRef,
) -> EntityLinker:
    kg = kg_ref.kg
    variant = hashlib.sha256(repr((sorted(types) if types is not None else None, fallback, min_chars)).encode())
    # read back from disk when the KG came from a snapshot (the automaton is most of a start's linking cost)
    return snapshot.derived(kg, f"linker.{variant.hexdigest()[:12]}", kind=EntityLinker,
                            build=lambda: EntityLinker(kg, types=types, fallback=fallback, min_chars=min_chars))


def get_linker(
    kg: KnowledgeGraph, types: Collection[str] | None = None, *, fallback: bool = False,
    min_chars: int = MIN_FORM_CHARS,
) -> EntityLinker:
    """A linker shared per (kg.version, types, fallback, min_chars): the automaton is built once."""
    key_types = frozenset(types) if types is not None else None
    return _cached_linker(kg.version, key_types, fallback, min_chars, _KGRef(kg))
