"""`openfda-label`: FDA drug labels (SPL) as openFDA's bulk download (`drug-label-0001-of-0013.json`) gives them.

{"meta": {...}, "results": [{"set_id": "...", "effective_time": "20240115", "openfda": {"brand_name": [...],
"generic_name": [...], "pharm_class_epc": ["Biguanide [EPC]"]}, "boxed_warning": [...], "contraindications":
[...]}, ...]}. A label whose `openfda` section is empty (the FDA has not harmonised it: many unapproved and
repackaged products) adds nothing and is not an error. A bad label is named by its line and field path
(`results[3].openfda.generic_name`).

Each label's generic name is resolved to the medical KG's drug (as written, then without its salt:
"METFORMIN HYDROCHLORIDE" is metformin); a generic the KG does not know (combinations, mostly) becomes
`drug:openfda:<name>`. The drug gets its brand names as aliases and `has_brand` facts, an `in_class` fact per
established pharmacologic class (`drug_class:<name>`, the KG's class where it has one), `boxed_warning` (the
warning's first sentence, as a value) and `contraindication_text` facts. The label's effective time is the
as-of date of its facts. Repeated labels of one drug (repackagers) add each brand, class and text once.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from knowledge_graphs.curated import slugify
from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.json_records import JsonItem, checked_items, json_array
from knowledge_graphs.imports.names import first_sentence
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.rows import decode
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance, normalise_alias

DOMAIN = "medical"
SOURCE = "FDA drug label (SPL) via openFDA"
MAX_TEXT = 1500
_SALTS = re.compile(r"\s+(?:hydrochloride|hcl|hydrobromide|sodium|potassium|calcium|magnesium|sulfate|sulphate|"
                    r"phosphate|citrate|maleate|mesylate|besylate|tartrate|succinate|fumarate|acetate|bromide|"
                    r"chloride|monohydrate|dihydrate|trihydrate|anhydrous)\b", re.I)
_EPC = re.compile(r"^(?P<name>.+?)\s*\[EPC\]$")


class _Labels:
    """What the labels add, each drug's aliases, classes and texts once."""

    def __init__(self, stamp: ImportStamp, kg: KnowledgeGraph) -> None:
        self.stamp, self.kg = stamp, kg
        self.drugs: dict[str, Entity] = {}          # drug id -> the overlay's entity (new, or aliases for the KG's)
        self.classes: dict[str, Entity] = {}
        self.seen: set[tuple[str, str, str]] = set()

    def label(self, item: JsonItem) -> list[Fact] | None:
        """The facts of one label; None for a label without openFDA fields (skipped)."""
        record = item.value
        if not isinstance(record, dict):
            raise FieldError(None, "must be a JSON object (one label)")
        openfda = record.get("openfda") or {}
        if not isinstance(openfda, dict):
            raise FieldError("openfda", "must be an object")
        generics, brands, classes = (_strings(openfda, key, "openfda.") for key in
                                     ("generic_name", "brand_name", "pharm_class_epc"))
        warnings, contraindications = _strings(record, "boxed_warning"), _strings(record, "contraindications")
        effective = _effective_time(record)
        if not generics:
            return None
        set_id = str(record.get("set_id") or record.get("id") or "")
        provenance = self.stamp.provenance(source=SOURCE + (f", set id {set_id}" if set_id else ""), line=item.line,
                                           what=f"results[{item.index}], {generics[0]}", as_of=effective)
        facts: list[Fact] = []
        for drug_id in self._drugs(generics, provenance):
            for brand in brands:
                if normalise_alias(brand) in {normalise_alias(g) for g in generics}:
                    continue                        # a generic sold under its own name
                self._alias(drug_id, brand, provenance)
                facts += self._once(Fact(drug_id, "has_brand", value=brand, provenance=provenance))
            for written in classes:
                match = _EPC.match(written)
                class_id = self._class(match["name"] if match else written, provenance)
                facts += self._once(Fact(drug_id, "in_class", class_id, qualifiers={"class_type": "EPC"},
                                         provenance=provenance))
            for warning in warnings:
                facts += self._once(Fact(drug_id, "boxed_warning", value=first_sentence(warning),
                                         provenance=provenance))
            for contraindication in contraindications:
                flat = " ".join(contraindication.split())
                value = flat if len(flat) <= MAX_TEXT else flat[:MAX_TEXT - 1].rstrip() + "…"
                facts += self._once(Fact(drug_id, "contraindication_text", value=value, provenance=provenance))
        return facts

    def _drugs(self, generics: list[str], provenance: Provenance) -> list[str]:
        ids: list[str] = []
        for generic in generics:
            found = [e.id for e in self.kg.lookup(generic) if e.type == "drug"]
            if not found:
                found = [e.id for e in self.kg.lookup(_SALTS.sub("", generic)) if e.type == "drug"]
            if not found:
                drug_id = f"drug:openfda:{slugify(generic)}"
                self.drugs.setdefault(drug_id, Entity(drug_id, "drug", generic.capitalize(), [], {"openfda": True},
                                                      provenance))
                found = [drug_id]
            ids += found
        return list(dict.fromkeys(ids))

    def _alias(self, drug_id: str, brand: str, provenance: Provenance) -> None:
        entity = self.drugs.get(drug_id)
        if entity is None:
            known = self.kg.entity(drug_id)
            assert known is not None
            entity = self.drugs[drug_id] = Entity(drug_id, "drug", known.name, [], {}, provenance)
        if brand not in entity.aliases and brand != entity.name:
            entity.aliases.append(brand)

    def _class(self, name: str, provenance: Provenance) -> str:
        known = [e.id for e in self.kg.lookup(name) if e.type == "drug_class"]
        if known:
            return known[0]
        class_id = f"drug_class:{slugify(name)}"
        if self.kg.entity(class_id) is None:
            self.classes.setdefault(class_id, Entity(class_id, "drug_class", name, [], {"class_type": "EPC"},
                                                     provenance))
        return class_id

    def _once(self, fact: Fact) -> list[Fact]:
        key = (fact.subject, fact.relation, str(fact.object or fact.value).casefold())
        if key in self.seen:
            return []
        self.seen.add(key)
        return [fact]


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(DOMAIN, stamp.overlay)
    document = json_array(decode(data, log) or "", log, "results")
    log.raise_if_any()
    assert document is not None
    labels = _Labels(stamp, kg)
    for facts in checked_items(document.items, log, "results", labels.label):
        if facts is not None:
            overlay.facts += facts
            overlay.rows += 1
    log.raise_if_any()
    overlay.entities += [*labels.classes.values(), *labels.drugs.values()]
    return overlay


def _strings(record: dict[str, Any], key: str, prefix: str = "") -> list[str]:
    value = record.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FieldError(prefix + key, "must be a list of text")
    return [v.strip() for v in value if v.strip()]


def _effective_time(record: dict[str, Any]) -> str:
    raw = record.get("effective_time")
    try:
        return dt.datetime.strptime(str(raw), "%Y%m%d").date().isoformat()
    except ValueError:
        raise FieldError("effective_time", f"must be a date YYYYMMDD, got {raw!r}") from None
