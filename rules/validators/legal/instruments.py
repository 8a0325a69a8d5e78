"""`legal.eu_instruments`: what a text says of an EU instrument the KG holds by its number and dates: "the GDPR
(Regulation (EU) 2016/679)", "it became directly applicable on 25 May 2018", "adopted in April 2016".

The instrument is a KG statute whose name is "Regulation (EU) <year>/<number>" or "Directive (EU) ..." and
that the clause names (or, for a date, that the sentence refers back to). A number given for it must be its
own. A date is judged, to the precision the text states, against the date its cue names: adopted ->
`adopted`; applies, applicable, took effect, enforceable -> `applies_from`; entered or came into force ->
`entry_into_force` or `applies_from` (common usage calls the application date "into force"; a date that is
neither is contradicted).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from knowledge_graphs.model import Entity, KnowledgeGraph
from rules.claims import Document
from rules.extraction.dates import find_dates
from rules.validators.base import Finding, kg_evidence, validator

_NUMBER = re.compile(r"\b(?P<kind>Regulation|Directive)\s+(?:\((?:EU|EC|EEC)\)\s+|(?:EU|EC)\s+)?(?:No\.?\s+)?"
                     r"(?P<year>(?:19|20)\d{2})/(?P<number>\d{1,4})\b")
_CUES: list[tuple[re.Pattern[str], tuple[str, ...]]] = [
    (re.compile(r"\badopted\b|\bpassed\b|\bsigned\b", re.I), ("adopted",)),
    (re.compile(r"\b(?:entered|came|come|comes|went|entering|coming)\s+into\s+force\b|\bin force\b", re.I),
     ("entry_into_force", "applies_from")),
    (re.compile(r"\bappl(?:y|ies|ied|ying|icable|ication)\b|\btook effect\b|\btakes effect\b|\bcame into effect\b|"
                r"\beffective\b|\benforceable\b|\bin effect\b", re.I), ("applies_from",)),
]


@validator("legal.eu_instruments")
def eu_instruments(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """EU instrument numbers and dates stated for an instrument the KG holds."""
    if doc.kg is None:
        return []
    instruments, forms = _instruments(id(doc.kg), doc.kg.version, doc.kg)
    folded = doc.text.casefold()
    if not any(form in folded for form in forms) or _named(doc, instruments, 0, len(doc.text)) is None:
        return []       # no instrument the KG holds is named: nothing to pair a number or date with
    findings = _numbers(doc, instruments)
    findings += _dates(doc, instruments)
    return findings


@lru_cache(maxsize=4)
def _instruments(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> tuple[list[Entity], tuple[str, ...]]:
    """The EU instruments the KG holds, and the casefolded names and aliases that can name one (a cheap
    substring test before any mention lookup)."""
    instruments = [e for e in kg.entities("statute") if _NUMBER.fullmatch(e.name)]
    forms = tuple(dict.fromkeys(f.casefold() for e in instruments for f in [e.name, *e.aliases]))
    return instruments, forms


def _named(doc: Document, instruments: list[Entity], start: int, end: int) -> Entity | None:
    ids = {e.id for e in instruments}
    for mention in doc.mentions(["statute"]):
        if start <= mention.start < end and ids & set(mention.entity_ids) and not _NUMBER.search(mention.text):
            return next(e for e in instruments if e.id in mention.entity_ids)
    return None


def _numbers(doc: Document, instruments: list[Entity]) -> list[Finding]:
    out: list[Finding] = []
    for match in _NUMBER.finditer(doc.text):
        clause = doc.clause_of(match.start())
        sentence = doc.segment_of(match.start())
        # "The GDPR (Regulation (EU) 2016/679)": the name and the number stand together
        named = _named(doc, instruments, max(sentence.start, match.start() - 60), min(sentence.end, match.end() + 60)) \
            or _named(doc, instruments, clause[0], clause[1])
        if named is None:
            continue
        holds = _NUMBER.fullmatch(named.name).group("year", "number") == match.group("year", "number")  # type: ignore[union-attr]
        out.append(Finding(match.group(0), match.span(), "statute", "supported" if holds else "contradicted", 0.9,
                           [kg_evidence(f"{named.attributes.get('title', named.id)} is {named.name}", named.provenance)],
                           subject=named.id))
    return out


def _nearest_cue(before: str) -> tuple[re.Match[str], tuple[str, ...]] | None:
    """The date cue closest before the date, with the curated dates it names."""
    found = [(m, keys) for pattern, keys in _CUES for m in pattern.finditer(before)]
    return max(found, key=lambda f: f[0].start()) if found else None


def _dates(doc: Document, instruments: list[Entity]) -> list[Finding]:
    out: list[Finding] = []
    for seg in doc.segments:
        for date in find_dates(seg.text):
            start, end = seg.start + date.start, seg.start + date.end
            if date.year is None or date.precision == "decade" or _NUMBER.search(doc.text[max(0, start - 20):end]):
                continue
            clause = doc.clause_of(start)
            before = doc.text[clause[0]:start]
            cue = _nearest_cue(before)
            if cue is None or re.search(r"\b(?:not|never)\b", before[max(0, cue[0].start() - 12):]):
                continue
            named = _named(doc, instruments, seg.start, end) or (
                _named(doc, instruments, 0, len(doc.text)) if re.match(r"^\W*(?:it|the regulation|the law)\b", seg.text, re.I)
                or _named(doc, instruments, 0, seg.start) and not doc.mentions_in((seg.start, seg.end), ["statute", "act"])
                else None)
            if named is None:
                continue
            facts = [(key, str(named.attributes.get(key))) for key in cue[1] if named.attributes.get(key)]
            if not facts:
                continue
            holds = any(date.matches(*(int(x) for x in value.split("-"))) for _, value in facts)
            span = (clause[0] + cue[0].start(), end)
            described = "; ".join(f"{key.replace('_', ' ')} {value}" for key, value in facts)
            out.append(Finding(doc.text[span[0]:span[1]], span, "statute", "supported" if holds else "contradicted", 0.85,
                               [kg_evidence(f"{named.name}: {described}", named.provenance)], subject=named.id))
    return out
