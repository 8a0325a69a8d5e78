"""KG entity mentions in text: an Aho-Corasick automaton over the KG's normalised surface forms.

Built once per KG version and cached, so per-call cost is one linear scan. Matching runs on
the same normalisation as `KnowledgeGraph.lookup` (casefold, punctuation -> space) and maps every hit back
to character offsets in the original text. Longest match wins; overlapping shorter hits are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import ahocorasick

from knowledge_graphs import snapshot
from knowledge_graphs.model import KnowledgeGraph, normalise_alias

# Surface forms this short are mostly noise ("a", "in", "ct") unless written in capitals in the text.
MIN_FORM_LENGTH = 3
ACRONYM_LENGTH = 5

# Statute-code tokens: "U.S.C.", "U.S.C.A.", "U.S.C.S.", "U.S. Code", "United States Code". A mention lying
# wholly inside one ("U.S" of "26 U.S.C. 6050I") is part of a citation, not a reference to a country; a
# longer mention that covers the whole citation (a KG regulation "26 U.S.C. 6050I") is kept.
STATUTE_CODE = re.compile(
    r"\bU\.?\s?S\.?\s?C\.?(?:\s?[AS]\.?)?(?=[\s,;:)\]§]|$)|\b(?:U\.?\s?S\.?|United\s+States)\s+Code\b")


def statute_code_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in STATUTE_CODE.finditer(text)]


@dataclass(frozen=True, slots=True)
class Mention:
    start: int
    end: int
    text: str
    entity_ids: tuple[str, ...]
    entity_type: str


def normalise_with_offsets(text: str) -> tuple[str, list[int]]:
    """The `normalise_alias` form of `text` padded with spaces, plus a map normalised index -> original index."""
    chars: list[str] = [" "]
    offsets: list[int] = [0]
    previous_space = True
    for index, ch in enumerate(text):
        folded = ch.casefold()
        if len(folded) == 1 and folded.isalnum():
            chars.append(folded)
            offsets.append(index)
            previous_space = False
        elif not previous_space:
            chars.append(" ")
            offsets.append(index)
            previous_space = True
    if not previous_space:
        chars.append(" ")
        offsets.append(len(text))
    return "".join(chars), offsets


class MentionFinder:
    """One automaton over every surface form of every entity of a KG; `find` filters by entity type before
    the longest-match pass, so a longer form of an unwanted type never hides a wanted one."""

    def __init__(self, kg: KnowledgeGraph):
        self.kg = kg
        self.automaton = ahocorasick.Automaton()
        forms: dict[str, dict[str, list[str]]] = {}   # normalised form -> type -> ids
        # Acronym-only forms ("AND" = Andorra, "CAN" = Canada, "CTR") match only when written in capitals.
        self.caps_only: set[str] = set()
        lower_ok: set[str] = set()
        for entity in kg.entities():
            for surface in entity.surface_forms:
                form = normalise_alias(surface)
                if len(form) < MIN_FORM_LENGTH and not form.isdigit():
                    continue
                ids = forms.setdefault(form, {}).setdefault(entity.type, [])
                if entity.id not in ids:
                    ids.append(entity.id)
                if len(form) <= ACRONYM_LENGTH and surface.isupper():
                    self.caps_only.add(form)
                else:
                    lower_ok.add(form)
        self.caps_only -= lower_ok
        for form, by_type in forms.items():
            self.automaton.add_word(f" {form} ", (form, by_type))
        if forms:
            self.automaton.make_automaton()
        self._empty = not forms

    def find(self, text: str, types: Collection[str]) -> list[Mention]:
        if self._empty:
            return []
        wanted = frozenset(types)
        normalised, offsets = normalise_with_offsets(text)
        code_spans = statute_code_spans(text)
        hits: list[tuple[int, int, dict[str, list[str]]]] = []
        for end_index, (form, by_type) in self.automaton.iter(normalised):
            kept = {t: ids for t, ids in by_type.items() if t in wanted}
            if not kept:
                continue
            # the key is " form ": its first letter sits at end_index - len(form), its last at end_index - 1
            start, end = offsets[end_index - len(form)], offsets[end_index - 1] + 1
            if form in self.caps_only and not text[start:end].isupper():
                continue
            if any(s <= start and end <= e for s, e in code_spans):
                continue
            hits.append((start, end, kept))
        hits.sort(key=lambda h: (h[0], -(h[1] - h[0])))
        mentions: list[Mention] = []
        taken_until = -1
        for start, end, by_type in hits:
            if start < taken_until:
                continue
            for entity_type, ids in by_type.items():
                mentions.append(Mention(start, end, text[start:end], tuple(ids), entity_type))
            taken_until = end
        return mentions


_RULES_CODE = Path(__file__).parent   # what may shape a finder: read back only while the rules are the same


@lru_cache(maxsize=8)
def _finder(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> MentionFinder:
    # read back from disk when the KG came from a snapshot: building one costs seconds for the medical KG
    return snapshot.derived(kg, "mentions", lambda: MentionFinder(kg), kind=MentionFinder, code=[_RULES_CODE])


def mention_finder(kg: KnowledgeGraph) -> MentionFinder:
    """The cached finder for this KG (built once per KG object and version)."""
    return _finder(id(kg), kg.version, kg)
