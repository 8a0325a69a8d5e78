"""Sanctions-list claims about named parties: "X is (not) sanctioned", "X was removed from the SDN list",
"X is designated under the IRAN program".

The parties are the KG's entities with `listed_on` facts whose object is a sanctions list (entity type
`sanctions_list`, e.g. `list:ofac_sdn` from an imported OFAC SDN file); each fact names its `program`
and the snapshot date (`as_of`), and its provenance is the list row. A party the KG does not list yields
no claim here: the lists imported are a snapshot, and absence is not evidence of anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from functools import lru_cache
from typing import Any

from knowledge_graphs.model import Fact, KnowledgeGraph
from rules.claims import Document
from rules.mentions import Mention
from rules.report import Evidence
from rules.units import stated_date
from rules.validators.base import Finding, kg_evidence, validator

PARTY_TYPES = ("person", "organization", "vessel", "aircraft")
LIST_TYPE = "sanctions_list"
_CUE = re.compile(r"\b(?:sanction(?:s|ed)?|SDN|OFAC|blocked|designat(?:ed|ion)|blacklist(?:ed)?|embargo(?:ed)?"
                  r"|asset[- ]freeze|assets? (?:are |were )?frozen)\b", re.I)
_NEGATED = re.compile(r"\b(?:not|no longer|never|removed|delisted|de-listed|lifted|unsanctioned|isn't|aren't|"
                      r"wasn't|weren't|neither|nor|off the)\b|n't\b", re.I)


@validator("finance.sanctions")
def sanctions(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Whether each named, listed party is said to be sanctioned (and under which program) as the newest
    snapshot of its list says."""
    if doc.kg is None:
        return []
    stale_days = int(params.get("stale_after_days", 180))
    programs = _programs(id(doc.kg), doc.kg.version, doc.kg)
    findings: list[Finding] = []
    for sentence in doc.sentences:
        if not _CUE.search(sentence.text):
            continue
        clauses = doc.clauses(sentence)   # polarity per clause: "X is sanctioned, but Y is not"
        claimed = stated_date(sentence.text) or (stated_date(doc.prompt) if doc.prompt else None)
        for party in _distinct(doc.mentions_in(sentence, PARTY_TYPES)):
            listings = [f for i in party.entity_ids for f in doc.kg.facts(i, "listed_on") if _is_list(doc.kg, f.object)]
            if not listings:
                continue
            clause = next((c for c in clauses if c[0] <= party.start < c[1]), (sentence.start, sentence.end))
            clause_text = doc.text[clause[0]:clause[1]]
            findings.append(_judge(doc, party, listings, clause_text, programs, claimed, stale_days))
    return findings


def _judge(doc: Document, party: Mention, listings: list[Fact], clause: str, programs: frozenset[str],
           claimed: date | None, stale_days: int) -> Finding:
    as_of = max(str(f.qualifiers.get("as_of", "")) for f in listings)
    current = [f for f in listings if str(f.qualifiers.get("as_of", "")) == as_of]
    listed_under = sorted({str(f.qualifiers.get("program")) for f in current if f.qualifiers.get("program")})
    list_name = _name(doc.kg, current[0].object)
    evidence = [kg_evidence(f"{party.text} is on the {list_name} (program {', '.join(listed_under) or 'unstated'}) "
                            f"in the snapshot as of {as_of}", current[0].provenance, kind="list_snapshot")]
    evidence[0].as_of = as_of or None
    span = (party.start, party.end)
    named = [p for p in programs if re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", clause)]
    wrong_program = [p for p in named if p not in listed_under]
    if _NEGATED.search(clause):
        verdict, confidence = "contradicted", 0.95
    elif wrong_program and not set(named) & set(listed_under):
        verdict, confidence = "contradicted", 0.85
        evidence.append(Evidence(kind="list_snapshot", description=f"{party.text} is listed under "
                                 f"{', '.join(listed_under)}, not {', '.join(wrong_program)}"))
    else:
        verdict, confidence = "supported", 0.9
    if claimed is not None and as_of and (claimed - date.fromisoformat(as_of)).days > stale_days:
        evidence.append(Evidence(kind="list_snapshot", description=f"the claim refers to {claimed.isoformat()[:7]}, "
                                 f"later than the newest snapshot ({as_of}); the list may have changed"))
        confidence = min(confidence, 0.7)
    return Finding(doc.text[span[0]:span[1]], span, "sanctions", verdict, confidence, evidence,  # type: ignore[arg-type]
                   subject=party.entity_ids[0], meta={"list": current[0].object, "as_of": as_of,
                                                       "programs": listed_under})


def _is_list(kg: KnowledgeGraph | None, entity_id: str | None) -> bool:
    entity = kg.entity(entity_id) if kg is not None and entity_id else None
    return entity is not None and entity.type == LIST_TYPE


def _name(kg: KnowledgeGraph | None, entity_id: str | None) -> str:
    entity = kg.entity(entity_id) if kg is not None and entity_id else None
    return entity.name if entity is not None else str(entity_id)


@lru_cache(maxsize=4)
def _programs(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> frozenset[str]:
    """Every program code the KG's sanctions lists name (to notice "under the IRAN program" in a claim)."""
    return frozenset(str(f.qualifiers["program"]) for f in kg.facts(relation="listed_on")
                     if f.qualifiers.get("program") and _is_list(kg, f.object))


def _distinct(mentions: list[Mention]) -> list[Mention]:
    seen: set[tuple[int, int]] = set()
    out = []
    for mention in mentions:
        if (mention.start, mention.end) not in seen:
            seen.add((mention.start, mention.end))
            out.append(mention)
    return out
