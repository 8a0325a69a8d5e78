"""Finance validators: identifiers (ISIN, LEI, CUSIP, FIGI, SEDOL, IBAN, BIC), currency codes, country
currencies, FATF / EU list membership against dated snapshots, and regulatory thresholds against the KG."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import pycountry

from rules.claims import Document
from rules.report import Evidence
from rules.units import find_money
from rules.validators.base import Finding, kg_evidence, validator


@cache
def iso_currency_codes() -> frozenset[str]:
    return frozenset(c.alpha_3 for c in pycountry.currencies)


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
