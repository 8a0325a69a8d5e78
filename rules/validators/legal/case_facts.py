"""`legal.case_facts`: facts about landmark cases stated in prose: the year they were decided and the court
that decided them.

Years: a date is paired with the case named nearest before it in its clause ("Plessy v. Ferguson was
decided in 1896", "Mapp v. Ohio in 1961", "Dobbs was 2022, Bruen 2021", "Apprendi v. New Jersey (2000)"),
else in its row or label ("| Mapp v. Ohio | 367 U.S. 643 | 1961 |", "Year: 1929"), else, when the clause
says something was decided ("It was decided in 1963", "It dates from 1928"), with the nearest case before
(coreference). A date inside a citation's own parenthetical is the citation validator's. A claim is judged
to the precision it states: a year against the curated year; a month or day against the curated decision
date (`decided`) where the KG holds one, else contradicted when the year is wrong and otherwise unverifiable.
A date that is a whole sentence ("June 26, 2015.") answers the question: it is paired with the case the
question names, else with the subject of the next sentence. "between 1960 and 1965"
said of several cases holds when every one of them was decided in that range.

Courts: "was decided by the New York Court of Appeals", "was (not) a U.S. Supreme Court case", "was heard
in the Southern District of New York", "Court: Supreme Court of New Hampshire" are compared with the
case's curated court.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from knowledge_graphs.model import Entity, KnowledgeGraph
from rules.claims import Document, Segment
from rules.extraction.dates import DateMention, find_dates
from rules.mentions import Mention
from rules.report import Evidence
from rules.validators.base import Finding, kg_evidence, validator
from rules.validators.legal.citations import case_citations
from rules.validators.legal.courts import resolve_court_text

_DECIDED = re.compile(r"\b(?:decided|handed down|came down|ruled|issued|dates? from|announced|argued|overrul\w*|"
                      r"abandoned|struck|held|in force|sanctioned|extended|was|were)\b", re.I)
_DECISION_NOUNS = frozenset("decision ruling opinion case judgment holding landmark per".split())
# a clause about a film, book or article made of a case dates that work, not the decision
_ABOUT_A_WORK = re.compile(r"\b(?:film|book|movie|documentary|biography|play|novel|article|law review|podcast|series)\b", re.I)
_COURT_CLAIM = re.compile(
    r"\b(?P<neg>not\s+)?(?:(?:a|an)\s+)?(?:decision|case|opinion|ruling)\s+of\s+(?P<a>[^,.;]+)|"
    r"\b(?:decided|heard|issued|handed down|filed)\s+(?:by|in)\s+(?P<b>(?:the\s+)?(?:U\.S\.\s+)?[A-Z][^,.;(]+)|"
    r"\bwas\s+(?P<neg2>not\s+)?(?:a|an)\s+(?P<c>(?:U\.S\.\s+|United States\s+)?Supreme Court)\s+(?:case|decision)|"
    r"^\s*Court:\s*(?P<d>[^\n]+)|"
    r"\b(?:a|the)\s+(?:federal\s+|district\s+|trial\s+)?(?:judge|court)\s+(?:in|of|for)\s+"
    r"the\s+(?P<e>(?-i:(?:[A-Z][\w.]*\s+)+of\s+[A-Z][\w.]*(?:\s+[A-Z][\w.]*)?))",
    re.I)


@validator("legal.case_facts")
def case_facts(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Decision years and deciding courts of cases named in prose."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    citation_spans = [(c.start, c.end) for c in case_citations(doc)]
    for seg in doc.segments:
        for date in find_dates(seg.text):
            start, end = seg.start + date.start, seg.start + date.end
            if any(s <= start < e for s, e in citation_spans):
                continue
            finding = _judge_date(doc, seg, date, (start, end))
            if finding is not None:
                findings.extend(finding)
        findings += _court_claims(doc, seg)
    findings += _citation_courts(doc)
    return findings


def _citation_courts(doc: Document) -> list[Finding]:
    """"United States v. Carroll Towing Co., 159 F.2d 169 (2d Cir. 1947)": the court of a citation's parenthetical
    against the curated court of the case the citation is (matched by volume, reporter and page)."""
    assert doc.kg is not None
    out: list[Finding] = []
    for citation in case_citations(doc):
        if not citation.court_text:
            continue
        entity = _cases_by_citation(id(doc.kg), doc.kg.version, doc.kg).get(
            (citation.volume, citation.reporter.replace(" ", ""), citation.page))
        courts = resolve_court_text(citation.court_text)
        if entity is None or not courts or not entity.attributes.get("court"):
            continue
        at = doc.text.find(citation.court_text, citation.start, citation.end)
        if at < 0:
            continue
        actual = str(entity.attributes["court"])
        out.append(Finding(citation.court_text, (at, at + len(citation.court_text)), "case_court",
                           "supported" if actual in courts else "contradicted", 0.85,
                           [kg_evidence(f"{entity.name} was decided by {actual}", entity.provenance)], subject=entity.id))
    return out


@lru_cache(maxsize=4)
def _cases_by_citation(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> dict[tuple[str, str, str], Entity]:
    return {(str(e.attributes.get("volume")), str(e.attributes.get("reporter", "")).replace(" ", ""), str(e.attributes.get("page"))): e
            for e in kg.entities("case")}


def _cases(doc: Document) -> list[Mention]:
    return [m for m in doc.mentions(["case"]) if not m.in_prompt]


def _judge_date(doc: Document, seg: Segment, date: DateMention, span: tuple[int, int]) -> list[Finding] | None:
    assert doc.kg is not None
    clause = doc.clause_of(span[0])
    before = doc.text[clause[0]:span[0]]
    cases = _cases(doc)
    # "between 1960 and 1965" said of the cases named before it
    between = re.search(r"\bbetween\s+$", before, re.I)
    if between:
        return _judge_range(doc, clause, date, span)
    if re.search(r"\b(?:and|to|-|–)\s*$", before) and re.search(r"\bbetween\b|\bfrom\b", before, re.I):
        return None
    # "a 2016 film", "the 1964 Act": a year that dates something else than a decision
    attributive = re.match(r"^\s+([a-z]\w+)", doc.text[span[1]:span[1] + 30])
    if re.search(r"\b(?:a|an|the|its|their)\s+$", before, re.I) and attributive and attributive.group(1) not in _DECISION_NOUNS:
        return None
    if _ABOUT_A_WORK.search(doc.text[clause[0]:clause[1]]):
        return None
    in_clause = [m for m in cases if clause[0] <= m.start and m.end <= span[0]]
    case: Mention | None = in_clause[-1] if in_clause else None
    if case is None and seg.cells:
        own = seg.cell_at(span[0])
        if own is not None and re.search(r"\byear|\bdecided|\bdate", own.header, re.I):
            case = next((m for m in cases if seg.start <= m.start < seg.end), None)
    if case is None and seg.label is not None and re.search(r"^\s*(?:year|decided|date)", doc.text[seg.label[0]:seg.label[1]], re.I):
        case = doc.antecedent(span[0], ["case"])
    if case is None and _DECIDED.search(before):
        case = doc.antecedent(span[0], ["case"], accept=lambda m: not m.in_prompt or True)
    bare = case is None and _bare_answer(doc, clause, span)
    if bare:
        case = _case_asked_or_next(doc, span[1])
    if case is None:
        return None
    if case.start > span[0] and not case.in_prompt and not bare:
        return None
    entity = _entity(doc, case)
    if entity is None or not entity.attributes.get("year"):
        return None
    year = int(entity.attributes["year"])
    # "Obergefell v. Hodges was decided in 2015" is one claim; "Katz v. United States, 389 U.S. 347, decided in
    # 1967" holds two (the citation and the year): the year's claim then starts at its cue, clear of the citation
    gap = doc.text[case.end:span[0]]
    claim_start = case.start if (not case.in_prompt and case.start >= clause[0] and len(gap) <= 40
                                 and not re.search(r"\d", gap)) else _cue_start(doc, clause, span[0])
    if bare:
        claim_start = span[0]
    claim_span = (claim_start, span[1] + (1 if doc.text[span[1]:span[1] + 1] == ")" else 0))
    text = doc.text[claim_span[0]:claim_span[1]]
    evidence = [kg_evidence(f"{entity.name} was decided in {year}", entity.provenance)]
    if date.precision == "decade" or date.precision == "year":
        verdict = "supported" if date.matches(year) else "contradicted"
        return [Finding(text, claim_span, "case_year", verdict, 0.9, evidence, subject=entity.id)]
    if date.year != year:
        return [Finding(text, claim_span, "case_year", "contradicted", 0.9, evidence, subject=entity.id)]
    decided = str(entity.attributes.get("decided") or "")
    if decided:
        # the curated decision date: the month (and day) the text states must be it
        y, m, d = (int(x) for x in decided.split("-"))
        evidence = [kg_evidence(f"{entity.name} was decided on {decided}", entity.provenance)]
        return [Finding(text, claim_span, "case_year", "supported" if date.matches(y, m, d) else "contradicted", 0.9,
                        evidence, subject=entity.id)]
    return [Finding(text, claim_span, "case_year", "unverifiable", 0.6, [*evidence, Evidence(
        kind="kg_fact", description=f"the year agrees; the KG holds decision years, not the {date.precision} "
        f"({date.describe()})")], subject=entity.id)]


def _bare_answer(doc: Document, clause: tuple[int, int], span: tuple[int, int]) -> bool:
    """A date that is the whole of its sentence ("June 26, 2015.", "2022-06-24. Dobbs v. ...") answers the
    question's "when"."""
    after = doc.text[span[1]:clause[1]]
    if re.match(r"^\.\s+[A-Z]", after):
        after = ""      # "2022-06-24. Dobbs v. ...": the sentence ends at the date, whatever the splitter made of it
    rest = doc.text[clause[0]:span[0]] + after
    return not re.sub(r"\b(?:on|it was|decided|in)\b", "", rest, flags=re.I).strip(" .,:;-–—*")


