"""Medical KG: drugs (drug-named-entity-recognition), ICD-10-CM (simple-icd-10-cm), curated labels.

Curated files in data/medical/:
- conditions.yaml / drug_classes.yaml: generic `entities:` records (conditions carry attributes.icd10cm).
- labels.yaml: one record per FDA label (`labels:`); its facts take their locator from the label name
  plus the label section each kind of fact comes from (dose -> section 2, indications -> section 1, ...).
"""

from __future__ import annotations

import bz2
import importlib.util
import pickle
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from knowledge_graphs.curated import (
    CuratedDataError,
    Manifest,
    load_generic,
    load_manifest,
    provenance_of,
    read_yaml,
    records,
    require,
    slugify,
)
from knowledge_graphs.model import Entity, Fact, Provenance
from knowledge_graphs.sources.common import DomainData, package_provenance, package_versions

DRUG_NER = "drug-named-entity-recognition"
ICD10CM = "simple-icd-10-cm"
DOSE_UNITS = frozenset({"mg", "mcg", "g", "units", "mg/kg"})   # the schema's units
SEVERITIES = frozenset({"major", "moderate"})
# Which label section each kind of curated fact is read from (PLR-format US prescribing information).
LABEL_SECTIONS = {
    "indicated_for": "section 1 INDICATIONS AND USAGE",
    "max_daily_dose": "section 2 DOSAGE AND ADMINISTRATION",
    "max_single_dose": "section 2 DOSAGE AND ADMINISTRATION",
    "contraindicated_in": "section 4 CONTRAINDICATIONS",
    "interacts_with": "section 4 CONTRAINDICATIONS / section 7 DRUG INTERACTIONS",
    "in_class": "Highlights: established pharmacologic class",
    "has_brand": "section 11 DESCRIPTION / section 16 HOW SUPPLIED",
}


def build(data_dir: Path) -> DomainData:
    manifest = load_manifest("medical", data_dir)
    out = DomainData(data_version=f"{manifest.version};{package_versions(DRUG_NER, ICD10CM)}")
    drugs, name_to_id = drug_entities(manifest)
    out.entities += drugs
    out.entities += icd10cm_entities(manifest)
    known_codes = {e.id for e in out.entities if e.type == "icd10cm_code"}

    for filename in ("conditions.yaml", "drug_classes.yaml", "approvals.yaml"):
        entities, facts = load_generic(data_dir / "medical" / filename, manifest)
        out.entities += entities
        out.facts += facts
    conditions = {e.id: e for e in out.entities if e.type == "condition"}
    out.facts += condition_code_facts(conditions.values(), known_codes)
    classes = {e.id for e in out.entities if e.type == "drug_class"}
    out.facts += label_facts(data_dir / "medical" / "labels.yaml", manifest, name_to_id, set(conditions), classes)
    out.entities += brand_aliases(out.facts)
    return out


def brand_aliases(facts: list[Fact]) -> list[Entity]:
    """Curated brand names become aliases of the labelled drug ("Synthroid" -> levothyroxine, not the
    dictionary's separate thyroxine entry), merged into the dictionary entity by id."""
    by_drug: dict[str, list[str]] = {}
    for fact in facts:
        if fact.relation == "has_brand":
            by_drug.setdefault(fact.subject, []).append(str(fact.value))
    return [Entity(drug_id, "drug", names[0], names) for drug_id, names in by_drug.items()]


_UPPER_TOKENS = frozenset({"XR", "XL", "SR", "ER", "CR", "IV", "OTC", "IB", "ODT", "LA", "DS"})
_LABEL_BRANDS = re.compile(r"^(?P<names>[A-Z][A-Z0-9-]+(?:\s+(?:[A-Z0-9-]{2,}|/))*)\s*\(|\((?P<tail>[A-Z][A-Z0-9-]{2,})\)\s*$")


def brands_in_label(label: str) -> list[str]:
    """Brand names a label's title states: "GLUCOPHAGE / GLUCOPHAGE XR (metformin ...)" -> Glucophage,
    Glucophage XR; "lovastatin tablets (MEVACOR)" -> Mevacor; a generic title ("prednisone tablets") -> none."""
    found = _LABEL_BRANDS.search(label)
    if not found:
        return []
    raw = found.group("names") or found.group("tail") or ""
    return [" ".join(w if w in _UPPER_TOKENS else w.capitalize() if "-" not in w else
                     "-".join(p if p in _UPPER_TOKENS else p.capitalize() for p in w.split("-"))
                     for w in name.split())
            for name in (part.strip() for part in raw.split("/")) if name]


