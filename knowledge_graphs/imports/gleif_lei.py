"""`gleif-lei`: GLEIF's LEI golden copy (Level 1, "LEI-CDF") in its CSV layout.

Header, as GLEIF publishes it: LEI, Entity.LegalName, Entity.LegalAddress.Country, Entity.EntityStatus,
Registration.RegistrationStatus are read; Entity.OtherEntityNames.OtherEntityName.<n> and
Entity.TransliteratedOtherEntityNames.TransliteratedOtherEntityName.<n> give aliases; Entity.LegalJurisdiction
is kept as an attribute; the other 300-odd columns are ignored. An LEI must pass ISO 17442's check digits
(python-stdnum's `stdnum.lei`).

Each row becomes a `legal_entity` (`lei:<LEI>`) named by its legal name, with its other names and the legal
name without its legal form as aliases, and the facts `has_lei` (the LEI), `registered_in` (the country of the
legal address, a country entity of the finance KG), `entity_status` and `registration_status`. A well-formed
country code the KG does not hold (GLEIF writes Kosovo as XK) stays an attribute, without `registered_in`.
"""

from __future__ import annotations

import re

from stdnum import lei as stdnum_lei
from stdnum.exceptions import ValidationError

from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.names import without_legal_form
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.rows import checked, csv_records, decode, one_of, text
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph

DOMAIN = "finance"
REQUIRED = ("LEI", "Entity.LegalName", "Entity.LegalAddress.Country", "Entity.EntityStatus",
            "Registration.RegistrationStatus")
SOURCE = "GLEIF LEI golden copy (Level 1 LEI-CDF)"
ENTITY_STATUSES = {s.casefold(): s for s in ("ACTIVE", "INACTIVE", "NULL")}
REGISTRATION_STATUSES = {s.casefold(): s for s in (
    "PENDING_VALIDATION", "ISSUED", "DUPLICATE", "LAPSED", "MERGED", "RETIRED", "ANNULLED", "CANCELLED",
    "TRANSFERRED", "PENDING_TRANSFER", "PENDING_ARCHIVAL")}
_OTHER_NAME = re.compile(r"^Entity\.(?:Transliterated)?OtherEntityNames\.(?:Transliterated)?OtherEntityName\.\d+$")
_COUNTRY = re.compile(r"^[A-Z]{2}$")
_LEI = re.compile(r"^[A-Z0-9]{18}[0-9]{2}$")      # stdnum checks the digits, not the length


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(DOMAIN, stamp.overlay)
    seen: dict[str, int] = {}
    records = csv_records(decode(data, log) or "", log, required=REQUIRED)
    for entity, facts in checked(records, log, lambda line, record: _legal_entity(record, line, stamp, kg, seen)):
        overlay.entities.append(entity)
        overlay.facts += facts
        overlay.rows += 1
    log.raise_if_any()
    return overlay


def _legal_entity(record: dict[str, str], line: int, stamp: ImportStamp, kg: KnowledgeGraph,
                  seen: dict[str, int]) -> tuple[Entity, list[Fact]]:
    code = (text(record, "LEI") or "").upper()
    if not _LEI.match(code):
        raise FieldError("LEI", f"{code!r} is not an LEI (20 characters: 18 letters or digits, 2 check digits)")
    try:
        stdnum_lei.validate(code)
    except ValidationError as exc:
        raise FieldError("LEI", f"{code!r} fails the ISO 17442 check digits ({exc.message})") from None
    if code in seen:
        raise FieldError("LEI", f"{code} already appears on line {seen[code]}")
    name = text(record, "Entity.LegalName")
    country = (text(record, "Entity.LegalAddress.Country") or "").upper()
    if not _COUNTRY.match(country):
        raise FieldError("Entity.LegalAddress.Country", f"must be an ISO 3166 alpha-2 code, got {country!r}")
    entity_status = one_of(record, "Entity.EntityStatus", ENTITY_STATUSES)
    registration_status = one_of(record, "Registration.RegistrationStatus", REGISTRATION_STATUSES)
    assert name is not None
    seen[code] = line
    others = [value for column, raw in record.items() if _OTHER_NAME.match(column) and (value := raw.strip())]
    shorts = [short for form in (name, *others) if (short := without_legal_form(form))]
    aliases = [a for a in dict.fromkeys([*others, *shorts]) if a != name]
    entity_id = f"lei:{code}"
    provenance = stamp.provenance(source=SOURCE, line=line, what=f"LEI {code}, {name}")
    attributes = {"lei": code, "country": country, "entity_status": entity_status,
                  "registration_status": registration_status}
    jurisdiction = text(record, "Entity.LegalJurisdiction", required=False)
    if jurisdiction:
        attributes["legal_jurisdiction"] = jurisdiction
    facts = [Fact(entity_id, "has_lei", value=code, provenance=provenance),
             Fact(entity_id, "entity_status", value=entity_status, provenance=provenance),
             Fact(entity_id, "registration_status", value=registration_status, provenance=provenance)]
    if kg.entity(f"country:{country}") is not None:
        facts.insert(1, Fact(entity_id, "registered_in", f"country:{country}", provenance=provenance))
    return Entity(entity_id, "legal_entity", name, aliases, attributes, provenance), facts
