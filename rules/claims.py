"""The per-call `Document` validators read: the text's structure, its numbers and its entity mentions.

Validators find their own kind of checkable claim (an identifier, a dose, a citation) in the document's
segments (sentences, list items, table rows, "Label: value" lines; `rules.extraction.structure`) and ask
the document for the subject a value belongs to (`antecedent`, `rules.extraction.coreference`). The
document caches what several validators share (KG mentions, the numeric view of the text, findings).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any

from knowledge_graphs.model import KnowledgeGraph
from rules.extraction.coreference import find_antecedent
from rules.extraction.numbers import NumericView, numeric_view
from rules.extraction.structure import (
    ABBREVIATIONS,
    Cell,
    Segment,
    Sentence,
    clauses,
    segment,
    split_sentences,
)
from rules.mentions import Mention, mention_finder

__all__ = ["ABBREVIATIONS", "Cell", "Document", "Segment", "Sentence", "split_sentences"]


@dataclass
class Document:
    """The text under verification plus lazily computed shared views of it."""

    text: str
    domain: str
    kg: KnowledgeGraph | None
    prompt: str | None = None
    sentences: list[Segment] = field(init=False)      # segments: sentences, list items, table rows, lines
    _mentions: dict[frozenset[str], list[Mention]] = field(init=False, default_factory=dict)
    _prompt_mentions: dict[frozenset[str], list[Mention]] = field(init=False, default_factory=dict)
    _clauses: dict[int, list[tuple[int, int]]] = field(init=False, default_factory=dict)
    cache: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.sentences = segment(self.text)

    @property
    def segments(self) -> list[Segment]:
        return self.sentences

    @property
    def view(self) -> NumericView:
        """The text with numbers in words written as digits (offsets map back with `view.span`)."""
        return numeric_view(self.text)

    def mentions(self, types: Collection[str]) -> list[Mention]:
        """KG entity mentions of the given types over the whole text (empty without a KG)."""
        key = frozenset(types)
        if key not in self._mentions:
            self._mentions[key] = mention_finder(self.kg).find(self.text, key) if self.kg is not None else []
        return self._mentions[key]

    def prompt_mentions(self, types: Collection[str]) -> list[Mention]:
        """Mentions in the question (offsets into the prompt, not the text)."""
        key = frozenset(types)
        if key not in self._prompt_mentions:
            found = mention_finder(self.kg).find(self.prompt, key) if self.kg is not None and self.prompt else []
            self._prompt_mentions[key] = [replace(m, in_prompt=True) for m in found]
        return self._prompt_mentions[key]

    def sentence_of(self, offset: int) -> Segment:
        for sentence in self.sentences:
            if sentence.start <= offset < sentence.end:
                return sentence
        before = [s for s in self.sentences if s.start <= offset]
        return before[-1] if before else Segment(0, len(self.text), self.text)

    segment_of = sentence_of

    def clauses(self, seg: Segment) -> list[tuple[int, int]]:
        if seg.start not in self._clauses:
            self._clauses[seg.start] = clauses(seg)
        return self._clauses[seg.start]

    def clause_of(self, offset: int) -> tuple[int, int]:
        seg = self.sentence_of(offset)
        return next((c for c in self.clauses(seg) if c[0] <= offset < c[1]), (seg.start, seg.end))

    def mentions_in(self, span: Segment | tuple[int, int], types: Collection[str]) -> list[Mention]:
        start, end = (span.start, span.end) if isinstance(span, Segment) else span
        return [m for m in self.mentions(types) if start <= m.start and m.end <= end]

    def antecedent(self, position: int, types: Collection[str], *,
                   accept: Callable[[Mention], bool] | None = None) -> Mention | None:
        """The mention a value at `position` is about: the nearest compatible one in its clause, then its
        row or label, then earlier clauses and segments, then the question (`find_antecedent`)."""
        return find_antecedent(self, position, types, accept=accept)
