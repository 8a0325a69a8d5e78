"""Finance validators: identifiers (ISIN, LEI, CUSIP, FIGI, SEDOL, IBAN, BIC), currency codes, country
currencies, FATF / EU list membership against dated snapshots, and regulatory thresholds against the KG."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from functools import cache
from typing import Any

import pycountry

from rules.claims import Document, Sentence
from rules.report import Evidence
from rules.units import find_money, stated_date
from rules.validators.base import Finding, kg_evidence, validator


@cache
def iso_currency_codes() -> frozenset[str]:
    return frozenset(c.alpha_3 for c in pycountry.currencies)


# -- list membership -----------------------------------------------------------------------------------
_NEGATION = re.compile(
    r"\b(not|no longer|never|removed|delisted|exited|taken off|isn't|aren't|wasn't|weren't|neither|nor)\b|n't\b", re.I
)
DEFAULT_LIST_PATTERNS: dict[str, list[str]] = {
    "list:fatf_call_for_action": [r"black\s?-?list", r"call (?:for|to) action", r"high[- ]risk jurisdictions subject"],
    "list:fatf_increased_monitoring": [r"gr[ae]y\s?-?list", r"increased monitoring"],
    "list:eu_high_risk_third_countries": [r"\bEU\b[^.;]{0,40}high[- ]risk", r"high[- ]risk third countr",
                                          r"2016/1675", r"European Commission'?s?[^.;]{0,30}list"],
}


@validator("finance.list_membership")
def list_membership(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """"X is on the FATF black list": membership in the dated snapshot that applies to the claim's date."""
    if doc.kg is None:
        return []
    patterns = {list_id: [re.compile(p, re.I) for p in ps]
                for list_id, ps in (params.get("list_patterns") or DEFAULT_LIST_PATTERNS).items()}
    stale_days = int(params.get("stale_after_days", 180))
    findings: list[Finding] = []
    for sentence in doc.sentences:
        named = [(list_id, m.start()) for list_id, ps in patterns.items() for p in ps for m in p.finditer(sentence.text)]
        named += [(m.entity_ids[0], m.start - sentence.start) for m in doc.mentions_in(sentence, ["risk_list"])]
        if not named:
            continue
        list_ids = list(dict.fromkeys(list_id for list_id, _ in sorted(named, key=lambda n: n[1])))
        countries = doc.mentions_in(sentence, ["country"])
        # the date the claim is about: the sentence's own, else the question's ("as of June 2025, is ...?")
        claimed_date = stated_date(sentence.text) or (stated_date(doc.prompt) if doc.prompt else None)
        clauses = _clauses(sentence)
        for country in countries:
            # polarity is per clause: "Kenya is on the grey list, but Germany is not"
            clause = next((c for c in clauses if c[0] <= country.start < c[1]), (sentence.start, sentence.end))
            negated = bool(_NEGATION.search(doc.text[clause[0]:clause[1]]))
            for list_id in list_ids:
                findings.append(_judge_membership(doc, country.entity_ids[0], list_id, negated, claimed_date,
                                                  (country.start, country.end), stale_days))
    return findings


_CLAUSE_BREAK = re.compile(r",?\s+(?:but|while|whereas|although|though|however|yet)\s+|;\s*", re.I)


def _clauses(sentence: Sentence) -> list[tuple[int, int]]:
    """Document-offset spans of the sentence's contrastive clauses."""
    bounds = [sentence.start]
    bounds += [sentence.start + m.start() for m in _CLAUSE_BREAK.finditer(sentence.text)]
    bounds.append(sentence.end)
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def list_snapshots(doc: Document, list_id: str) -> dict[str, set[str]]:
    """as_of date -> countries listed in that snapshot (cached per document)."""
    assert doc.kg is not None
    cache_key = f"snapshots:{list_id}"
    if cache_key not in doc.cache:
        snapshots: dict[str, set[str]] = {}
        for fact in doc.kg.facts(relation="listed_on", object=list_id):
            snapshots.setdefault(str(fact.qualifiers.get("as_of", "")), set()).add(fact.subject)
        doc.cache[cache_key] = snapshots
    return doc.cache[cache_key]


