"""Legal validators: case citations (reporter, edition dates, court, landmark index, documented
fabrications) and statute / rule references (U.S.C., C.F.R., Fed. R. Civ. P., Fed. R. Evid.) against the KG.

Decision on unknown reporters: a string in citation form ("925 F.3d 1339") whose reporter abbreviation
exists in no registry (reporters-db knows ~1,300 reporters and ~2,300 variant spellings, including
regional, state, neutral and Westlaw forms) is judged *contradicted* with confidence 0.8: a well-formed
citation to a reporter that does not exist is the signature of a fabricated citation. A citation whose
reporter exists but that nothing offline can confirm stays *unverifiable*.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, lru_cache
from typing import Any

import courts_db

from knowledge_graphs.model import Entity, KnowledgeGraph
from rules.claims import Document
from rules.report import Evidence, Resolution
from rules.validators.base import (
    CitationCheck,
    Finding,
    kg_evidence,
    package_source,
    possible_fabrication,
    validator,
)
from rules.validators.legal.citation_parsing import (
    CaseCitation,
    citation_key,
    edition_dates,
    find_case_citations,
)

# Which courts publish in which reporters (court citation strings as courts-db writes them).
DEFAULT_REPORTER_COURTS: dict[str, str] = {
    "U.S.": r"^SCOTUS$", "S. Ct.": r"^SCOTUS$", "L. Ed.": r"^SCOTUS$", "L. Ed. 2d": r"^SCOTUS$",
    "F.": r"Cir\.", "F.2d": r"Cir\.|Ct\. Cl\.|C\.C\.P\.A\.|Emer\. Ct\. App\.", "F.3d": r"Cir\.", "F.4th": r"Cir\.",
    "F. Supp.": r"^(?:[NSEWMC]\.\s?)?D\.|Ct\. Int'l Trade|Cust\. Ct\.|J\.P\.M\.L\.",
    "F. Supp. 2d": r"^(?:[NSEWMC]\.\s?)?D\.|Ct\. Int'l Trade|J\.P\.M\.L\.",
    "F. Supp. 3d": r"^(?:[NSEWMC]\.\s?)?D\.|Ct\. Int'l Trade|J\.P\.M\.L\.",
}


# Corrections to reporters-db edition dates (pack parameters edition_first_year / edition_last_year extend
# them). The U.S. Reports are dated from 1875 there, but volumes 1-90 are the renumbered nominative
# reporters (Dallas, Cranch, Wheaton, ...) back to 1754: "5 U.S. 137 (1803)" is the standard Marbury
# citation. F. Supp. ran until 1998 (vol. 999) and F. Supp. 2d began in 1998; reporters-db 3.2 has 1988
# for both, which would reject every real 1989-1998 F. Supp. citation.
DEFAULT_FIRST_YEARS: dict[str, int] = {"U.S.": 1754, "F. Supp. 2d": 1998}
DEFAULT_LAST_YEARS: dict[str, int] = {"F. Supp.": 1998}


@cache
def _court_index() -> dict[str, list[dict[str, Any]]]:
    """Space/punctuation-insensitive citation string -> courts-db records."""
    index: dict[str, list[dict[str, Any]]] = {}
    for court in courts_db.load_courts_db():
        key = re.sub(r"[^a-z0-9]", "", str(court.get("citation_string", "")).casefold())
        if key:
            index.setdefault(key, []).append(court)
    return index


@cache
def _courts_by_id() -> dict[str, list[dict[str, Any]]]:
    index: dict[str, list[dict[str, Any]]] = {}
    for court in courts_db.load_courts_db():
        index.setdefault(str(court.get("id")), []).append(court)
    return index


def resolve_court(court_text: str) -> list[dict[str, Any]]:
    return _court_index().get(re.sub(r"[^a-z0-9]", "", court_text.casefold()), [])


# -- case-name matching ---------------------------------------------------------------------------------
_NAME_NOISE = frozenset("the of and in re ex parte matter inc co corp ltd llc et al a an for".split())


_WORD = re.compile(r"[a-z0-9]+")
_VERSUS = re.compile(r"\s+v\.?\s+")


def _party_words(party: str) -> list[str]:
    return [w for w in _WORD.findall(party.casefold()) if w not in _NAME_NOISE]


def _party_keys(name: str) -> tuple[str, str] | None:
    parts = _VERSUS.split(name, maxsplit=1)
    if len(parts) != 2:
        return None
    left, right = _party_words(parts[0]), _party_words(parts[1])
    if not left or not right:
        return None
    return left[0], right[0]


def names_match(a: str, b: str) -> bool:
    """Same case name, tolerant of abbreviation: both first significant words agree, or one name's
    significant words all occur in the other's."""
    ka, kb = _party_keys(a), _party_keys(b)
    if ka and kb and ka == kb:
        return True
    wa, wb = set(_party_words(a)), set(_party_words(b))
    return bool(wa and wb) and (wa <= wb or wb <= wa)