# -- package data -------------------------------------------------------------------------------------
def _drug_dictionary() -> dict[str, Any]:
    # Read the package's shipped dictionary file without importing the package: its __init__ builds an
    # n-gram index (~1 s) and wires optional online look-ups (OMOP, structure downloads) we keep off.
    path = _package_dir("drug_named_entity_recognition") / "drug_ner_dictionary.pkl.bz2"
    with bz2.open(path, "rb") as handle:
        return pickle.load(handle)  # noqa: S301 - the package's own data file, installed with it


def drug_ids(canonical_to_data: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Canonical dictionary name -> entity id.

    `drug:<DrugBank id>` when there is one (unique per drug in the dictionary); else `drug:mesh:<MeSH id>`
    when no other DrugBank-less drug carries the same MeSH id (the dictionary sometimes gives a class-level
    MeSH id, shared by up to ~100 drugs, and merging those would be wrong); else `drug:mesh:<id>:<slug>`;
    drugs with neither id (mostly combination products) get `drug:name:<slug>`.
    """
    mesh_counts = Counter(d["mesh_id"] for d in canonical_to_data.values() if not d.get("drugbank_id") and d.get("mesh_id"))
    ids = {}
    for canonical, data in canonical_to_data.items():
        if data.get("drugbank_id"):
            ids[canonical] = f"drug:{data['drugbank_id']}"
        elif data.get("mesh_id") and mesh_counts[data["mesh_id"]] == 1:
            ids[canonical] = f"drug:mesh:{data['mesh_id']}"
        elif data.get("mesh_id"):
            ids[canonical] = f"drug:mesh:{data['mesh_id']}:{slugify(canonical)}"
        else:
            ids[canonical] = f"drug:name:{slugify(canonical)}"
    return ids


def drug_entities(manifest: Manifest) -> tuple[list[Entity], dict[str, str]]:
    """Every dictionary drug (ids as in `drug_ids`); also a lower-case name/synonym -> id map."""
    dictionary = _drug_dictionary()
    canonical_to_data: dict[str, dict[str, Any]] = dictionary["drug_canonical_to_data"]
    variant_data: dict[str, dict[str, Any]] = dictionary["drug_variant_to_variant_data"]
    synonyms: dict[str, list[str]] = {}
    for variant, canonicals in dictionary["drug_variant_to_canonical"].items():
        for canonical in canonicals:
            synonyms.setdefault(canonical, []).append(variant)

    provenance = package_provenance(DRUG_NER, "drug_ner_dictionary.pkl.bz2: drug_canonical_to_data", manifest, "drug_ner")
    ids = drug_ids(canonical_to_data)
    by_id: dict[str, Entity] = {}
    name_to_id: dict[str, str] = {}
    for canonical, data in canonical_to_data.items():
        entity_id = ids[canonical]
        variants = synonyms.get(canonical, [])
        if entity_id in by_id:   # two dictionary names for one DrugBank/MeSH id: one entity, all names
            known = by_id[entity_id]
            known.aliases.extend(v for v in [canonical, *variants] if v not in known.aliases)
        else:
            attributes = {k: data[k] for k in ("drugbank_id", "mesh_id", "medline_plus_id") if data.get(k)}
            brands = [v for v in variants if variant_data.get(v, {}).get("is_brand")]
            if brands:
                attributes["brand_names"] = brands
            by_id[entity_id] = Entity(entity_id, "drug", data.get("name") or canonical,
                                      list(dict.fromkeys([canonical, *variants])), attributes, provenance)
        name_to_id.setdefault(canonical.casefold(), entity_id)
    for variant, canonicals in dictionary["drug_variant_to_canonical"].items():
        targets = {ids[c] for c in canonicals if c in ids}
        if len(targets) == 1:    # only unambiguous synonyms resolve curated names
            name_to_id.setdefault(variant.casefold(), targets.pop())
    return list(by_id.values()), name_to_id


def _package_dir(module: str) -> Path:
    """Where an installed package's files are, found without importing (and so running) the package."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise CuratedDataError(f"package {module} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def icd10cm_entities(manifest: Manifest) -> list[Entity]:
    """ICD-10-CM chapters, blocks, categories and subcategories from simple-icd-10-cm's shipped files.

    We read the package's tabular XML and code list directly instead of importing the package: its
    import builds a tree that also materialises the ~51k 7th-character codes (e.g. S72.001A) and costs
    ~1.5 s CPU, which alone would break the medical KG's ~3 s load budget. The extended codes add no new
    concept; validators that need them ask simple_icd_10_cm.is_valid_item. tests/knowledge_graphs checks
    that this reading agrees with the package's own API (codes, descriptions, billable flags).
    """
    folder = _package_dir("simple_icd_10_cm") / "data"
    tabular = next(folder.glob("icd10c-tabular-*.xml"))
    code_list = next(folder.glob("code-list-*.txt"))
    # The package drops XML codes missing from its code list (special rules not expressed in the XML).
    confirmed = {line.split(" ")[0] for line in code_list.read_text(encoding="utf-8").splitlines() if line}
    provenance = package_provenance(ICD10CM, f"{tabular.name} + {code_list.name}", manifest, "icd10cm")
    root = ElementTree.parse(tabular).getroot()
    entities: list[Entity] = []

    def add(code: str, kind: str, description: str, billable: bool) -> None:
        aliases = [code] if kind in ("chapter", "block") or "." not in code else [code, code.replace(".", "")]
        entities.append(Entity(f"icd10cm:{code}", "icd10cm_code", description, aliases,
                               {"code": code, "kind": kind, "billable": billable}, provenance))

    def walk(diag: ElementTree.Element, seven_chr_inherited: bool) -> None:
        code = diag.findtext("name", "").strip()
        if code.replace(".", "") not in confirmed:
            return
        has_seven_chr = seven_chr_inherited or diag.find("sevenChrDef") is not None
        children = [c for c in diag.findall("diag") if c.findtext("name", "").replace(".", "") in confirmed]
        # Billable (a leaf in the package's terms): no sub-codes and no 7th character to add.
        add(code, "category" if len(code) == 3 else "subcategory", diag.findtext("desc", "").strip(),
            not children and not has_seven_chr)
        for child in children:
            walk(child, has_seven_chr)

    for chapter in root.iter("chapter"):
        add(chapter.findtext("name", "").strip(), "chapter", chapter.findtext("desc", "").strip(), False)
        for section in chapter.findall("section"):
            block = section.get("id", "")
            if "-" in block:   # a one-category block ("B10") is the same code as its category: keep one
                add(block, "block", section.findtext("desc", "").strip(), False)
            for diag in section.findall("diag"):
                walk(diag, False)
    return entities


# -- curated data -------------------------------------------------------------------------------------
def condition_code_facts(conditions: Iterable[Entity], known_codes: set[str]) -> list[Fact]:
    facts = []
    for condition in conditions:
        for code in condition.attributes.get("icd10cm", []):
            target = f"icd10cm:{code}"
            if target not in known_codes:
                raise CuratedDataError(f"condition {condition.id}: ICD-10-CM code {code!r} is not in {ICD10CM}")
            facts.append(Fact(condition.id, "has_icd10cm_code", target, provenance=condition.provenance))
    return facts


def label_facts(path: Path, manifest: Manifest, name_to_id: dict[str, str],
                conditions: set[str], classes: set[str]) -> list[Fact]:
    """Facts from `labels:` records; every reference must resolve, so a typo fails loudly, naming the record."""
    reader = _LabelReader(name_to_id, conditions, classes)
    for where, rec in records(read_yaml(path), "labels", path):
        require(rec, ("drug",), where=where)
        reader.read(rec, provenance_of(rec, manifest, where=where, locator_key="label"), where)
    return reader.facts


@dataclass(slots=True)
class _LabelReader:
    name_to_id: dict[str, str]
    conditions: set[str]
    classes: set[str]
    facts: list[Fact] = field(default_factory=list)
    seen: set[tuple[str, str, str]] = field(default_factory=set)

    def read(self, rec: dict[str, Any], label: Provenance, where: str) -> None:
        subject = self.drug(rec["drug"], where)
        for slug in rec.get("classes") or []:
            self.add(Fact(subject, "in_class", self.ref("drug_class", slug, self.classes, where),
                          provenance=_section(label, "in_class")))
        for relation in ("indicated_for", "contraindicated_in"):
            for item in rec.get(relation) or []:
                # a condition slug, or {condition, label?, section?, ...qualifiers} (severity, therapy, ...)
                entry = item if isinstance(item, dict) else {"condition": item}
                require(entry, ("condition",), where=f"{where} {relation}")
                qualifiers = {k: v for k, v in entry.items() if k not in ("condition", "label", "section")}
                self.add(Fact(subject, relation, self.ref("condition", entry["condition"], self.conditions, where),
                              qualifiers=qualifiers, provenance=_section(label, relation, entry)))
        explicit = {str(b.get("name", "")).casefold() for b in rec.get("brands") or [] if isinstance(b, dict)}
        for name in brands_in_label(str(label.locator)):
            if name.casefold() not in explicit:
                self.facts.append(Fact(subject, "has_brand", value=name, provenance=_section(label, "has_brand")))
        for brand in rec.get("brands") or []:
            # {name, formulation?, salt?, setting?, indication?, label?}: what a brand name says about the product
            inner = f"{where} brands {brand.get('name') if isinstance(brand, dict) else brand!r}"
            if not isinstance(brand, dict):
                raise CuratedDataError(f"{inner}: each brand must be a mapping with a name")
            require(brand, ("name",), where=inner)
            qualifiers = {k: v for k, v in brand.items() if k not in ("name", "label", "section")}
            self.facts.append(Fact(subject, "has_brand", value=str(brand["name"]), qualifiers=qualifiers,
                                   provenance=_section(label, "has_brand", brand)))
        for relation in ("max_daily_dose", "max_single_dose"):
            for dose in rec.get(relation) or []:
                self.facts.append(_dose_fact(subject, relation, dose, label, f"{where} {relation}"))
        for item in rec.get("no_interaction_with") or []:
            # the label says the pair was studied and does not interact (e.g. levetiracetam and warfarin)
            inner = f"{where} no_interaction_with {item.get('drug')!r}"
            require(item, ("drug", "finding"), where=inner)
            other = self.drug(item["drug"], inner)
            provenance = _section(label, "interacts_with", item)
            qualifiers = {"finding": str(item["finding"])}
            self.add(Fact(subject, "no_interaction_with", other, qualifiers=qualifiers, provenance=provenance))
            self.add(Fact(other, "no_interaction_with", subject, qualifiers=dict(qualifiers), provenance=provenance))
        for item in rec.get("interacts_with") or []:
            inner = f"{where} interacts_with {item.get('drug') or item.get('class')!r}"
            if item.get("class") and not item.get("drug"):
                # a class-level partner the dictionary has no single drug for ("alcohol", "carbapenems")
                require(item, ("class", "severity", "effect"), where=inner)
                item = {**item, "drug": None}
            else:
                require(item, ("drug", "severity", "effect"), where=inner)
            if item["severity"] not in SEVERITIES:
                raise CuratedDataError(f"{inner}: severity must be one of {sorted(SEVERITIES)}")
            other = (self.ref("drug_class", item["class"], self.classes, inner) if item["drug"] is None
                     else self.drug(item["drug"], inner))
            qualifiers = {"severity": item["severity"], "effect": str(item["effect"])}
            provenance = _section(label, "interacts_with", item)
            # Interactions are symmetric: store both directions so either drug's facts() finds it.
            self.add(Fact(subject, "interacts_with", other, qualifiers=qualifiers, provenance=provenance))
            self.add(Fact(other, "interacts_with", subject, qualifiers=dict(qualifiers), provenance=provenance))

    def add(self, fact: Fact) -> None:
        if fact.object is not None:     # an interaction curated on both labels stays one fact per direction
            key = (fact.subject, fact.relation, fact.object)
            if key in self.seen:
                return
            self.seen.add(key)
        self.facts.append(fact)

    def drug(self, name: str, where: str) -> str:
        entity_id = self.name_to_id.get(str(name).casefold())
        if entity_id is None:
            raise CuratedDataError(f"{where}: drug {name!r} is not in {DRUG_NER}'s dictionary")
        return entity_id

    @staticmethod
    def ref(kind: str, value: str, known: set[str], where: str) -> str:
        entity_id = f"{kind}:{value}"
        if entity_id not in known:
            raise CuratedDataError(f"{where}: unknown {kind} {value!r}")
        return entity_id


def _section(label: Provenance, relation: str, item: dict[str, Any] | None = None) -> Provenance:
    """Label name + the section this kind of fact comes from; an item may name another `label` or `section`."""
    item = item or {}
    name = item.get("label") or label.locator
    return Provenance(label.source, f"{name}, {item.get('section') or LABEL_SECTIONS[relation]}", label.as_of)


def _dose_fact(subject: str, relation: str, dose: Any, label: Provenance, where: str) -> Fact:
    if not isinstance(dose, dict):
        raise CuratedDataError(f"{where}: each dose must be a mapping")
    require(dose, ("value", "unit", "route", "population"), where=where)
    if dose["unit"] not in DOSE_UNITS:
        raise CuratedDataError(f"{where}: unit {dose['unit']!r} not in {sorted(DOSE_UNITS)}")
    if isinstance(dose["value"], bool) or not isinstance(dose["value"], (int, float)) or dose["value"] <= 0:
        raise CuratedDataError(f"{where}: value must be a positive number, got {dose['value']!r}")
    qualifiers = {k: v for k, v in dose.items() if k not in ("value", "unit", "label", "section")}
    return Fact(subject, relation, value=dose["value"], unit=dose["unit"], qualifiers=qualifiers,
                provenance=_section(label, relation, dose))
