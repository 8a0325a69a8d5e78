"""Output-level scores: FER, citation confidence (RC) and the joint score.

FER (factual error rate) = contradicted / (supported + contradicted) over the claims of one output;
None when no claim was verified either way (unverifiable claims count in neither numerator nor
denominator, because "not found offline" is no evidence of error or of truth).

Citation confidence RC in [0, 1] is the mean, over the output's citations (case citations, statute
references, identifiers, ICD-10-CM codes), of resolves * supports:

- resolves: 1.0 when the citation resolves to a record (landmark case, KG statute, valid identifier in a
  registry, valid ICD-10-CM code); 0.5 when it is well-formed but nothing offline confirms it; 0.0 when it
  is invalid or documented as fabricated (unknown reporter, year outside the reporter's dates, bad checksum).
- supports: 1.0 when the record agrees with what the text attaches to it (case name, year, court, code
  description) or when nothing is attached; 0.0 when the record disagrees.

RC is None when the output cites nothing.

Joint score = (1 - FER) * RC; None when either factor is None (an output with no verified claim or no
citation cannot earn a joint score, and inventing a neutral value would hide that).
"""

from __future__ import annotations

from collections.abc import Sequence

from rules.report import Citation, Claim

RESOLUTION_WEIGHT: dict[str, float] = {"resolved": 1.0, "unconfirmed": 0.5, "invalid": 0.0}


def factual_error_rate(claims: Sequence[Claim]) -> float | None:
    supported = sum(1 for c in claims if c.verdict == "supported")
    contradicted = sum(1 for c in claims if c.verdict == "contradicted")
    if supported + contradicted == 0:
        return None
    return contradicted / (supported + contradicted)


def citation_score(citation: Citation) -> float:
    supports = 0.0 if citation.supports_claim is False else 1.0
    return RESOLUTION_WEIGHT[citation.resolution] * supports


def citation_confidence(citations: Sequence[Citation]) -> float | None:
    if not citations:
        return None
    return sum(citation_score(c) for c in citations) / len(citations)


def joint_score(fer: float | None, rc: float | None) -> float | None:
    if fer is None or rc is None:
        return None
    return (1.0 - fer) * rc
