"""KG linking evidence for domain detection: which entities of each domain's KG a text names.

Raw alias hits are poor evidence on their own: the KGs hold surface forms that are ordinary English
("water" and "iron" are drugs, "How." and "Wall." are reporters, "won" is a currency). So a hit counts
only when its surface form is rare in English (wordfreq Zipf frequency below `COMMON_WORD_ZIPF`), and a
reporter counts only inside a citation shape ("410 U.S. 113"). What remains is counted per entity-type
group, as features for the classifier (`knowledge_graphs.detection.classifier`), and kept as evidence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from wordfreq import zipf_frequency

from knowledge_graphs.linking import EntityLinker, get_linker
from knowledge_graphs.model import KnowledgeGraph

# Zipf 4 = once per 10^4... words ("iron" 4.7, "oxygen" 4.3, "hydrogen" 4.0); drug names sit below it
# ("insulin" 3.8, "aspirin" 3.3, "metformin" 2.6). Forms at or above it are ordinary words.
COMMON_WORD_ZIPF = 4.0

# Entity types grouped into the features the classifier weighs (one count per group).
TYPE_GROUPS: dict[str, dict[str, str]] = {
    "medical": {"drug": "drug", "drug_class": "drug", "condition": "condition", "icd10cm_code": "condition"},
    "finance": {"currency": "currency", "country": "country", "regulation": "regulation",
                "identifier_type": "regulation", "risk_list": "regulation"},
    "legal": {"case": "case", "statute": "statute", "fabricated_citation": "case", "court": "court",
              "reporter": "citation"},
}
FEATURES: tuple[str, ...] = tuple(
    f"kg.{domain}.{group}" for domain, groups in TYPE_GROUPS.items() for group in dict.fromkeys(groups.values()))

# A reporter abbreviation counts only between a volume and a page: "384 U.S. 436", "5 F.4th 12".
_CITATION_AROUND = re.compile(r"\d\s*$"), re.compile(r"^\.?\s*\d")   # the linked form stops before a final "."
# ICD-10-CM code shape (letter, two digits, optional dot and up to four characters): "E11.9", "I10".
_ICD_CODE = re.compile(r"^[A-TV-Z]\d[0-9A-Z](?:\.[0-9A-Z]{1,4})?$")


@dataclass(frozen=True, slots=True)
class KgHit:
    domain: str
    group: str
    entity_id: str
    text: str


@lru_cache(maxsize=65536)
def is_common_word(form: str) -> bool:
    """True when `form` is ordinary English (every word of it frequent, or the phrase as a whole)."""
    return zipf_frequency(form, "en") >= COMMON_WORD_ZIPF


class KgEvidence:
    """Links a text against every domain KG and keeps the hits that are evidence of the domain."""

    def __init__(self, kgs: Mapping[str, KnowledgeGraph]) -> None:
        self.linkers: dict[str, EntityLinker] = {
            domain: get_linker(kg) for domain, kg in kgs.items() if domain in TYPE_GROUPS}

    @staticmethod
    def warm_up() -> None:
        """Load wordfreq's English list now (a gzip read of tens of ms, longer under load): otherwise the first
        text that names a KG entity pays for it inside its request."""
        zipf_frequency("warm", "en")

    def hits(self, text: str) -> list[KgHit]:
        found: dict[tuple[str, str], KgHit] = {}
        for domain, linker in self.linkers.items():
            groups = TYPE_GROUPS[domain]
            for mention in linker.link(text):
                group = groups.get(mention.entity_type)
                if group is None or not self._is_evidence(text, mention.start, mention.end, group, mention.text):
                    continue
                found.setdefault((domain, mention.entity_id), KgHit(domain, group, mention.entity_id, mention.text))
        return list(found.values())

    @staticmethod
    def _is_evidence(text: str, start: int, end: int, group: str, surface: str) -> bool:
        if group == "citation":
            before, after = _CITATION_AROUND
            return bool(before.search(text[max(0, start - 4):start]) and after.search(text[end:end + 4]))
        if _ICD_CODE.match(surface):
            return True
        return not is_common_word(surface)


def feature_counts(hits: list[KgHit]) -> dict[str, int]:
    """Distinct evidence entities per feature name (absent features are 0)."""
    counts = dict.fromkeys(FEATURES, 0)
    for hit in hits:
        counts[f"kg.{hit.domain}.{hit.group}"] += 1
    return counts
