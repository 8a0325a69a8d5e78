"""Courts named in text: resolving names and abbreviations to courts-db, Bluebook forms, impossible courts.

`resolve_court_text` maps "the Second Circuit", "2d Cir.", "3rd Cir.", "U.S. Supreme Court", "New York's
highest court", "Southern District of New York", "S.D.N.Y." to courts-db ids; the Bluebook's own forms
("2d Cir.", "3d Cir.") and the variants courts-db spells ("3rd Cir.") both resolve.

`legal.courts` judges courts named as such:
- an impossible court is contradicted: a circuit numbered above eleven ("13th Cir.", "the Thirteenth
  Circuit"), or a district a state does not have ("S.D. Del.": Delaware has one district; "C.D.N.Y.");
- an abbreviation given as the Bluebook form must be the Bluebook form: "2d Cir." and "3d Cir.", not
  "2nd Cir." / "3rd Cir.", and "Cir." not "Circ.";
- a count of the federal courts of appeals is thirteen (eleven numbered, D.C., Federal).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache, lru_cache
from typing import Any

import courts_db

from rules.claims import Document
from rules.report import Evidence
from rules.validators.base import Finding, package_source, validator

_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
             "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14}
_CIRCUIT_NUMBER = re.compile(r"\b(?P<n>\d{1,2})(?P<suffix>st|nd|rd|th|d)\s+Circ?(?P<dot>\.|uit\b)", re.I)
_CIRCUIT_WORD = re.compile(r"\b(?P<word>" + "|".join(_ORDINALS) + r")\s+Circuit\b", re.I)
_DISTRICT_ABBR = re.compile(r"(?<![\w.])(?P<dir>[NSEWMC])\.\s?D\.\s?(?P<state>(?:[A-Z][a-z]{0,5}\.\s?){1,3}|N\.Y\.|[A-Z]\.[A-Z]\.)")
_DISTRICT_NAME = re.compile(r"\b(?P<dir>Northern|Southern|Eastern|Western|Middle|Central)\s+District\s+of\s+"
                            r"(?P<state>(?:New |North |South |West |Rhode )?[A-Z][a-z]+)")
_BLUEBOOK_CUE = re.compile(r"\bBluebook\b|\babbreviat\w*|\bcitation form\b", re.I)
_SCOTUS = re.compile(r"\b(?:U\.?S\.? Supreme Court|United States Supreme Court|Supreme Court of the United States|"
                     r"the Supreme Court|SCOTUS)\b", re.I)
_STATE_NAMES = {"Delaware": "Del.", "New York": "N.Y.", "California": "Cal.", "Texas": "Tex.", "Florida": "Fla.",
                "Illinois": "Ill.", "Pennsylvania": "Pa.", "Virginia": "Va.", "Ohio": "Ohio", "Michigan": "Mich.",
                "Georgia": "Ga.", "North Carolina": "N.C.", "New Jersey": "N.J.", "Massachusetts": "Mass.",
                "Washington": "Wash.", "Missouri": "Mo.", "Louisiana": "La.", "Alabama": "Ala.", "Tennessee": "Tenn.",
                "Maryland": "Md.", "Wisconsin": "Wis.", "Minnesota": "Minn.", "Colorado": "Colo.", "Arizona": "Ariz.",
                "Oregon": "Or.", "Connecticut": "Conn.", "Kentucky": "Ky.", "Indiana": "Ind.", "Iowa": "Iowa",
                "Oklahoma": "Okla.", "Arkansas": "Ark.", "Mississippi": "Miss.", "Utah": "Utah", "Nevada": "Nev.",
                "Kansas": "Kan.", "Nebraska": "Neb.", "Idaho": "Idaho", "Maine": "Me.", "Vermont": "Vt.",
                "New Hampshire": "N.H.", "Rhode Island": "R.I.", "Montana": "Mont.", "Wyoming": "Wyo.",
                "South Carolina": "S.C.", "West Virginia": "W. Va.", "Alaska": "Alaska", "Hawaii": "Haw.",
                "New Mexico": "N.M.", "North Dakota": "N.D.", "South Dakota": "S.D."}
_HIGHEST = re.compile(r"\b(?P<state>New York|New Hampshire|California|Texas|[A-Z][a-z]+)(?:'s|’s)\s+(?:highest|top)\s+court\b")
_STATE_HIGH_COURT = {"New York": "ny", "New Hampshire": "nh", "California": "cal", "Texas": "tex"}


@cache
def _districts_by_state() -> dict[str, set[str]]:
    """State abbreviation ("Del.", "N.Y.") -> the district-court citation strings courts-db lists for it."""
    out: dict[str, set[str]] = {}
    for court in courts_db.load_courts_db():
        cite = str(court.get("citation_string") or "")
        if re.search(r"\.[A-Z]$", cite):
            cite += "."         # courts-db writes "E.D.N.Y" beside "S.D.N.Y.": the Eastern District must not go missing
        found = re.fullmatch(r"(?:([NSEWMC])\.\s?)?D\.\s?(.+)", cite)
        # courts-db's `type` is not reliable for district courts ("E.D. Pa." is typed appellate): federal + the form
        if found and court.get("system") == "federal" and "bankr" not in cite.casefold():
            out.setdefault(re.sub(r"\s", "", found.group(2)), set()).add(re.sub(r"\s", "", cite))
    return out


@lru_cache(maxsize=4096)
def resolve_court_text(text: str) -> tuple[str, ...]:
    """courts-db ids for a court named in `text` (empty when nothing resolves)."""
    if _SCOTUS.search(text):
        return ("scotus",)
    circuit = _CIRCUIT_NUMBER.search(text) or _CIRCUIT_WORD.search(text)
    if circuit:
        number = int(circuit.group("n")) if "n" in circuit.groupdict() and circuit.groupdict().get("n") else \
            _ORDINALS[circuit.group("word").casefold()]
        return (f"ca{number}",) if 1 <= number <= 11 else ()
    if re.search(r"\bD\.C\. Cir(?:cuit|\.)|\bD\.C\. Circuit\b", text):
        return ("cadc",)
    if re.search(r"\bFed(?:eral|\.) Cir(?:cuit|\.)", text):
        return ("cafc",)
    highest = _HIGHEST.search(text)
    if highest and highest.group("state") in _STATE_HIGH_COURT:
        return (_STATE_HIGH_COURT[highest.group("state")],)
    try:
        found = courts_db.find_court(text)
    except Exception:      # courts-db's regexes are third-party data: never let them break a verification
        found = []
    return tuple(c for c in found if not c.endswith("b"))   # bankruptcy courts are never meant in prose


@validator("legal.courts")
def courts(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Impossible courts, Bluebook abbreviations and the number of federal courts of appeals."""
    findings: list[Finding] = []
    source, locator = package_source("courts-db"), "courts_db (court names and citation strings)"
    for seg in doc.segments:
        for match in _CIRCUIT_NUMBER.finditer(seg.text):
            span = (seg.start + match.start(), seg.start + match.end())
            number = int(match.group("n"))
            scope = doc.text[doc.clause_of(span[0])[0]:doc.clause_of(span[0])[1]] + " " + seg.heading + " " + \
                " ".join(c.header for c in seg.cells)
            if number > 11:
                findings.append(_finding(doc, span, "contradicted", 0.95, f"there is no {match.group(0)}: the federal "
                                         "courts of appeals are the First through Eleventh, D.C. and Federal Circuits",
                                         source, locator))
            elif _BLUEBOOK_CUE.search(scope) or doc.prompt and _BLUEBOOK_CUE.search(doc.prompt):
                findings.append(_bluebook(doc, span, match, source, locator))
        for match in _CIRCUIT_WORD.finditer(seg.text):
            number = _ORDINALS[match.group("word").casefold()]
            if number > 11:
                span = (seg.start + match.start(), seg.start + match.end())
                findings.append(_finding(doc, span, "contradicted", 0.95, f"there is no {match.group(0)}", source, locator))
        for match in re.finditer(r"\bD\.C\. Circ\.", seg.text):
            span = (seg.start + match.start(), seg.start + match.end())
            findings.append(_finding(doc, span, "contradicted", 0.85, "the Bluebook abbreviation is 'D.C. Cir.'", source, locator))
        findings += _districts(doc, seg.start, seg.text, source, locator)
        for match in re.finditer(r"\b(?P<n>\d{1,2}|thirteen|twelve|eleven)\s+(?:federal\s+)?(?:courts of appeals?|"
                                 r"(?:federal\s+)?circuit courts(?: of appeals)?|circuits)\b", seg.text, re.I):
            value = {"thirteen": 13, "twelve": 12, "eleven": 11}.get(match.group("n").casefold()) or int(match.group("n"))
            span = (seg.start + match.start(), seg.start + match.end())
            findings.append(_finding(doc, span, "supported" if value == 13 else "contradicted", 0.85,
                                     "there are 13 federal courts of appeals (First through Eleventh, D.C., Federal)",
                                     source, locator))
    return findings


