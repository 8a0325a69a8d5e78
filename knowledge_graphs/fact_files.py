"""Curated fact files: `data/<domain>/facts/*.yaml`, facts with validity periods and relations with aliases.

Each file may declare `relations` (how a relation is said in text, what kind of value it holds, whether a
subject has one value at a time), `entities` the KG lacks, and `facts` with `valid_from` / `valid_to`. The
schema is documented in `docs/knowledge.md` ("Curated fact files"). Every record carries its provenance;
a fact whose subject or object no entity has, a relation no file declares, or a value that does not fit the
relation's kind fails the build with the file and record named, as every curated file does.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from knowledge_graphs.curated import (
    CuratedDataError,
    Manifest,
    iso_date,
    load_manifest,
    provenance_of,
    read_yaml,
    records,
    require,
)
from knowledge_graphs.model import Entity, Fact, RelationSpec
from knowledge_graphs.sources.common import DomainData

VALUE_KINDS = ("money", "percent", "quantity", "duration", "count", "year", "date", "entity", "text")
_NUMERIC = {"money", "percent", "quantity", "duration", "count", "year"}
_RELATION_KEYS = {"label", "value", "functional", "aliases", "object_types"}


def add_fact_files(data: DomainData, domain: str, data_dir: Path) -> None:
    """Add every fact file of `domain` to `data` (nothing when the domain has no `facts/` folder)."""
    folder = data_dir / domain / "facts"
    paths = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    if not paths:
        return
    manifest = load_manifest(domain, data_dir)
    relations: dict[str, RelationSpec] = {}
    raw_files = [(path, read_yaml(path)) for path in paths]
    for path, raw in raw_files:
        for spec in _relations(raw, path):
            if spec.name in relations:
                raise CuratedDataError(f"{path}: relation {spec.name!r} is declared again (declare it once per domain)")
            relations[spec.name] = spec
    entities = [e for path, raw in raw_files for e in _entities(raw, path, manifest)]
    known = {e.id for e in data.entities} | {e.id for e in entities}
    existing = {f.relation for f in data.facts}
    facts = [f for path, raw in raw_files for f in _facts(raw, path, manifest, relations, existing, known)]
    data.entities += entities
    data.facts += facts
    data.relations += relations.values()
    data.data_version += ";facts"


def _relations(raw: dict[str, Any], path: Path) -> list[RelationSpec]:
    declared = raw.get("relations") or {}
    if not isinstance(declared, dict):
        raise CuratedDataError(f"{path}: 'relations' must be a mapping of relation name to its description")
    specs = []
    for name, body in declared.items():
        where = f"{path}: relation {name!r}"
        if not isinstance(body, dict):
            raise CuratedDataError(f"{where}: must be a mapping")
        unknown = sorted(set(body) - _RELATION_KEYS)
        if unknown:
            raise CuratedDataError(f"{where}: unknown field(s) {', '.join(unknown)}")
        require(body, ("label", "value"), where=where)
        if body["value"] not in VALUE_KINDS:
            raise CuratedDataError(f"{where}: value must be one of {', '.join(VALUE_KINDS)}, got {body['value']!r}")
        aliases = body.get("aliases") or []
        if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
            raise CuratedDataError(f"{where}: aliases must be a list of phrases")
        specs.append(RelationSpec(str(name), str(body["label"]), str(body["value"]), bool(body.get("functional", False)),
                                  tuple(dict.fromkeys(a.strip().casefold() for a in aliases)),
                                  tuple(str(t) for t in body.get("object_types") or ())))
    return specs


def _entities(raw: dict[str, Any], path: Path, manifest: Manifest) -> list[Entity]:
    out = []
    for where, rec in records(raw, "entities", path):
        require(rec, ("id", "type", "name"), where=where)
        out.append(Entity(str(rec["id"]), str(rec["type"]), str(rec["name"]),
                          [str(a) for a in rec.get("aliases") or []], dict(rec.get("attributes") or {}),
                          provenance_of(rec, manifest, where=where)))
    return out


def _facts(raw: dict[str, Any], path: Path, manifest: Manifest, relations: dict[str, RelationSpec],
           existing: set[str], known: set[str]) -> list[Fact]:
    out = []
    for where, rec in records(raw, "facts", path):
        require(rec, ("subject", "relation"), where=where)
        relation = str(rec["relation"])
        spec = relations.get(relation)
        if spec is None and relation not in existing:
            raise CuratedDataError(f"{where}: relation {relation!r} is declared by no fact file and no packaged fact uses it")
        subject = str(rec["subject"])
        if subject not in known:
            raise CuratedDataError(f"{where}: subject {subject!r} is no entity of the KG (declare it under 'entities')")
        has_object, has_value = rec.get("object") is not None, rec.get("value") is not None
        if has_object == has_value:
            raise CuratedDataError(f"{where}: give exactly one of 'object' (an entity id) or 'value' (a literal)")
        if has_object and str(rec["object"]) not in known:
            raise CuratedDataError(f"{where}: object {rec['object']!r} is no entity of the KG")
        value = rec.get("value")
        if spec is not None:
            value = _checked_value(spec, rec, where)
        qualifiers = rec.get("qualifiers") or {}
        if not isinstance(qualifiers, dict) or not all(_scalar_or_list(v) for v in qualifiers.values()):
            raise CuratedDataError(f"{where}: qualifiers must map names to text, numbers, true/false or lists of text")
        valid_from = iso_date(rec["valid_from"], where=f"{where} valid_from") if rec.get("valid_from") else None
        valid_to = iso_date(rec["valid_to"], where=f"{where} valid_to") if rec.get("valid_to") else None
        if valid_from and valid_to and valid_to <= valid_from:
            raise CuratedDataError(f"{where}: valid_to {valid_to} is not after valid_from {valid_from}")
        out.append(Fact(subject, relation, str(rec["object"]) if has_object else None, value,
                        str(rec["unit"]) if rec.get("unit") else None, dict(qualifiers),
                        provenance_of(rec, manifest, where=where), valid_from, valid_to))
    return out


def _checked_value(spec: RelationSpec, rec: dict[str, Any], where: str) -> Any:
    value = rec.get("value")
    if spec.value == "entity":
        if rec.get("object") is None:
            raise CuratedDataError(f"{where}: relation {spec.name!r} holds entities: give 'object'")
        return None
    if value is None:
        raise CuratedDataError(f"{where}: relation {spec.name!r} holds {spec.value} values: give 'value'")
    if spec.value in _NUMERIC and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise CuratedDataError(f"{where}: a {spec.value} value must be a number, got {value!r}")
    if spec.value in ("money", "percent", "quantity", "duration") and not rec.get("unit"):
        raise CuratedDataError(f"{where}: a {spec.value} value needs a 'unit'")
    if spec.value == "date":
        return iso_date(value if not isinstance(value, dt.datetime) else value.date(), where=f"{where} value")
    if spec.value == "text" and not isinstance(value, str):
        raise CuratedDataError(f"{where}: a text value must be text, got {value!r}")
    return value


def _scalar_or_list(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    return isinstance(value, str | int | float | bool)