def names_equivalent(a: str, b: str) -> bool:
    """Strict: each party of one name is a (possibly abbreviated) shortening of the same party of the other,
    so "Brown v. Bd. of Educ." = "Brown v. Board of Education" but "Miller v. United States" !=
    "Miller v. United Airlines"."""
    pa, pb = _parties(a), _parties(b)
    if pa is None or pb is None:
        return False
    return all(_party_covers(x, y) for x, y in zip(pa, pb, strict=True))


def _party_covers(a: str, b: str) -> bool:
    wa, wb = _party_words(a), _party_words(b)
    if not wa or not wb:
        return False
    short, long = (wa, wb) if len(wa) <= len(wb) else (wb, wa)
    return all(any(w == v or _abbreviates(w, v) for v in long) for w in short)


def names_clearly_differ(a: str, b: str) -> bool:
    """A party that no abbreviation, acronym or shortening can explain ("Miranda" for "Brown")."""
    pa, pb = _parties(a), _parties(b)
    if pa is None or pb is None:
        return False
    return not (_party_similar(pa[0], pb[0]) and _party_similar(pa[1], pb[1]))


def _parties(name: str) -> tuple[str, str] | None:
    parts = _VERSUS.split(name, maxsplit=1)
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _party_similar(a: str, b: str) -> bool:
    wa, wb = _party_words(a), _party_words(b)
    if not wa or not wb:
        return True
    if _abbreviates(wa[0], wb[0]) or _abbreviates(wb[0], wa[0]) or set(wa) <= set(wb) or set(wb) <= set(wa):
        return True
    return wa[0] == _initials(b) or wb[0] == _initials(a)   # "NRDC" for "Natural Resources Defense Council"


def _abbreviates(short: str, long: str) -> bool:
    """"bd" abbreviates "board", "educ" abbreviates "education": same first letter, letters in order."""
    if not short or not long or short[0] != long[0]:
        return False
    rest = iter(long)
    return all(ch in rest for ch in short)


def _initials(party: str) -> str:
    return "".join(w[0] for w in _party_words(party))


# -- KG indexes -------------------------------------------------------------------------------------------
class CaseIndex:
    """Cases and documented fabrications by citation, and by the words of their parties' names.

    A name is looked up by its plaintiff's first significant word (`by_word`), and within that bucket by
    the first letters of its defendant's words (`by_word_letter`): an imported table can hold thousands
    of "United States v. ..." cases, and `names_equivalent` needs a defendant word of one name to equal
    or abbreviate one of the other's, so the two share a first letter. Entities without one cannot match.
    """

    def __init__(self, kg: KnowledgeGraph):
        self.by_citation: dict[str, Entity] = {}
        self.by_word: dict[str, list[Entity]] = {}     # plaintiff word -> cases and fabrications
        # (plaintiff word, first letter of a defendant word) -> positions in by_word[word], ascending
        self.by_word_letter: dict[tuple[str, str], list[int]] = {}
        self.cases: list[Entity] = list(kg.entities("case"))
        self.fabricated: list[Entity] = list(kg.entities("fabricated_citation"))
        self.fabricated_by_citation: dict[str, Entity] = {}
        for case in self.cases:
            key = _entity_citation_key(case)
            if key:
                self.by_citation[key] = case
        for fake in self.fabricated:
            key = _entity_citation_key(fake)
            if key:
                self.fabricated_by_citation[key] = fake
        # each KG entity once per bucket (a KG holds one entity per id, so identity is equality here)
        in_bucket: set[tuple[str, int]] = set()
        for entity in [*self.cases, *self.fabricated]:
            forms = [parties for parties in map(_parties, entity.surface_forms) if parties is not None]
            # any of its forms may be the one that matches a cited name: the letters of all of them
            letters = {word[0] for _, defendant in forms for word in _party_words(defendant)}
            for plaintiff, _ in forms:
                for word in set(_party_words(plaintiff)):
                    if (word, id(entity)) in in_bucket:
                        continue
                    in_bucket.add((word, id(entity)))
                    bucket = self.by_word.setdefault(word, [])
                    for letter in letters:
                        self.by_word_letter.setdefault((word, letter), []).append(len(bucket))
                    bucket.append(entity)

    def _named(self, name: str, entity_type: str) -> list[Entity]:
        """Records whose plaintiff holds the cited plaintiff's first significant word and one of whose forms
        is `names_equivalent` to `name`, in the KG's order."""
        parties = _parties(name)
        if parties is None:
            return []            # not "A v. B": equivalent to nothing
        plaintiff, defendant = _party_words(parties[0]), _party_words(parties[1])
        if not plaintiff or not defendant:
            return []
        bucket = self.by_word.get(plaintiff[0], [])
        positions: set[int] = set()
        for letter in {word[0] for word in defendant}:
            positions.update(self.by_word_letter.get((plaintiff[0], letter), ()))
        return [entity for entity in (bucket[i] for i in sorted(positions)) if entity.type == entity_type
                and any(names_equivalent(name, form) for form in entity.surface_forms)]

    def cases_named(self, name: str) -> list[Entity]:
        return self._named(name, "case")

    def fabricated_named(self, name: str) -> list[Entity]:
        return self._named(name, "fabricated_citation")


