"""`rxnorm-rrf`: RxNorm's concept names, `RXNCONSO.RRF` from the NLM's monthly release.

Pipe-separated, no header, a trailing pipe: RXCUI|LAT|TS|LUI|STT|SUI|ISPREF|RXAUI|SAUI|SCUI|SDUI|SAB|TTY|CODE|STR|
SRL|SUPPRESS|CVF|. Only RxNorm's own rows (SAB=RXNORM) of ingredients (TTY IN) and brand names (TTY BN) are read;
rows of other sources and term types, and suppressed or obsolete rows (SUPPRESS O or Y), are skipped. No field is
quoted: a '"' is part of the name. Every row must still have its 18 fields.

An ingredient or brand whose name the medical KG already resolves to its drugs gets a `has_rxcui` fact there
(qualifier `term_type`), so a name keeps one entity; any other becomes a drug (`rxcui:<RXCUI>`, attribute
`term_type` IN or BN): a brand without its ingredient, since RXNCONSO does not say which (RXNREL does).
Coverage: RxNorm's ingredients and brands are complete in a release (`rxnorm_tty`: IN, BN).
"""

from __future__ import annotations

from collections.abc import Iterator

from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.rows import checked, decode, text
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph

DOMAIN = "medical"
COLUMNS = ("RXCUI", "LAT", "TS", "LUI", "STT", "SUI", "ISPREF", "RXAUI", "SAUI", "SCUI", "SDUI", "SAB", "TTY", "CODE",
           "STR", "SRL", "SUPPRESS", "CVF")
TERM_TYPES = {"IN": "ingredient", "BN": "brand name"}
SKIPPED_SUPPRESS = {"O", "Y"}                  # obsolete; suppressed by RxNorm's editors
SOURCE = "RxNorm (U.S. National Library of Medicine), RXNCONSO.RRF"


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(DOMAIN, stamp.overlay)
    new_drugs: dict[str, Entity] = {}
    seen: dict[tuple[str, str], int] = {}
    records = _rrf_records(decode(data, log) or "", log)
    for facts in checked(records, log, lambda line, record: _concept(record, line, stamp, kg, new_drugs, seen)):
        if facts is not None:
            overlay.facts += facts
            overlay.rows += 1
    log.raise_if_any()
    overlay.entities += new_drugs.values()
    if overlay.rows:
        overlay.coverage = [{"index": "rxnorm_tty", "values": sorted({tty for _, tty in seen})}]
    return overlay


def _rrf_records(text_: str, log: ErrorLog) -> Iterator[tuple[int, dict[str, str]]]:
    for number, line in enumerate(text_.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if fields[-1] == "":
            fields.pop()                       # the trailing pipe
        if len(fields) != len(COLUMNS):
            log.add(number, None, f"expected {len(COLUMNS)} pipe-separated fields, found {len(fields)}")
            continue
        yield number, dict(zip(COLUMNS, fields, strict=True))


def _concept(record: dict[str, str], line: int, stamp: ImportStamp, kg: KnowledgeGraph,
             new_drugs: dict[str, Entity], seen: dict[tuple[str, str], int]) -> list[Fact] | None:
    rxcui = text(record, "RXCUI")
    if rxcui is None or not rxcui.isdigit():
        raise FieldError("RXCUI", f"must be a whole number, got {rxcui!r}")
    tty = record["TTY"].strip()
    if record["SAB"].strip() != "RXNORM" or tty not in TERM_TYPES or record["SUPPRESS"].strip() in SKIPPED_SUPPRESS:
        return None
    name = text(record, "STR")
    assert name is not None
    if (rxcui, tty) in seen:
        raise FieldError("RXCUI", f"{tty} {rxcui} already appears on line {seen[rxcui, tty]}")
    seen[rxcui, tty] = line
    provenance = stamp.provenance(source=SOURCE, line=line, what=f"RXCUI {rxcui}, {tty}, {name}")
    known = list(dict.fromkeys(e.id for e in kg.lookup(name) if e.type == "drug" and not e.id.startswith("rxcui:")))
    if known:
        return [Fact(drug_id, "has_rxcui", value=rxcui, qualifiers={"term_type": tty}, provenance=provenance)
                for drug_id in known]
    drug_id = f"rxcui:{rxcui}"
    new_drugs[drug_id] = Entity(drug_id, "drug", name, [], {"rxcui": rxcui, "term_type": tty}, provenance)
    return [Fact(drug_id, "has_rxcui", value=rxcui, qualifiers={"term_type": tty}, provenance=provenance)]