def _judge_membership(doc: Document, country_id: str, list_id: str, negated: bool, claimed: date | None,
                      span: tuple[int, int], stale_days: int) -> Finding:
    assert doc.kg is not None
    text = doc.text[span[0]:span[1]]
    snapshots = list_snapshots(doc, list_id)
    list_entity = doc.kg.entity(list_id)
    list_name = list_entity.name if list_entity else list_id
    usable = sorted(d for d in snapshots if d and (claimed is None or d <= claimed.isoformat()))
    if not usable:
        why = "no snapshot of this list" if not snapshots else f"no snapshot on or before {claimed}"
        return Finding(text, span, "list_membership", "unverifiable", 0.5,
                       [Evidence(kind="list_snapshot", description=f"{list_name}: {why}")], subject=country_id)
    as_of = usable[-1]
    listed = country_id in snapshots[as_of]
    fact = next((f for f in doc.kg.facts(country_id, "listed_on", list_id) if str(f.qualifiers.get("as_of")) == as_of), None)
    provenance = fact.provenance if fact else (list_entity.provenance if list_entity else None)
    state = "on" if listed else "not on"
    evidence = [kg_evidence(f"{country_id} is {state} {list_name} in the snapshot as of {as_of}", provenance,
                            kind="list_snapshot")]
    evidence[0].as_of = as_of
    confidence = 0.95
    if claimed is not None and (claimed - date.fromisoformat(as_of)).days > stale_days:
        evidence.append(Evidence(kind="list_snapshot", description=f"the claim refers to {claimed.isoformat()[:7]}, "
                                 f"later than the newest snapshot ({as_of}); the list may have changed"))
        confidence = 0.7
    verdict = "supported" if listed != negated else "contradicted"
    return Finding(text, span, "list_membership", verdict, confidence, evidence, subject=country_id,
                   meta={"list": list_id, "as_of": as_of})


# -- thresholds ----------------------------------------------------------------------------------------
_THRESHOLD_WORDS = re.compile(r"threshold|exceed|more than|over|above|at least|or more|report|fil(?:e|ing)|limit|"
                              r"requir|trigger|cap|ceiling|prohibit|record|declare|must", re.I)
_RANGE_JOIN = re.compile(r"^\s*(?:to|-|–|and|through)\s*$")


@validator("finance.thresholds")
def thresholds(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Monetary thresholds stated for a regulation against the KG's `threshold` facts."""
    if doc.kg is None:
        return []
    codes = set(iso_currency_codes())
    findings: list[Finding] = []
    for sentence in doc.sentences:
        regulations = doc.mentions_in(sentence, ["regulation"])
        if not regulations or not _THRESHOLD_WORDS.search(sentence.text):
            continue
        amounts = find_money(sentence.text, known_codes=codes)
        for index, money in enumerate(amounts):
            previous = amounts[index - 1] if index else None
            if previous is not None and _RANGE_JOIN.match(sentence.text[previous.end:money.start]):
                continue  # "$3,000 to $10,000": the threshold is the lower bound of the range
            start, end = sentence.start + money.start, sentence.start + money.end
            nearest = min(regulations, key=lambda m: min(abs(m.start - end), abs(m.end - start)))
            findings.append(_judge_threshold(doc, nearest.entity_ids, money.amount, money.currency,
                                             (min(start, nearest.start), max(end, nearest.end)), (start, end)))
    return findings


def _judge_threshold(doc: Document, regulation_ids: tuple[str, ...], amount: float, currency_code: str,
                     span: tuple[int, int], money_span: tuple[int, int]) -> Finding:
    assert doc.kg is not None
    text = doc.text[span[0]:span[1]]
    facts = [f for rid in regulation_ids for f in doc.kg.facts(rid, "threshold")]
    subject = regulation_ids[0]
    assertion = (subject, f"threshold:{currency_code}", amount)
    same_currency = [f for f in facts if str(f.unit).upper() == currency_code]
    matching = [f for f in same_currency if _close(float(f.value), amount)]
    if matching:
        fact = matching[0]
        return Finding(text, span, "threshold", "supported", 0.95,
                       [kg_evidence(f"{fact.subject} threshold: {fact.qualifiers.get('comparison', '')} "
                                    f"{fact.value:,.0f} {fact.unit} ({fact.qualifiers.get('measure', '')})", fact.provenance)],
                       subject=fact.subject, assertion=assertion)
    if same_currency:
        fact = same_currency[0]
        stated = doc.text[money_span[0]:money_span[1]]
        return Finding(text, span, "threshold", "contradicted", 0.95,
                       [kg_evidence(f"{fact.subject} sets {fact.qualifiers.get('comparison', '')} {fact.value:,.0f} "
                                    f"{fact.unit} ({fact.qualifiers.get('measure', '')}), not {stated}", fact.provenance)],
                       subject=fact.subject, assertion=assertion)
    why = "no threshold fact" if not facts else f"thresholds are in {', '.join(sorted({str(f.unit) for f in facts}))}"
    return Finding(text, span, "threshold", "unverifiable", 0.5,
                   [Evidence(kind="kg_fact", description=f"{subject}: {why}")], subject=subject, assertion=assertion)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)
