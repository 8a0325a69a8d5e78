"""`medical.approval`: "approved by the FDA in December 1996", "FDA approval in nineteen ninety-one", "first
approved on 2012-12-28" against the drug's original US approval (`first_approved`, curated from Drugs@FDA in
`knowledge_graphs/data/medical/approvals.yaml`).

The date is paired with the drug by the nearest-antecedent search among drugs with a curated approval. It is
judged to the precision both the text and the fact state: a different year contradicts; a different month
contradicts when both give one; otherwise supported. An approval the clause ties to something other than the
drug's first US approval (an indication: "approved for heart failure in 2005"; a generic, a new formulation,
another country or agency) is unverifiable: the KG holds only the original approval.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rules.claims import Document
from rules.extraction.dates import find_dates
from rules.report import Evidence
from rules.validators.base import Finding, kg_evidence, validator

# the approval cue right before the date ("approved by the FDA in", "FDA approval in", "initial approval on")
_CUE_BEFORE = re.compile(r"\b(?P<cue>approv\w*|FDA (?:approval|clearance)|cleared|(?:came|hit|reached) the (?:US |U\.S\. )?"
                         r"market)\b[^.;]{0,45}$", re.I)
_OTHER_APPROVAL = re.compile(r"\b(?:for (?!the first time)\w|generic|biosimilar|extended[- ]release|XR|ER|XL|pediatric|children|"
                             r"(?:in|by) (?:Europe|the EU|the UK|Canada|Japan|the EMA|Health Canada)|EMA|MHRA|"
                             r"new indication|label expansion|supplemental)", re.I)
_NOT_APPROVAL = re.compile(r"\b(?:not|never|isn't|wasn't|withdrawn|pulled)\b", re.I)


@validator("medical.approval")
def approval(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Original US approval dates stated for a drug against the curated first approval."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    for seg in doc.segments:
        for date in find_dates(seg.text):
            start, end = seg.start + date.start, seg.start + date.end
            clause = doc.clause_of(start)
            before = doc.text[clause[0]:start]
            cue = _CUE_BEFORE.search(before)
            if cue is None or _NOT_APPROVAL.search(before[cue.start():]) or re.search(
                    r"\b(?:1[6-9]|20)\d{2}\b|\b(?:launched|marketed|sold|withdrawn)\b", before[cue.end("cue"):]):
                continue    # the cue belongs to an earlier date ("approved in 1996 and launched in 1997")
            drug = doc.antecedent(start, ["drug"], accept=lambda m: bool(_facts(doc, m.entity_ids)))
            if drug is None:
                continue
            fact = _facts(doc, drug.entity_ids)[0]
            span = (clause[0] + cue.start(), end)
            text = doc.text[span[0]:span[1]]
            curated = str(fact.value)
            evidence = [kg_evidence(f"{drug.text}: first US approval {curated} ({fact.qualifiers.get('product', '')})",
                                    fact.provenance)]
            if _OTHER_APPROVAL.search(before):
                findings.append(Finding(text, span, "approval_date", "unverifiable", 0.5, [*evidence, Evidence(
                    kind="rule", description="the approval stated is not the drug's first US approval (an indication, "
                    "a formulation, a generic or another country); the KG holds only the original approval")],
                    subject=fact.subject))
                continue
            year, month = int(curated[:4]), int(curated[5:7]) if len(curated) >= 7 else None
            if date.year is None or date.precision == "decade":
                continue
            wrong_year = date.year != year
            wrong_month = date.month is not None and month is not None and date.month != month
            verdict = "contradicted" if wrong_year or wrong_month else "supported"
            findings.append(Finding(text, span, "approval_date", verdict, 0.85, [*evidence, Evidence(
                kind="rule", description=f"the text states {doc.text[start:end]!r}")], subject=fact.subject))
    return findings


def _facts(doc: Document, entity_ids: tuple[str, ...] | list[str]) -> list[Any]:
    assert doc.kg is not None
    return [f for i in entity_ids for f in doc.kg.facts(i, "first_approved")]
