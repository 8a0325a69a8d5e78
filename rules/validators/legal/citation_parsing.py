"""Finding case citations in text: eyecite plus a citation-shape regex for what eyecite drops.

eyecite silently drops citations whose reporter it does not know and can attach a year or party to the
wrong neighbouring citation, so the year and court are read here from the parenthetical that directly
follows each citation, and the case name from the words directly before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import reporters_db

from rules.validators.legal import eyecite_import
from rules.validators.legal.citation_tokens import citation_tokenizer

# volume + reporter-ish token (capitalised abbreviations, at least one period) + page
_CITATION_SHAPE = re.compile(
    r"\b(?P<volume>\d{1,4})\s+(?P<reporter>(?:[A-Z][A-Za-z']{0,9}\.?\s?){1,5}(?:\d(?:d|th|st|nd|rd)\.?)?)\s+"
    r"(?P<page>\d{1,7})\b"
)
# Words of statute and regulation citations, never of a case reporter: "12 C.F.R. Part 1026" and "85 Fed. Reg. 123"
# are regulations, "42 U.S.C. 1983" a statute (issue 40: a C.F.R. part was judged a reporter that does not exist).
_STATUTE_WORDS = re.compile(r"\b(?:Code|Codes|C\.\s?S|Stat|Stats|Const|Rev|Ann|Laws|Reg|Regs|Admin|Gen|Comp|Acts|"
                            r"C\.?\s?F\.?\s?R|U\.?\s?S\.?\s?C|Parts?|Pub|Title|Sec|Art|Rule|Rules)\b\.?")
_PARENTHETICAL = re.compile(r"^(?:,\s*\d+(?:[-–]\d+)?)*\s*\((?P<inside>[^()]{0,80})\)")
_YEAR = re.compile(r"\b(1[6-9]\d{2}|20\d{2})\b")
_MONTH_DAY = re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2},?", re.I)


@dataclass(frozen=True, slots=True)
class CaseCitation:
    start: int                  # span of "volume reporter page" plus its parenthetical
    end: int
    volume: str
    reporter: str               # canonical edition abbreviation when known, else as written
    page: str
    known_reporter: bool
    year: int | None
    court_text: str | None      # the court part of the parenthetical, e.g. "9th Cir."
    case_name: str | None

    @property
    def key(self) -> str:
        return citation_key(self.volume, self.reporter, self.page)


def citation_key(volume: str, reporter: str, page: str) -> str:
    return f"{volume} {re.sub(r'[^a-z0-9]', '', reporter.casefold())} {page}"


@cache
def _reporter_index() -> dict[str, str]:
    """Space/punctuation-insensitive reporter spelling -> canonical edition abbreviation."""
    index: dict[str, str] = {}
    for edition in reporters_db.EDITIONS:
        index.setdefault(_squash(edition), edition)
    for variation, editions in reporters_db.VARIATIONS_ONLY.items():
        index.setdefault(_squash(variation), editions[0])
    return index


@cache
def _law_and_journal_index() -> frozenset[str]:
    names: set[str] = set()
    for table in (reporters_db.LAWS, reporters_db.JOURNALS):
        for key, entries in table.items():
            names.add(_squash(key))
            for entry in entries:
                for variation in entry.get("variations", []) or []:
                    names.add(_squash(variation))
    names |= {_squash(x) for x in ("USC", "U.S.C.", "C.F.R.", "CFR", "Stat.", "Pub. L.", "Fed. Reg.")}
    return frozenset(names)


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.casefold())


def canonical_reporter(written: str) -> str | None:
    return _reporter_index().get(_squash(written))


def edition_dates(reporter: str) -> tuple[datetime | None, datetime | None, str] | None:
    """(start, end, reporter name) of an edition from reporters-db."""
    family = reporters_db.EDITIONS.get(reporter)
    if family is None:
        return None
    for entry in reporters_db.REPORTERS.get(family, []):
        edition = entry.get("editions", {}).get(reporter)
        if edition is not None:
            return _as_datetime(edition.get("start")), _as_datetime(edition.get("end")), entry.get("name", family)
    return None


def _as_datetime(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def find_case_citations(text: str) -> list[CaseCitation]:
    spans: list[tuple[int, int, str, str, str, bool]] = []
    # eyecite's tokenizer finds citations to reporters it knows; its metadata step (court, year, parties)
    # is skipped: it is the slow part and can attach a neighbour's year, so the context is read here.
    # Imported here: eyecite compiles its reporter regexes on import (~1 CPU second), which `auditor serve` does
    # after `/ready` (auditor.serving.deferred_imports); the first legal request waits for it if it comes sooner.
    eyecite_import.load()
    from eyecite.models import CitationToken

    _, tokens = citation_tokenizer().tokenize(text)
    for _, token in tokens:
        if not isinstance(token, CitationToken) or "page" not in token.groups or "volume" not in token.groups:
            continue
        editions = token.exact_editions or token.variation_editions
        if editions and all(e.reporter.source in ("laws", "journals") for e in editions):
            continue  # Statutes at Large, codes, law reviews: not case citations
        reporter = editions[0].short_name if editions else token.groups["reporter"]
        spans.append((token.start, token.end, token.groups["volume"], reporter, token.groups["page"], True))
    laws = _law_and_journal_index()
    for match in _CITATION_SHAPE.finditer(text):
        start, end = match.start(), match.end()
        if any(s < end and start < e for s, e, *_ in spans):
            continue
        written = match.group("reporter").strip()
        if "." not in written and canonical_reporter(written) is None:
            continue  # "2019 Congress 12": no period, no known reporter -> not citation-shaped
        if _squash(written) in laws or _is_statute_context(text, end) or _STATUTE_WORDS.search(written):
            continue  # a code or session-law citation, not a case reporter
        canonical = canonical_reporter(written)
        spans.append((start, end, match.group("volume"), canonical or written, match.group("page"), canonical is not None))
    spans.sort()
    return [_with_context(text, *span) for span in spans]


def _is_statute_context(text: str, end: int) -> bool:
    return bool(re.match(r"\s*§", text[end:end + 3]))


def _with_context(text: str, start: int, end: int, volume: str, reporter: str, page: str, known: bool) -> CaseCitation:
    year: int | None = None
    court_text: str | None = None
    found = _PARENTHETICAL.match(text[end:end + 120])
    if found:
        inside = found.group("inside")
        years = _YEAR.findall(inside)
        if years:
            year = int(years[-1])
            court_part = _MONTH_DAY.sub(" ", _YEAR.sub(" ", inside)).strip(" ,")
            court_text = court_part or None
            end = end + found.end()
    return CaseCitation(start, end, volume, reporter, page, known, year, court_text, _case_name_before(text, start))


_LEFT_PARTY = r"[A-Z][\w.'&-]*(?:,?\s+(?:[A-Z][\w.'&-]*|of|the|and|for|de|del|la|&|ex rel\.|on behalf of))*"
_CASE_NAME = re.compile(r"((?:In re|Ex parte|Matter of)\s+[^,;]+|" + _LEFT_PARTY + r"\s+v\.?\s+[^;]+)$")
_SIGNALS = re.compile(r"^(?:(?:See|See also|Cf\.|But see|Accord|In|Under|And|Also|E\.g\.,?|Compare|Citing|Quoting)\s+)+")


def _case_name_before(text: str, start: int) -> str | None:
    """The "A v. B" (or "In re X") directly before a citation, up to the previous clause boundary."""
    window = text[max(0, start - 200):start].rstrip()
    if not window.endswith(","):
        return None
    window = window[:-1]
    cut = max(window.rfind(";"), window.rfind(")"), window.rfind(":"))
    if cut >= 0:
        window = window[cut + 1:]
    match = _CASE_NAME.search(window.strip())
    if not match:
        return None
    name = _SIGNALS.sub("", match.group(1).strip())
    return name or None