def _entity_citation_key(entity: Entity) -> str | None:
    attributes = entity.attributes
    if attributes.get("volume") and attributes.get("reporter") and attributes.get("page"):
        return citation_key(str(attributes["volume"]), str(attributes["reporter"]), str(attributes["page"]))
    citation = str(attributes.get("citation") or "")
    found = find_case_citations(citation) if citation else []
    return found[0].key if found else None


@lru_cache(maxsize=4)   # bounded: each imported KG version is a new key, and the entry holds the whole KG
def _case_index(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> CaseIndex:
    return CaseIndex(kg)


def case_index(kg: KnowledgeGraph) -> CaseIndex:
    return _case_index(id(kg), kg.version, kg)


# -- case citations ---------------------------------------------------------------------------------------
@validator("legal.case_citation")
def case_citation(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Every case citation: documented fabrication, landmark index, reporter, edition dates, court."""
    reporter_courts = {**DEFAULT_REPORTER_COURTS, **(params.get("reporter_courts") or {})}
    first_years = {**DEFAULT_FIRST_YEARS, **(params.get("edition_first_year") or {})}
    last_years = {**DEFAULT_LAST_YEARS, **(params.get("edition_last_year") or {})}
    unknown_reporter_confidence = float(params.get("unknown_reporter_confidence", 0.8))
    index = case_index(doc.kg) if doc.kg is not None else None
    findings = []
    for citation in _citations(doc):
        finding = _judge_case(doc, citation, index, reporter_courts, (first_years, last_years), unknown_reporter_confidence)
        findings += split_year(doc, citation, finding, index)
    return findings


_YEAR_PROBLEM = re.compile(r"was decided in \d{4}, not \d{4}|decision cannot be reported there")


def split_year(doc: Document, citation: CaseCitation, finding: Finding, index: CaseIndex | None) -> list[Finding]:
    """The citation (name, volume, reporter, page) and the year in its parenthetical are two claims: "Miranda
    v. Arizona, 384 U.S. 436 (1976)" cites the right case and gives the wrong year. The year claim is judged
    against the case the text names (else the cited record); the citation keeps every other check."""
    if citation.year is None or finding.kind != "case_citation":
        return [finding]
    found = re.search(r"\b" + str(citation.year) + r"\b", doc.text[citation.start:citation.end])
    if found is None:
        return [finding]
    year_span = (citation.start + found.start(), citation.start + found.end())
    paren = doc.text.rfind("(", citation.start, year_span[0])
    cite_end = paren if paren > citation.start else year_span[0]
    while cite_end > finding.span[0] and doc.text[cite_end - 1] in " ,":
        cite_end -= 1
    record = _year_record(doc, citation, index)
    year_right = record is not None and record.attributes.get("year") is not None and int(record.attributes["year"]) == citation.year
    # an edition that cannot hold a decision of that year: the year's fault when the year is wrong for the case
    # named, the reporter's or volume's when it is right ("Gibbons v. Ogden, 22 F.2d 1 (1824)")
    year_evidence = [e for e in finding.evidence if _YEAR_PROBLEM.search(e.description)
                     and not (year_right and "cannot be reported" in e.description)]
    other = [e for e in finding.evidence if e not in year_evidence]
    if record is not None and record.attributes.get("year"):
        holds = int(record.attributes["year"]) == citation.year
        if not holds and finding.citation is not None:
            # citation confidence: the cited record disagrees with the year the text attaches to it
            finding.citation = CitationCheck("case", finding.citation.resolution, False)
        year_finding = Finding(doc.text[year_span[0]:year_span[1]], year_span, "case_year",
                               "supported" if holds else "contradicted", 0.9,
                               [kg_evidence(f"{record.name} was decided in {record.attributes['year']}", record.provenance)],
                               subject=record.id)
    elif year_evidence:
        year_finding = Finding(doc.text[year_span[0]:year_span[1]], year_span, "case_year", "contradicted", 0.9,
                               year_evidence, subject=finding.subject)
    else:
        return [finding]
    remaining = [e for e in other if "not found in courts-db" not in e.description]
    if finding.verdict == "contradicted" and year_evidence and not remaining:
        # the year was the only problem: the citation itself stands
        finding.verdict = "supported" if record is not None else "unverifiable"
        finding.confidence = 0.9 if record is not None else 0.5
        finding.evidence = other or ([kg_evidence(f"{record.name}, {record.attributes.get('citation', '')}",
                                                  record.provenance)] if record is not None else [])
        if finding.citation is not None:
            finding.citation = CitationCheck("case", "resolved" if record is not None else "unconfirmed", False)
    finding.span = (finding.span[0], cite_end)
    finding.text = doc.text[finding.span[0]:cite_end]
    return [finding, year_finding]


def _year_record(doc: Document, citation: CaseCitation, index: CaseIndex | None) -> Entity | None:
    if index is None:
        return None
    if citation.case_name:
        named = index.cases_named(citation.case_name)
        if named:
            return named[0]
    return index.by_citation.get(citation.key)


def case_citations(doc: Document) -> list[CaseCitation]:
    """The document's case citations, found once and shared by the validators."""
    return _citations(doc)


def _citations(doc: Document) -> list[CaseCitation]:
    if "case_citations" not in doc.cache:
        doc.cache["case_citations"] = find_case_citations(doc.text)
    return doc.cache["case_citations"]


@dataclass(slots=True)
class _CaseChecks:
    """What the checks of one case citation have found so far, in the order they found it."""

    contradictions: list[tuple[float, Evidence]] = field(default_factory=list)   # (confidence, evidence)
    support: list[Evidence] = field(default_factory=list)
    notes: list[Evidence] = field(default_factory=list)      # said beside any verdict, decide none
    supports_claim: bool | None = None
    resolution: Resolution = "unconfirmed"
    subject: str | None = None


def _judge_case(doc: Document, citation: CaseCitation, index: CaseIndex | None, reporter_courts: dict[str, str],
                year_fixes: tuple[dict[str, int], dict[str, int]], unknown_reporter_confidence: float) -> Finding:
    span = _case_span(doc, citation)
    text = doc.text[span[0]:span[1]]
    checks = _CaseChecks()
    if index is not None:
        denial = _check_fabrication(doc, citation, index, span, checks)                        # 1.
        if denial is not None:
            return denial
    _check_reporter(citation, year_fixes, unknown_reporter_confidence, checks)                 # 2.
    _check_court(citation, reporter_courts, checks)                                            # 3.
    if index is not None and checks.resolution != "invalid":
        _check_landmark(doc, citation, index, reporter_courts, checks)                         # 4.
    return _case_finding(text, span, citation, checks, doc.kg)


def _case_span(doc: Document, citation: CaseCitation) -> tuple[int, int]:
    """The citation with the case name written before it, when there is one."""
    start = citation.start
    if citation.case_name:
        name_at = doc.text.rfind(citation.case_name, max(0, citation.start - 250), citation.start)
        start = name_at if name_at >= 0 else start
    return start, citation.end


def _check_fabrication(doc: Document, citation: CaseCitation, index: CaseIndex, span: tuple[int, int],
                       checks: _CaseChecks) -> Finding | None:
    """1. Documented fabrications (sanctions orders). Returns the finding when the text denies the
    fabricated citation, which is then a correct statement and needs no further check."""
    fake = index.fabricated_by_citation.get(citation.key)
    if fake is None and citation.case_name:
        named = index.fabricated_named(citation.case_name)
        fake = named[0] if named else None
    if fake is None:
        return None
    checks.subject = fake.id
    documented = doc.kg.facts(fake.id, "fabrication_documented_in") if doc.kg is not None else []
    order = str(documented[0].value) if documented else str(fake.attributes.get("found_in", ""))
    fabrication = kg_evidence(
        f"documented fabricated citation: {fake.name}, {fake.attributes.get('citation', '')}; {order}",
        documented[0].provenance if documented else fake.provenance, kind="fabrication")
    if denies_citation(doc, span, citation.start):
        # the sentence says this citation is fabricated / does not exist: a correct denial
        return Finding(doc.text[span[0]:span[1]], span, "case_citation", "supported", 0.95, [fabrication],
                       subject=checks.subject, citation=CitationCheck("case", "invalid", True))
    checks.contradictions.append((0.99, fabrication))
    checks.resolution = "invalid"
    return None


def _check_reporter(citation: CaseCitation, year_fixes: tuple[dict[str, int], dict[str, int]],
                    unknown_reporter_confidence: float, checks: _CaseChecks) -> None:
    """2. The reporter exists, and the year lies inside the edition's dates."""
    dates = edition_dates(citation.reporter) if citation.known_reporter else None
    if not citation.known_reporter:
        checks.contradictions.append((unknown_reporter_confidence, Evidence(
            kind="registry", description=f"reporter {citation.reporter!r} exists in no reporter registry",
            source=package_source("reporters-db"), locator="reporters_db.EDITIONS / VARIATIONS_ONLY")))
        checks.resolution = "invalid"
    elif dates is not None:
        first, last, reporter_name = dates
        first_years, last_years = year_fixes
        if citation.reporter in first_years:
            first = datetime(first_years[citation.reporter], 1, 1)
        if citation.reporter in last_years:
            last = datetime(last_years[citation.reporter], 12, 31)
        if citation.year is not None and not _year_in(citation.year, first, last):
            span_text = f"{first.year if first else '?'}-{last.year if last else 'present'}"
            checks.contradictions.append((0.95, Evidence(
                kind="registry", description=f"{citation.reporter} ({reporter_name}) covers {span_text}; "
                f"a {citation.year} decision cannot be reported there",
                source=package_source("reporters-db"), locator=f"reporters_db.REPORTERS[{citation.reporter!r}].editions")))
            checks.resolution = "invalid"


def _check_court(citation: CaseCitation, reporter_courts: dict[str, str], checks: _CaseChecks) -> None:
    """3. The court named exists and publishes in this reporter."""
    if not citation.court_text:
        return
    courts = resolve_court(citation.court_text)
    allowed = reporter_courts.get(citation.reporter)
    if courts and allowed and not any(re.search(allowed, str(c.get("citation_string", ""))) for c in courts):
        checks.contradictions.append((0.85, Evidence(
            kind="registry", description=f"{citation.court_text} ({courts[0].get('name')}) does not publish in "
            f"{citation.reporter}", source=package_source("courts-db"), locator="courts_db citation_string")))
    elif not courts:
        checks.notes.append(Evidence(kind="registry", description=f"court {citation.court_text!r} not found in courts-db",
                                     source=package_source("courts-db"), locator="courts_db citation_string"))


def _check_landmark(doc: Document, citation: CaseCitation, index: CaseIndex, reporter_courts: dict[str, str],
                    checks: _CaseChecks) -> None:
    """4. Landmark index: the citation's record must agree with the name, year and court the text gives;
    a known case named with another citation must not be misplaced."""
    record = index.by_citation.get(citation.key)
    if record is not None:
        checks.subject = record.id
        checks.resolution = "resolved"
        mismatches = _record_mismatches(doc, citation, record)
        if mismatches:
            checks.supports_claim = False
            checks.contradictions.extend((0.9, kg_evidence(m, record.provenance)) for m in mismatches)
        else:
            checks.supports_claim = True
            checks.support.append(kg_evidence(f"{record.name}, {record.attributes.get('citation', '')} "
                                              f"({record.attributes.get('year', '')})", record.provenance))
    elif citation.case_name:
        for case in index.cases_named(citation.case_name):
            checks.subject = case.id
            mismatches = _misplaced(citation, case, reporter_courts)
            if mismatches:
                checks.supports_claim = False
                checks.contradictions.extend((0.9, kg_evidence(m, case.provenance)) for m in mismatches)
                break


def _covering(kg: KnowledgeGraph, citation: CaseCitation) -> dict[str, Any] | None:
    """The coverage entry, declared by an import, that holds this reporter volume completely."""
    if not citation.volume.isdigit():
        return None
    volume = int(citation.volume)
    return next((c for c in getattr(kg, "coverage", []) if c.get("index") == f"reporter:{citation.reporter}"
                 and int(c.get("from", 0)) <= volume <= int(c.get("to", -1))), None)


def _nearest_before(kg: KnowledgeGraph, citation: CaseCitation) -> str:
    """"; the page falls within X, 541 U.S. 1120": the case the cited page would lie in, when the index has one."""
    best: tuple[int, str] | None = None
    for fact in kg.facts(relation="reported_in"):
        if str(fact.qualifiers.get("volume")) != citation.volume or fact.object != f"reporter:{citation.reporter}":
            continue
        page = fact.qualifiers.get("page")
        if str(page).isdigit() and int(page) <= int(citation.page) if citation.page.isdigit() else False:
            entity = kg.entity(fact.subject)
            if entity is not None and (best is None or int(page) > best[0]):
                best = (int(page), f"{entity.name}, {citation.volume} {citation.reporter} {page}")
    return f"; the page falls within {best[1]}" if best else ""


def _case_finding(text: str, span: tuple[int, int], citation: CaseCitation, checks: _CaseChecks,
                  doc_kg: KnowledgeGraph | None = None) -> Finding:
    """Any contradiction decides (at the confidence of the surest); else support; else unverifiable."""
    if checks.contradictions:
        confidence = max(c for c, _ in checks.contradictions)
        evidence = [e for _, e in checks.contradictions] + checks.notes
        return Finding(text, span, "case_citation", "contradicted", confidence, evidence, subject=checks.subject,
                       citation=CitationCheck("case", checks.resolution, checks.supports_claim))
    if checks.support:
        return Finding(text, span, "case_citation", "supported", 0.95, checks.support + checks.notes,
                       subject=checks.subject, citation=CitationCheck("case", "resolved", True))
    covered = _covering(doc_kg, citation) if doc_kg is not None and citation.known_reporter else None
    if covered is not None:
        return Finding(text, span, "case_citation", "contradicted", 0.85, [Evidence(
            kind="fabrication", description=f"no case at {citation.volume} {citation.reporter} {citation.page}: the case "
            f"index holds {citation.reporter} volumes {covered['from']} to {covered['to']} completely (imported as "
            f"{covered.get('overlay', 'an overlay')})" + _nearest_before(doc_kg, citation)), *checks.notes],
            subject=checks.subject, citation=CitationCheck("case", "invalid", False))
    description = (f"well-formed citation to {citation.reporter} that no offline source confirms"
                   if citation.known_reporter else "citation could not be checked")
    marks = [possible_fabrication(f"{citation.volume} {citation.reporter} {citation.page}", "KG's case index")] \
        if citation.known_reporter else []
    return Finding(text, span, "case_citation", "unverifiable", 0.5,
                   [*marks, Evidence(kind="registry", description=description, source=package_source("reporters-db"),
                                     locator="reporters_db.EDITIONS"), *checks.notes],
                   subject=checks.subject, citation=CitationCheck("case", "unconfirmed", None))


# -- denials of fabricated citations -------------------------------------------------------------------
# A sentence that *denies* a documented fabricated citation ("X, 114 A.D.3d 947, does not exist: it is a
# fabricated citation") is correct, not a hallucination. The denial must be attached to this citation in its
# own sentence: a cue within DENIAL_WORDS_AFTER words after the citation or DENIAL_WORDS_BEFORE words before
# its case name, with no other case name ("A v. B"), no other citation and no reliance verb ("holds",
# "supports", "relied on") in between, and the cue itself not negated ("is not fabricated"). Anything else
# (a sentence relying on the citation, or a cue about something else) keeps the fabrication contradicted.
DENIAL_CUES = ("does not exist", "do not exist", "did not exist", "doesn't exist", "didn't exist", "never existed",
               "fabricated", "fictitious", "non-existent", "nonexistent", "made up", "made-up", "invented",
               "bogus", "fake")
DENIAL_WORDS_AFTER = 10
DENIAL_WORDS_BEFORE = 6
_DENIAL_CUE = re.compile(r"\b(?:" + "|".join(re.escape(c).replace(r"\ ", r"\s+") for c in DENIAL_CUES) + r")\b", re.I)
_CUE_NEGATED = re.compile(r"\b(?:not|never|no)\b(?:\s+\S+){0,2}\s*$|n't\s+(?:\S+\s+){0,2}$", re.I)
_VERSUS_IN_TEXT = re.compile(r"\sv\.?\s")
_DENIAL_BARRIER = re.compile(
    r"\sv\.?\s|\b\d{1,4}\s+[A-Z][A-Za-z.' ]{0,20}\s\d{1,7}\b"          # another case name or citation
    r"|\b(?:holds?|held|holding|rul(?:es|ed|ing)|establish(?:es|ed)|supports?|supported|stands?\s+for"
    r"|recogni[sz]e[sd]|decided|concluded|reasoned|explained|affirmed|reversed|relie[sd]|relying)\b")


def denies_citation(doc: Document, span: tuple[int, int], cite_start: int | None = None) -> bool:
    """True when the citation at `span` (case name through parenthetical; the volume starts at `cite_start`) is
    said, in its own sentence, to be fabricated / non-existent / fictitious / made up / invented / bogus / fake."""
    sentence = doc.sentence_of(span[0])
    # a "case name" that swallowed another case ("Varghese v. X cite, Miller v. Y") belongs to two cases: a cue
    # before it cannot be told apart, so only cues after the citation count
    name = doc.text[span[0]:cite_start if cite_start is not None else span[0]]
    name_is_one_case = len(_VERSUS_IN_TEXT.findall(name)) <= 1
    for cue in _DENIAL_CUE.finditer(sentence.text):
        start, end = sentence.start + cue.start(), sentence.start + cue.end()
        if span[0] <= start < span[1]:
            continue                      # a cue inside the case name itself ("Fake v. Smith")
        gap = doc.text[span[1]:start] if start >= span[1] else doc.text[end:span[0]]
        limit = DENIAL_WORDS_AFTER if start >= span[1] else DENIAL_WORDS_BEFORE
        if start < span[0] and not name_is_one_case:
            continue
        if len(gap.split()) > limit or _DENIAL_BARRIER.search(gap):
            continue
        preceding = doc.text[max(sentence.start, start - 40):start]
        if not cue.group(0).casefold().startswith(("do", "did", "never")) and _CUE_NEGATED.search(preceding):
            continue                      # "is not fabricated", "isn't a fake case"
        return True
    return False


def _year_in(year: int, first: datetime | None, last: datetime | None) -> bool:
    return (first is None or year >= first.year) and (last is None or year <= last.year)


def _record_mismatches(doc: Document, citation: CaseCitation, record: Entity) -> list[str]:
    out = []
    cited = record.attributes.get("citation", citation.key)
    full_names = [form for form in record.surface_forms if re.search(r"\sv\.?\s", form)] or [record.name]
    if citation.case_name and all(names_clearly_differ(citation.case_name, form) for form in full_names):
        out.append(f"{cited} is {record.name}, not {citation.case_name}")
    year = record.attributes.get("year")
    if citation.year is not None and year and int(year) != citation.year:
        out.append(f"{record.name}, {cited} was decided in {year}, not {citation.year}")
    court = record.attributes.get("court")
    if citation.court_text and court:
        courts = resolve_court(citation.court_text)
        if courts and all(c.get("id") != court for c in courts):
            out.append(f"{record.name} was decided by {court}, not {citation.court_text}")
    return out


def _misplaced(citation: CaseCitation, case: Entity, reporter_courts: dict[str, str]) -> list[str]:
    """A landmark case cited by name with the wrong volume/page in its own reporter, the wrong year, or a
    reporter its court does not publish in (a Supreme Court case "reported" in F.2d)."""
    out = []
    attributes = case.attributes
    cited = attributes.get("citation", "")
    if str(attributes.get("reporter", "")) == citation.reporter and (
        str(attributes.get("volume")) != citation.volume or str(attributes.get("page")) != citation.page
    ):
        out.append(f"{case.name} is reported at {cited}, not {citation.volume} {citation.reporter} {citation.page}")
    allowed = reporter_courts.get(citation.reporter)
    court = attributes.get("court")
    if allowed and court:
        records = _courts_by_id().get(str(court), [])
        if records and not any(re.search(allowed, str(r.get("citation_string", ""))) for r in records):
            out.append(f"{case.name} ({cited}) was decided by {records[0].get('name')}, which does not publish in "
                       f"{citation.reporter}")
    year = attributes.get("year")
    if citation.year is not None and year and int(year) != citation.year and (
        str(attributes.get("reporter", "")) == citation.reporter or not out
    ):
        out.append(f"{case.name} ({cited}) was decided in {year}, not {citation.year}")
    return out


# -- statutes and rules -----------------------------------------------------------------------------------
_SUBSECTIONS = r"(?P<sub>(?:\([a-zA-Z0-9]{1,4}\))*)"
_STATUTE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("usc", re.compile(r"\b(?P<title>\d{1,2})\s+U\.?\s?S\.?\s?C\.?(?:\s?A\.?)?\s*(?:§§?|[Ss]ec(?:tion|\.)?)?\s*"
                       r"(?P<section>\d+[a-zA-Z]?(?:-\d+[a-z]?)?)" + _SUBSECTIONS)),
    ("cfr", re.compile(r"\b(?P<title>\d{1,2})\s+C\.?\s?F\.?\s?R\.?\s*(?:§§?|[Pp]art|[Ss]ec(?:tion|\.)?)?\s*"
                       r"(?P<section>\d+(?:\.\d+[a-zA-Z]?(?:-\d+[a-z]?)?)?)" + _SUBSECTIONS)),
    ("frcp", re.compile(r"\bFed(?:eral|\.)?\s?R(?:ule|\.)?\s?(?:of\s)?Civ(?:il|\.)?\s?P(?:roc(?:edure|\.)?|\.)?\s*"
                        r"(?P<section>\d+)" + _SUBSECTIONS)),
    ("fre", re.compile(r"\bFed(?:eral|\.)?\s?R(?:ule|\.)?\s?(?:of\s)?Evid(?:ence|\.)?\s*(?P<section>\d+)" + _SUBSECTIONS)),
    ("frcp", re.compile(r"\bRule\s+(?P<section>\d+)" + _SUBSECTIONS + r"\s+of\s+the\s+Federal\s+Rules\s+of\s+Civil\s+Procedure")),
    ("fre", re.compile(r"\bRule\s+(?P<section>\d+)" + _SUBSECTIONS + r"\s+of\s+the\s+Federal\s+Rules\s+of\s+Evidence")),
]


def statute_keys(text: str) -> list[tuple[int, int, tuple[str, str, str], str]]:
    """(start, end, (code, title, section), subsections) for every statute reference in `text`."""
    out: list[tuple[int, int, tuple[str, str, str], str]] = []
    for code, pattern in _STATUTE_PATTERNS:
        for match in pattern.finditer(text):
            if any(s < match.end() and match.start() < e for s, e, *_ in out):
                continue
            title = match.groupdict().get("title") or ""
            out.append((match.start(), match.end(), (code, title, match.group("section").casefold()),
                        (match.group("sub") or "").casefold()))
    return sorted(out)


class StatuteIndex:
    def __init__(self, kg: KnowledgeGraph):
        self.exact: dict[tuple[tuple[str, str, str], str], Entity] = {}
        self.sections: dict[tuple[str, str, str], list[Entity]] = {}
        # C.F.R. sections imported from eCFR are "regulation" entities: a reference to one must resolve too
        for entity in [*kg.entities("statute"), *kg.entities("regulation")]:
            for form in entity.surface_forms:
                for _, _, key, sub in statute_keys(form):
                    self.exact.setdefault((key, sub), entity)
                    bucket = self.sections.setdefault(key, [])
                    if entity not in bucket:
                        bucket.append(entity)

    def resolve(self, key: tuple[str, str, str], sub: str) -> Entity | None:
        if (key, sub) in self.exact:
            return self.exact[(key, sub)]
        # "Fed. R. Civ. P. 12(b)(6)" resolves to a KG "Fed. R. Civ. P. 12" (and vice versa)
        for candidate_sub in _parents(sub):
            if (key, candidate_sub) in self.exact:
                return self.exact[(key, candidate_sub)]
        candidates = self.sections.get(key, [])
        return candidates[0] if candidates else None


def _parents(sub: str) -> list[str]:
    parts = re.findall(r"\([^)]*\)", sub)
    return ["".join(parts[:n]) for n in range(len(parts) - 1, -1, -1)]


@lru_cache(maxsize=4)
def _statute_index(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> StatuteIndex:
    return StatuteIndex(kg)


_CODE_NAMES = {"usc": "U.S.C.", "cfr": "C.F.R.", "frcp": "Fed. R. Civ. P.", "fre": "Fed. R. Evid."}


def _keys_of(entity: Entity) -> list[tuple[str, str, str]]:
    return [key for form in entity.surface_forms for _, _, key, _ in statute_keys(form)]
