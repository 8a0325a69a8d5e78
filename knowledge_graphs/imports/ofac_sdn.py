"""`ofac-sdn`: the U.S. Treasury's public SDN list in its CSV layout (sdn.csv).

No header; twelve columns: ent_num, SDN_Name, SDN_Type, Program, Title, Call_Sign, Vess_type, Tonnage,
GRT, Vess_flag, Vess_owner, Remarks, with "-0-" for an empty field. SDN_Type is "individual", "vessel",
"aircraft", or empty for an entity; several programs are written "IRAN] [SDGT"; aliases are in the
remarks as "a.k.a. 'NAME'" (also f.k.a. / n.k.a.).

Each row becomes a party (`sdn:<ent_num>`, type person / organization / vessel / aircraft) with its
aliases (an individual's "LAST, First" also as "First LAST"), and one `listed_on` fact per program
(object `list:ofac_sdn`, qualifiers {program, as_of}) whose provenance is the row.
"""

from __future__ import annotations

import re

from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.rows import checked, csv_records, decode, text
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance

DOMAIN = "finance"
COLUMNS = ("ent_num", "SDN_Name", "SDN_Type", "Program", "Title", "Call_Sign", "Vess_type", "Tonnage", "GRT",
           "Vess_flag", "Vess_owner", "Remarks")
NULL = "-0-"
LIST_ID = "list:ofac_sdn"
LIST_NAME = "OFAC Specially Designated Nationals and Blocked Persons List"
LIST_ALIASES = ["SDN list", "OFAC SDN list", "OFAC list", "Specially Designated Nationals list",
                "Specially Designated Nationals and Blocked Persons List"]
SOURCE = "U.S. Treasury OFAC, Specially Designated Nationals (SDN) List"
PARTY_TYPES = {"individual": "person", "vessel": "vessel", "aircraft": "aircraft", "": "organization"}
_ALIAS = re.compile(r"\b[afn]\.k\.a\.,?\s*['\u2018\u2019\"]([^'\u2018\u2019\"]{2,200})['\u2018\u2019\"]", re.I)
_LEGAL_FORM = re.compile(r"[\s,]+(?:LTD|LIMITED|LLC|L\.L\.C|INC|INCORPORATED|CORP|CORPORATION|CO|COMPANY|PLC|S\.?A|"
                         r"S\.?A\.?S|S\.?R\.?L|GMBH|AG|JSC|PJSC|OJSC|OOO|ZAO|FZE|FZCO|B\.?V|N\.?V|PTE|SDN BHD)\.?$", re.I)
_PROGRAM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._/-]{0,60}$")


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(DOMAIN, stamp.overlay)
    seen: dict[str, int] = {}
    records = csv_records(decode(data, log) or "", log, columns=COLUMNS)
    for entity, facts in checked(records, log, lambda line, record: _party(record, line, stamp, seen)):
        overlay.entities.append(entity)
        overlay.facts += facts
        overlay.rows += 1
    log.raise_if_any()
    if overlay.rows:
        overlay.entities.insert(0, Entity(LIST_ID, "sanctions_list", LIST_NAME, list(LIST_ALIASES),
                                          {"publisher": "U.S. Department of the Treasury, OFAC"},
                                          Provenance(SOURCE, f"{stamp.file_name} (sha256 {stamp.file_sha256[:12]})",
                                                     stamp.as_of)))
    return overlay


def _party(record: dict[str, str], line: int, stamp: ImportStamp, seen: dict[str, int]) -> tuple[Entity, list[Fact]]:
    number = text(record, "ent_num")
    assert number is not None
    if not number.isdigit():
        raise FieldError("ent_num", f"must be a whole number, got {number!r}")
    if number in seen:
        raise FieldError("ent_num", f"{number} already appears on line {seen[number]}")
    seen[number] = line
    name = text(record, "SDN_Name", null=NULL)
    kind = (text(record, "SDN_Type", required=False, null=NULL) or "").casefold()
    if kind not in PARTY_TYPES:
        raise FieldError("SDN_Type", f"{kind!r} is not individual, vessel, aircraft or {NULL} (an entity)")
    programs = _programs(text(record, "Program", null=NULL) or "")
    remarks = text(record, "Remarks", required=False, null=NULL) or ""
    assert name is not None
    aliases = _aliases(name, kind, remarks)
    entity_id = f"sdn:{number}"
    provenance = stamp.provenance(source=SOURCE, line=line, what=f"ent_num {number}, {name}")
    attributes = {"ent_num": int(number), "sdn_type": kind or "entity", "programs": programs}
    for column in ("Title", "Call_Sign", "Vess_flag"):
        value = text(record, column, required=False, null=NULL)
        if value:
            attributes[column.casefold()] = value
    if remarks:
        attributes["remarks"] = remarks[:500]
    entity = Entity(entity_id, PARTY_TYPES[kind], name, aliases, attributes, provenance)
    facts = [Fact(entity_id, "listed_on", LIST_ID, qualifiers={"program": program, "as_of": stamp.as_of},
                  provenance=provenance) for program in programs]
    return entity, facts


def _programs(raw: str) -> list[str]:
    programs = [p.strip(" []") for p in raw.split("] [")]
    programs = [p for p in programs if p]
    if not programs:
        raise FieldError("Program", "is empty")
    bad = [p for p in programs if not _PROGRAM.match(p)]
    if bad:
        raise FieldError("Program", f"{bad[0]!r} is not a program code")
    return list(dict.fromkeys(programs))


def _aliases(name: str, kind: str, remarks: str) -> list[str]:
    aliases = [m.group(1).strip() for m in _ALIAS.finditer(remarks)]
    for form in [name, *aliases]:
        last, comma, first = form.partition(", ")
        if kind == "individual" and comma and first and "," not in first:
            aliases.append(f"{first} {last}")          # "AL-ZAWAHIRI, Ayman" is written "Ayman al-Zawahiri"
            given = first.split()
            if len(given) > 1:                         # and without middle names or patronymics
                aliases.append(f"{given[0]} {last}")
    if kind == "":                                     # "NORTHWIND MARITIME HOLDINGS LTD." is written without
        for form in [name, *aliases]:                  # its legal form, when two words or more remain
            short = _LEGAL_FORM.sub("", form).strip(" ,.")
            if short != form and len(short.split()) >= 2:
                aliases.append(short)
    return [a for a in dict.fromkeys(aliases) if a != name]