def _case_asked_or_next(doc: Document, end: int) -> Mention | None:
    """The case the question names, else the subject of the next sentence (a case within its first words)."""
    asked = doc.prompt_mentions(["case"])
    if asked:
        return asked[-1]
    following = next((m for m in _cases(doc) if m.start >= end), None)
    if following is not None and len(doc.text[end:following.start].split()) <= 3:
        return following
    return None


def _cue_start(doc: Document, clause: tuple[int, int], position: int) -> int:
    before = doc.text[clause[0]:position]
    cue = list(_DECIDED.finditer(before))
    return clause[0] + cue[-1].start() if cue else position


def _judge_range(doc: Document, clause: tuple[int, int], date: DateMention, span: tuple[int, int]) -> list[Finding] | None:
    after = re.match(r"\s*(?:and|to|-|–)\s*", doc.text[span[1]:])
    if not after:
        return None
    second = next((d for d in find_dates(doc.text[span[1]:span[1] + after.end() + 6])), None)
    if second is None:
        return None
    end = span[1] + second.end
    named = [m for m in _cases(doc) if clause[0] <= m.start and m.end <= span[0]]
    entities = [e for e in (_entity(doc, m) for m in named) if e is not None and e.attributes.get("year")]
    if not entities:
        return None
    outside = [e for e in entities if not date.year <= int(e.attributes["year"]) <= second.year]
    cue = re.search(r"\b(?:decided|came down|handed down)?\s*between\s*$", doc.text[clause[0]:span[0]], re.I)
    start = clause[0] + cue.start() if cue else span[0]
    evidence = [kg_evidence(f"{e.name} was decided in {e.attributes['year']}", e.provenance) for e in entities]
    return [Finding(doc.text[start:end].strip(), (start, end), "case_year", "contradicted" if outside else "supported",
                    0.85, evidence, subject=entities[0].id)]


