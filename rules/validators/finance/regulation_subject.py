"""`finance.regulation_subject`: the statute a conduct is said to be a crime under, or prohibited by:
"structuring is a federal crime under 31 U.S.C. § 5324", "It's prohibited by 31 U.S.C. 5324" (it = the
structuring named before).

The conduct is a regulation named by what it governs (a KG alias without a number: "structuring",
"currency transaction reporting"), in the citation's sentence before it, else resolved as an antecedent
("it", "that"). The cited section must be that regulation, or the statute it implements or is implemented
by; another section the KG holds is contradicted, naming the right one. A citation the KG does not hold
gives no claim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rules.claims import Document
from rules.mentions import Mention
from rules.validators.base import Finding, kg_evidence, validator

_CRIME_CUE = re.compile(r"\b(?:crime|offen[cs]e|illegal|unlawful|prohibited|banned|forbidden|outlawed|criminali[sz]ed|"
                        r"punishable|made a crime)\b[^.;]{0,25}\b(?:under|by|in)\s+(?:the\s+)?$", re.I)
_CITATION = re.compile(r"\d")


@validator("finance.regulation_subject")
def regulation_subject(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """A conduct said to be a crime under, or prohibited by, a cited statute, against the KG's regulations."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    for cited in doc.mentions(["regulation"]):
        if not _CITATION.search(cited.text):
            continue
        clause = doc.clause_of(cited.start)
        cue = _CRIME_CUE.search(doc.text[max(clause[0], cited.start - 80):cited.start])
        if cue is None:
            continue
        before = cited.start
        conduct = doc.antecedent(cited.start, ["regulation"], accept=lambda m, before=before: not _CITATION.search(m.text)
                                 and m.start < before)
        if conduct is None:
            continue
        findings.append(_judge(doc, conduct, cited, clause))
    return findings


def _related(doc: Document, entity_id: str) -> set[str]:
    """The regulation, the regulations implementing it, and the statutes it implements."""
    assert doc.kg is not None
    related = {entity_id}
    for entity in doc.kg.entities("regulation"):
        implemented_by = set(entity.attributes.get("implemented_by") or [])
        if entity.id == entity_id:
            related |= implemented_by
        elif entity_id in implemented_by:
            related.add(entity.id)
    return related


def _judge(doc: Document, conduct: Mention, cited: Mention, clause: tuple[int, int]) -> Finding:
    assert doc.kg is not None
    start = min(conduct.start, cited.start) if conduct.start >= clause[0] else clause[0]
    start += len(re.match(r"^\W*(?:and\s+|so\s+|but\s+)?", doc.text[start:cited.end]).group(0))  # type: ignore[union-attr]
    span = (start, cited.end)
    governs = doc.kg.entity(conduct.entity_ids[0])
    said = doc.kg.entity(cited.entity_ids[0])
    assert governs is not None and said is not None
    holds = bool(_related(doc, governs.id) & set(cited.entity_ids))
    evidence = [kg_evidence(f"{conduct.text}: {governs.name} ({governs.attributes.get('title', '')})", governs.provenance)]
    if not holds:
        evidence.append(kg_evidence(f"{said.name} is {said.attributes.get('title', '')}", said.provenance))
    return Finding(doc.text[span[0]:span[1]], span, "regulation", "supported" if holds else "contradicted", 0.8,
                   evidence, subject=governs.id)
