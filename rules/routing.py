"""Which other domains an answer touches, so that each claim is judged by the checkers of its own domain.

A legal memo that states a drug's boxed warning, a finance answer that cites a statute, a medical answer that cites
the HIPAA rule: the request names one domain, the answer spans several (issue 48). `touched_domains(text, domain)`
names the other domains whose checkable material the text holds, by cues cheap enough to run on every answer:
citations and statute shapes for legal, doses and drug-label words for medical, amounts, identifiers and financial
regulators for finance. A cue only opens the door: that domain's validators still need their own KG mentions to make
a claim, so a stray "$" in a medical answer costs a pass and claims nothing.
"""

from __future__ import annotations

import re

_CUES: dict[str, re.Pattern[str]] = {
    "legal": re.compile(
        r"\bU\.\s?S\.\s?C\.|\bC\.\s?F\.\s?R\.|\bCFR\b|§|\b\d+\s+(?:U\.\s?S\.|S\.\s?Ct\.|F\.\s?(?:\d[a-z]{1,2}|Supp)|L\.\s?Ed)"
        r"|\bv\.\s+[A-Z]|\bFed\.\s?R\.|\bFederal Rules? of\b|\bAmendment\b|\[\d{4}\]\s+[A-Z]{2,5}\b|\bRegulation \(EU\)"
        r"|\bDirective (?:\(EU\) )?\d|\bGDPR\b|\bHIPAA\b|\bstatute\b|\bAct of \d{4}\b|\bcourt\b|\bruling\b",
        re.I),
    "medical": re.compile(
        r"\b\d+(?:\.\d+)?\s?(?:mg|mcg|µg|mL|milligrams?|micrograms?)\b|\bdos(?:e|es|ing|age)\b|\bboxed warning\b"
        r"|\bcontraindicat|\binteract|\bFDA\b|\bdrugs?\b|\bmedications?\b|\breversal agent\b|\bantidote\b|\bICD-10"
        r"|\btablets?\b|\bprescri", re.I),
    "finance": re.compile(
        r"[$€£]\s?\d|\b\d[\d,.]*\s?(?:USD|EUR|GBP|dollars|euros)\b|\b(?:ISIN|IBAN|LEI|CUSIP|SEDOL|BIC|SWIFT|CTR|SAR|FBAR"
        r"|FinCEN|FATF|OFAC|SEC|FINRA|FDIC|SIPC|HSA|IRA|NYSE|Nasdaq|Basel|AML|KYC)\b|401\(k\)|\bForm \d|\bticker\b"
        r"|\bcurrency\b|\bsanction"),
}


def touched_domains(text: str, domain: str) -> tuple[str, ...]:
    """The domains other than `domain` whose cues the text holds, in a fixed order."""
    return tuple(other for other, cue in _CUES.items() if other != domain and cue.search(text))