def _bluebook(doc: Document, span: tuple[int, int], match: re.Match[str], source: str, locator: str) -> Finding:
    number, suffix = int(match.group("n")), match.group("suffix").casefold()
    right = {2: "d", 3: "d"}.get(number, {1: "st"}.get(number, "th"))
    ok = suffix == right and match.group("dot") == "."
    form = f"{number}{right} Cir."
    return _finding(doc, span, "supported" if ok else "contradicted", 0.85,
                    f"the Bluebook abbreviation is '{form}'" + ("" if ok else f", not '{match.group(0)}'"), source, locator)


def _districts(doc: Document, offset: int, text: str, source: str, locator: str) -> list[Finding]:
    out = []
    known = _districts_by_state()
    for match in list(_DISTRICT_ABBR.finditer(text)) + list(_DISTRICT_NAME.finditer(text)):
        state = match.group("state").strip()
        abbreviation = _STATE_NAMES.get(state, state)
        key = re.sub(r"\s", "", abbreviation)
        if key not in known:
            continue
        direction = match.group("dir")[0].upper()
        claimed = f"{direction}.D.{key}"
        if claimed in known[key]:
            # an existing district says nothing about the case it decided: a claim only where courts are the topic
            if match.re is _DISTRICT_ABBR and _BLUEBOOK_CUE.search(text + " " + (doc.prompt or "")):
                out.append(_finding(doc, (offset + match.start(), offset + match.end()), "supported", 0.85,
                                    f"{match.group(0)} is a federal district court", source, locator))
            continue
        names = ", ".join(sorted(known[key]))
        out.append(_finding(doc, (offset + match.start(), offset + match.end()), "contradicted", 0.9,
                            f"{state} has no such district: its federal district courts are {names}", source, locator))
    return out


def _finding(doc: Document, span: tuple[int, int], verdict: str, confidence: float, why: str, source: str,
             locator: str) -> Finding:
    return Finding(doc.text[span[0]:span[1]], span, "court_name", verdict, confidence,  # type: ignore[arg-type]
                   [Evidence(kind="registry", description=why, source=source, locator=locator)])