def _entity(doc: Document, mention: Mention) -> Entity | None:
    assert doc.kg is not None
    return next((doc.kg.entity(i) for i in mention.entity_ids if doc.kg.entity(i) is not None), None)


def _court_claims(doc: Document, seg: Segment) -> list[Finding]:
    assert doc.kg is not None
    out: list[Finding] = []
    for clause in doc.clauses(seg):
        text = doc.text[clause[0]:clause[1]]
        for match in _COURT_CLAIM.finditer(text):
            named = next(g for g in (match.group("a"), match.group("b"), match.group("c"), match.group("d"),
                                     match.group("e")) if g)
            courts = resolve_court_text(named)
            if not courts:
                continue
            position = clause[0] + match.start()
            case = doc.antecedent(position, ["case"])
            entity = _entity(doc, case) if case is not None else None
            if entity is None or not entity.attributes.get("court"):
                continue
            negated = bool(match.group("neg") or match.group("neg2")) or bool(
                re.search(r"\b(?:not|never|isn't|wasn't)\s*$", text[:match.start()]))
            actual = str(entity.attributes["court"])
            holds = actual in courts
            span = (position, clause[0] + match.end())
            while span[1] > span[0] and doc.text[span[1] - 1] in " .,;":
                span = (span[0], span[1] - 1)
            out.append(Finding(doc.text[span[0]:span[1]], span, "case_court", "supported" if holds != negated else
                               "contradicted", 0.85, [kg_evidence(f"{entity.name} was decided by {actual}",
                                                                  entity.provenance)], subject=entity.id))
    return out
