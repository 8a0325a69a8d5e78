"""`eurlex`: EU legal acts from EUR-Lex's metadata export, CSV or XML, for the legal or finance KG.

CSV, as EUR-Lex exports a search result: a header with `CELEX number`, `Title`, `Date of document` and
`Date of effect` (other columns, such as `ELI`, `Form` or `Date of end of validity`, are ignored or kept
as attributes). Dates are YYYY-MM-DD or DD/MM/YYYY; `Date of effect` may list several ("16/01/2023;
17/01/2025"): the earliest is the entry into force, the rest are kept. XML, as the EUR-Lex web service
returns a search: one `<result>` per act holding `ID_CELEX`, `EXPRESSION_TITLE`, `WORK_DATE_DOCUMENT` and
`RESOURCE_LEGAL_DATE_ENTRY-INTO-FORCE` elements, each with its value in a `<VALUE>` child.

Each act becomes an `instrument` (`celex:<CELEX>`) named by the citation its CELEX number gives
("Regulation (EU) 2022/2554" from 32022R2554, "Directive 2014/65/EU" from 32014L0065, "Regulation (EC)
No 1060/2009" from 32009R1060), with the title, the short title closing it ("(General Data Protection
Regulation)") and the CELEX number as aliases, and the facts `adopted_on` (the
date of the document) and `in_force_from` (the date of effect). A CELEX number that is not of a regulation,
directive or decision is named by its title. Coverage: the CELEX numbers imported (`celex`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.rows import checked, csv_records, decode, text
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.imports.xml_records import XmlNode, xml_elements
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph

REQUIRED = ("CELEX number", "Title", "Date of document", "Date of effect")
XML_FIELDS = {"ID_CELEX": "CELEX number", "EXPRESSION_TITLE": "Title", "WORK_DATE_DOCUMENT": "Date of document",
              "RESOURCE_LEGAL_DATE_ENTRY-INTO-FORCE": "Date of effect"}
OPTIONAL = ("ELI", "Form", "Author", "Date of end of validity")
SOURCE = "EUR-Lex (Publications Office of the European Union), metadata export"
_CELEX = re.compile(r"^(?P<sector>[0-9CE])(?P<year>\d{4})(?P<type>[A-Z]{1,2})(?P<number>\d{4})"
                    r"(?P<suffix>\(\d+\)|R\(\d+\))?$")
_DMY = re.compile(r"^(?P<day>\d{1,2})/(?P<month>\d{1,2})/(?P<year>\d{4})$")
_SHORT_TITLE = re.compile(r"\((?P<name>[A-Z][A-Za-z' -]{3,80}(?:Regulation|Directive|Act))\)"   # "(... Act)"
                          r"\s*(?:\(Text with EEA relevance\))?\s*$")
_TYPES = {"R": "Regulation", "L": "Directive", "D": "Decision"}
_LISBON = 2010          # acts are "(EU)" from the Lisbon Treaty (December 2009: read as from 2010 on)


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(kg.domain, stamp.overlay)
    seen: dict[str, int] = {}
    records = _xml_records(data, log) if data.lstrip()[:1] == b"<" else csv_records(
        decode(data, log) or "", log, required=REQUIRED)
    for entity, facts in checked(records, log, lambda line, record: _instrument(record, line, stamp, seen)):
        overlay.entities.append(entity)
        overlay.facts += facts
        overlay.rows += 1
    log.raise_if_any()
    if seen:
        overlay.coverage = [{"index": "celex", "values": sorted(seen)}]
    return overlay


def _xml_records(data: bytes, log: ErrorLog) -> Iterator[tuple[int, dict[str, str]]]:
    for node, _ in xml_elements(data, log, {"result", "RESULT"}):
        yield node.line, {column: _value(node, tag) for tag, column in XML_FIELDS.items()}


def _value(node: XmlNode, tag: str) -> str:
    """The `VALUE`s of the first `tag` element anywhere in the result, joined by '; '."""
    element = next(node.iter(tag), None)
    if element is None:
        return ""
    values = [v.text() for v in element.iter("VALUE")] or [element.text()]
    return "; ".join(v for v in values if v)


def _instrument(record: dict[str, str], line: int, stamp: ImportStamp,
                seen: dict[str, int]) -> tuple[Entity, list[Fact]]:
    celex = (text(record, "CELEX number") or "").replace(" ", "").upper()
    match = _CELEX.match(celex)
    if match is None:
        raise FieldError("CELEX number", f"{celex!r} is not a CELEX number (like 32022R2554)")
    if celex in seen:
        raise FieldError("CELEX number", f"{celex} already appears on line {seen[celex]}")
    title = text(record, "Title")
    adopted = _dates(record, "Date of document", required=True)[0]
    in_force = _dates(record, "Date of effect", required=False)
    assert title is not None
    seen[celex] = line
    citation = citation_of(celex)
    entity_id = f"celex:{celex}"
    provenance = stamp.provenance(source=SOURCE, line=line, what=f"CELEX {celex}")
    name = citation or title
    short = _SHORT_TITLE.search(title)
    aliases = [a for a in dict.fromkeys([title, *([short["name"]] if short else []), celex, f"CELEX {celex}",
                                         *_other_spellings(citation)]) if a != name]
    attributes: dict[str, object] = {"celex": celex, "title": title, "adopted_on": adopted}
    for column in OPTIONAL:
        value = text(record, column, required=False)
        if value:
            attributes[column.casefold().replace(" ", "_")] = value
    facts = [Fact(entity_id, "adopted_on", value=adopted, provenance=provenance)]
    if in_force:
        attributes["in_force_from"] = in_force[0]
        facts.append(Fact(entity_id, "in_force_from", value=in_force[0],
                          qualifiers={"later_dates": "; ".join(in_force[1:])} if in_force[1:] else {},
                          provenance=provenance))
    return Entity(entity_id, "instrument", name, aliases, attributes, provenance), facts


def citation_of(celex: str) -> str | None:
    """How an act is cited, from its CELEX number: 32022R2554 -> 'Regulation (EU) 2022/2554'."""
    match = _CELEX.match(celex)
    if match is None or match["sector"] != "3" or match["type"] not in _TYPES:
        return None
    year, number, kind = int(match["year"]), int(match["number"]), _TYPES[match["type"]]
    union = "EU" if year >= _LISBON else "EC" if year >= 1993 else "EEC"
    short_year = str(year) if year >= 1999 else f"{year % 100:02d}"
    if kind == "Directive":
        return f"Directive {short_year}/{number}/{union}"
    if year >= 2015:                                     # the common numbering: year first
        return f"{kind} ({union}) {year}/{number}"
    if kind == "Regulation":
        return f"{kind} ({union}) No {number}/{short_year}"
    return f"{kind} {short_year}/{number}/{union}"


def _other_spellings(citation: str | None) -> list[str]:
    if citation is None:
        return []
    out = [citation.replace(" No ", " No. ")] if " No " in citation else []
    return out + [re.sub(r" \((EU|EC|EEC)\)", "", citation)] if "(" in citation else out


def _dates(record: dict[str, str], name: str, *, required: bool) -> list[str]:
    raw = text(record, name, required=required)
    if raw is None:
        return []
    dates = []
    for part in (p.strip() for p in raw.split(";")):
        if not part:
            continue
        match = _DMY.match(part)
        try:
            day = (dt.date(int(match["year"]), int(match["month"]), int(match["day"])) if match
                   else dt.date.fromisoformat(part))
        except ValueError:
            raise FieldError(name, f"must be dates YYYY-MM-DD or DD/MM/YYYY, got {part!r}") from None
        dates.append(day.isoformat())
    if required and not dates:
        raise FieldError(name, "is empty")
    return sorted(dict.fromkeys(dates))
