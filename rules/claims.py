"""Claim extraction primitives: sentences with character spans, and the per-call `Document` validators read.

A validator finds its own kind of checkable claim (an identifier, a dose, a citation) inside these
sentences; the document caches what several validators share (KG mentions, money amounts, dates).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from knowledge_graphs.model import KnowledgeGraph
from rules.mentions import Mention, mention_finder

# Tokens after which a period does not end a sentence (legal and medical writing is full of them).
ABBREVIATIONS = frozenset(
    """v vs u.s e.g i.e etc inc co corp ltd no nos cir supp app fed r civ p evid crim stat dr mr mrs ms st
    jr sr art sec ch cl pl ed eds rev cal n.y s.d.n.y d.d.c f l so s.ct ct pub reg approx al
    jan feb mar apr jun jul aug sep sept oct nov dec fig vol pp u.s.c c.f.r""".split()
)
_BOUNDARY = re.compile(r"[.!?]+[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


@dataclass(frozen=True, slots=True)
class Sentence:
    start: int
    end: int
    text: str


def split_sentences(text: str) -> list[Sentence]:
    """Split on sentence-final punctuation, but not after abbreviations, initials or citation tokens."""
    sentences: list[Sentence] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        before = text[start:match.start()].rsplit(None, 1)
        last_token = before[-1].strip("\"'([") if before else ""
        bare = last_token.casefold()
        if bare in ABBREVIATIONS or re.fullmatch(r"[A-Z]|([A-Za-z]+\.)+[A-Za-z]*|§+", last_token):
            continue  # "v." / "U.S." / "F.3d." / "J." -- an abbreviation, keep going
        _append(sentences, text, start, match.start() + len(match.group(0).rstrip()))
        start = match.end()
    _append(sentences, text, start, len(text))
    return sentences


def _append(sentences: list[Sentence], text: str, start: int, end: int) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        sentences.append(Sentence(start, end, text[start:end]))


@dataclass
class Document:
    """The text under verification plus lazily computed shared views of it."""

    text: str
    domain: str
    kg: KnowledgeGraph | None
    prompt: str | None = None
    sentences: list[Sentence] = field(init=False)
    _mentions: dict[frozenset[str], list[Mention]] = field(init=False, default_factory=dict)
    cache: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.sentences = split_sentences(self.text)

    def mentions(self, types: Collection[str]) -> list[Mention]:
        """KG entity mentions of the given types over the whole text (empty without a KG)."""
        key = frozenset(types)
        if key not in self._mentions:
            self._mentions[key] = mention_finder(self.kg).find(self.text, key) if self.kg is not None else []
        return self._mentions[key]

    def sentence_of(self, offset: int) -> Sentence:
        for sentence in self.sentences:
            if sentence.start <= offset < sentence.end:
                return sentence
        return Sentence(0, len(self.text), self.text)

    def mentions_in(self, sentence: Sentence, types: Collection[str]) -> list[Mention]:
        return [m for m in self.mentions(types) if sentence.start <= m.start and m.end <= sentence.end]
