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
from wordfreq import zipf_frequency

from knowledge_graphs import snapshot
from knowledge_graphs.model import Entity, KnowledgeGraph, normalise_alias

# Surface forms this short are mostly noise ("a", "in", "ct") unless written in capitals in the text.
MIN_FORM_LENGTH = 3
ACRONYM_LENGTH = 5
# Package-derived forms of these types that are common English words ("more", "water", "iron", "all clear":
# names in the drug dictionary) are not linked: in a chatbot answer they are words, not entities, and
# linking them displaces the real subject. Common = wordfreq Zipf frequency >= COMMON_WORD_ZIPF (drug names
# sit below 3.5: metformin 2.6, aspirin 3.3, insulin 3.8; ordinary words above 4: iron 4.7, more 6.4).
# Curated entities keep every form: a curator chose them.
COMMON_WORD_TYPES = frozenset({"drug"})
COMMON_WORD_ZIPF = 3.9

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
    in_prompt: bool = False        # found in the question: offsets are into the prompt, not the text


_ALNUM_RUN = re.compile(r"[^\W_]+")


def normalise_with_offsets(text: str) -> tuple[str, list[int]]:
    """The `normalise_alias` form of `text` padded with spaces, plus a map normalised index -> original index."""
    folded = text.casefold()
    if len(folded) != len(text):
        return _normalise_slowly(text)
    # runs of letters and digits, one space between runs (and around the whole): the fast path, in C
    chars: list[str] = [" "]
    offsets: list[int] = [0]
    for match in _ALNUM_RUN.finditer(folded):
        chars.append(match.group(0))
        offsets.extend(range(match.start(), match.end()))
        chars.append(" ")
        offsets.append(match.end())
    if len(chars) == 1:
        return " ", [0]
    return "".join(chars), offsets


def _normalise_slowly(text: str) -> tuple[str, list[int]]:
    """Character by character, for text whose case folding changes its length ("Straße")."""
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
        # short names ("Gideon", "Twombly") match only when written with an initial capital
        self.capitalized: set[str] = set()
        lower_ok: set[str] = set()
        for entity in kg.entities():
            filter_common = entity.type in COMMON_WORD_TYPES and _package_derived(entity)
            for surface in entity.surface_forms:
                form = normalise_alias(surface)
                if len(form) < MIN_FORM_LENGTH and not form.isdigit():
                    continue
                if filter_common and is_common_word(form):
                    continue
                if surface in (entity.attributes.get("short_names") or ()):
                    self.capitalized.add(form)
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
        self._recent: dict[str, list[tuple[int, int, dict[str, list[str]]]]] = {}   # a few texts, oldest first

    def _raw_hits(self, text: str) -> list[tuple[int, int, dict[str, list[str]]]]:
        """Every automaton hit in `text` (all types), scanned once per text: validators ask for different
        entity types of the same answer, and the scan is the costly part."""
        if text in self._recent:
            return self._recent[text]
        normalised, offsets = normalise_with_offsets(text)
        code_spans = statute_code_spans(text)
        hits: list[tuple[int, int, dict[str, list[str]]]] = []
        for end_index, (form, by_type) in self.automaton.iter(normalised):
            # the key is " form ": its first letter sits at end_index - len(form), its last at end_index - 1
            start, end = offsets[end_index - len(form)], offsets[end_index - 1] + 1
            if form in self.caps_only and not text[start:end].isupper():
                continue
            if form in self.capitalized and not text[start].isupper():
                continue
            if any(s <= start and end <= e for s, e in code_spans):
                continue
            hits.append((start, end, by_type))
        if len(self._recent) >= 8:
            self._recent.pop(next(iter(self._recent)))
        self._recent[text] = hits
        return hits

    def find(self, text: str, types: Collection[str]) -> list[Mention]:
        if self._empty:
            return []
        wanted = frozenset(types)
        hits: list[tuple[int, int, dict[str, list[str]]]] = []
        for start, end, by_type in self._raw_hits(text):
            kept = {t: ids for t, ids in by_type.items() if t in wanted}
            if kept:
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


def _package_derived(entity: Entity) -> bool:
    """Entities built from an installed package's data name `package==version` as their source."""
    return entity.provenance is not None and "==" in entity.provenance.source


@lru_cache(maxsize=65536)
def is_common_word(form: str) -> bool:
    """A normalised form that is an ordinary English word or phrase (wordfreq, offline data)."""
    return zipf_frequency(form, "en") >= COMMON_WORD_ZIPF
_RULES_CODE = Path(__file__).parent   # what may shape a finder: read back only while the rules are the same


@lru_cache(maxsize=8)
def _finder(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> MentionFinder:
    # read back from disk when the KG came from a snapshot: building one costs seconds for the medical KG
    return snapshot.derived(kg, "mentions", lambda: MentionFinder(kg), kind=MentionFinder, code=[_RULES_CODE])


def mention_finder(kg: KnowledgeGraph) -> MentionFinder:
    """The cached finder for this KG (built once per KG object and version)."""
    return _finder(id(kg), kg.version, kg)
