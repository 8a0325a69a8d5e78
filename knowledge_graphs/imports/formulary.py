"""`formulary`: an organisation's drug formulary as CSV, one maximum daily dose per row.

Header (any order; extra columns are ignored): drug, route, max_daily_dose, unit, source, and optionally
population (adult by default), as_of (the row's date; else the import's), setting (over-the-counter,
prescription, inpatient, outpatient), formulation, indication.

A row is authoritative for the facts it names, and only those: its `max_daily_dose` fact supersedes the
packaged label maxima for the same drug, route and population and, where the row names them, the same
setting, formulation and indication (the organisation judges doses by its formulary), and the dose
validator then cites the formulary row as evidence. A qualifier the row leaves out covers every value but
one: a row without a setting is a prescriber's limit, so the OTC Drug Facts maximum stays (one row for
ibuprofen does not make a correct "1200 mg a day over the counter" wrong). A drug the KG does not know
becomes a new drug entity (`drug:formulary:<name>`), listed in the import's summary so a misspelling is seen.
"""

from __future__ import annotations

from knowledge_graphs.curated import slugify
from knowledge_graphs.imports.errors import ErrorLog
from knowledge_graphs.imports.overlay import Overlay, Supersession
from knowledge_graphs.imports.rows import (
    checked,
    csv_records,
    decode,
    iso_date,
    one_of,
    positive_number,
    text,
)
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph
from knowledge_graphs.sources.medical import DOSE_UNITS

DOMAIN = "medical"
REQUIRED = ("drug", "route", "max_daily_dose", "unit", "source")
ROUTES = {**{r: r for r in ("oral", "intravenous", "intramuscular", "subcutaneous", "topical", "transdermal",
                            "inhalation", "rectal", "sublingual", "intranasal", "ophthalmic")},
          "po": "oral", "by mouth": "oral", "iv": "intravenous", "im": "intramuscular", "sc": "subcutaneous",
          "sq": "subcutaneous", "subcut": "subcutaneous", "inhaled": "inhalation", "pr": "rectal", "sl": "sublingual"}
POPULATIONS = {p: p for p in ("adult", "pediatric", "elderly", "renal_impairment", "hepatic_impairment")} | {
    "paediatric": "pediatric", "children": "pediatric", "geriatric": "elderly"}
UNITS = {unit.casefold(): unit for unit in DOSE_UNITS} | {"µg": "mcg", "ug": "mcg", "unit": "units", "iu": "units"}
# the label's own setting values (`labels.yaml`); a row that names none leaves the OTC maximum in place
SETTINGS = {s: s for s in ("over-the-counter", "prescription", "inpatient", "outpatient")} | {
    "otc": "over-the-counter", "nonprescription": "over-the-counter", "non-prescription": "over-the-counter",
    "rx": "prescription"}
OTC = "over-the-counter"


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(DOMAIN, stamp.overlay)
    new_drugs: dict[str, Entity] = {}
    records = csv_records(decode(data, log) or "", log, required=REQUIRED)
    for facts, supersedes in checked(records, log, lambda line, record: _row(record, line, stamp, kg, new_drugs)):
        overlay.facts += facts
        overlay.supersedes += supersedes
        overlay.rows += 1
    log.raise_if_any()
    overlay.entities += new_drugs.values()
    overlay.supersedes = list(dict.fromkeys(overlay.supersedes))
    return overlay


def _row(record: dict[str, str], line: int, stamp: ImportStamp, kg: KnowledgeGraph,
         new_drugs: dict[str, Entity]) -> tuple[list[Fact], list[Supersession]]:
    drug = text(record, "drug")
    route = one_of(record, "route", ROUTES)
    dose = positive_number(record, "max_daily_dose")
    unit = one_of(record, "unit", UNITS)
    source = text(record, "source")
    population = one_of(record, "population", POPULATIONS, default="adult")
    setting = one_of(record, "setting", SETTINGS) if text(record, "setting", required=False) else None
    as_of = iso_date(record, "as_of", required=False)
    assert drug is not None and source is not None
    provenance = stamp.provenance(source=source, line=line, what=f"{drug}, {route}, {dose:g} {unit}/day", as_of=as_of)
    qualifiers = {"route": route, "population": population, "formulary": stamp.overlay}
    named = {"population": population, "route": route}          # what the row supersedes: the facts it names
    if setting is not None:
        qualifiers["setting"] = named["setting"] = setting
    for optional in ("formulation", "indication"):
        value = text(record, optional, required=False)
        if value:
            qualifiers[optional] = named[optional] = value
    drug_ids = [e.id for e in kg.lookup(drug) if e.type == "drug"]
    if not drug_ids:
        entity_id = f"drug:formulary:{slugify(drug)}"
        new_drugs.setdefault(entity_id, Entity(entity_id, "drug", drug, [], {"formulary": stamp.overlay}, provenance))
        drug_ids = [entity_id]
    facts = [Fact(i, "max_daily_dose", value=dose, unit=unit, qualifiers=dict(qualifiers), provenance=provenance)
             for i in drug_ids]
    match = tuple(sorted(named.items()))
    unless = () if setting is not None else (("setting", OTC),)
    return facts, [Supersession(i, "max_daily_dose", match, unless) for i in drug_ids]
