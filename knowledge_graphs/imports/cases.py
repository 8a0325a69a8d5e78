"""`cases`: U.S. Supreme Court decisions in the Supreme Court Database's CSV layout (scdb.wustl.edu).

Header, as the SCDB case-centred files have it: caseName, usCite, dateDecision (M/D/YYYY or YYYY-MM-DD),
and optionally caseId, sctCite, ledCite, lexisCite, docket, term; every other SCDB column is ignored.
A row needs a caseName, a dateDecision, and a usCite, sctCite or ledCite (in that preference) whose
reporter reporters-db knows.

Each row becomes a case entity (`case:scdb-<caseId>`, or the name and citation when there is no caseId)
with the attributes and facts the legal validators read (citation, volume, reporter, page, year, court
scotus), so an imported case joins the same case index as the packaged landmark cases.
"""

from __future__ import annotations

from knowledge_graphs.curated import CuratedDataError, slugify
from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.rows import checked, csv_records, decode, iso_date, text
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.model import KnowledgeGraph
from knowledge_graphs.sources.legal import case_record, parse_citation

DOMAIN = "legal"
REQUIRED = ("caseName", "usCite", "dateDecision")
CITATION_COLUMNS = ("usCite", "sctCite", "ledCite")
SOURCE = "Supreme Court Database (SCDB) case-centred data"


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(DOMAIN, stamp.overlay)
    seen: dict[str, int] = {}
    records = csv_records(decode(data, log) or "", log, required=REQUIRED)
    for entity, facts in checked(records, log, lambda line, record: _case(record, line, stamp, kg, seen)):
        overlay.entities.append(entity)
        overlay.facts += facts
        overlay.rows += 1
    log.raise_if_any()
    return overlay


def _case(record: dict[str, str], line: int, stamp: ImportStamp, kg: KnowledgeGraph, seen: dict[str, int]):
    name = text(record, "caseName")
    decided = iso_date(record, "dateDecision", us_format=True)
    column, citation = next(((c, v) for c in CITATION_COLUMNS if (v := text(record, c, required=False))), (None, None))
    if citation is None or column is None:
        raise FieldError("usCite", "no citation: give usCite (or sctCite / ledCite)")
    try:
        volume, reporter, page = parse_citation(citation, where=column)
    except CuratedDataError:
        raise FieldError(column, f"{citation!r} is not 'volume reporter page'") from None
    if kg.entity(f"reporter:{reporter}") is None:
        raise FieldError(column, f"reporter {reporter!r} is not in reporters-db")
    case_number = text(record, "caseId", required=False)
    assert name is not None and decided is not None
    case_id = f"case:scdb-{slugify(case_number)}" if case_number else f"case:{slugify(name)}-{volume}-{page}"
    if case_id in seen:
        raise FieldError("caseId" if case_number else column, f"the same case as line {seen[case_id]}")
    seen[case_id] = line
    provenance = stamp.provenance(source=SOURCE, line=line, what=f"{name}, {citation}")
    attributes = {"decided": decided, "scdb_case_id": case_number}
    for optional in ("docket", "term", *(c for c in CITATION_COLUMNS if c != column)):
        value = text(record, optional, required=False)
        if value:
            attributes[optional] = value
    return case_record(case_id, name, [], citation, int(decided[:4]), "scotus", provenance, attributes)
