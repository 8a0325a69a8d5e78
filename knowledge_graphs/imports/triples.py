"""`triples`: JSON Lines of facts, for any domain.

Each line: {"subject", "relation", "object", "source", "as_of"}, or "value" (with an optional "unit")
instead of "object" for a literal fact, and optional "qualifiers" (an object of scalars). `subject` and
`object` name entities of the domain KG by id ("drug:DB00331") or by a name that resolves to one entity;
an id the KG does not know becomes a new entity when the line gives its type ("subject_type",
"object_type", and optionally "subject_name", "object_name").
"""

from __future__ import annotations

import re
from typing import Any

from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.rows import checked, decode, iso_date, jsonl_records, text
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph

_RELATION = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_ENTITY_ID = re.compile(r"^[a-z][a-z0-9_]*:\S{1,200}$")
_TYPE = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
_KNOWN_KEYS = {"subject", "relation", "object", "value", "unit", "qualifiers", "source", "as_of", "subject_type",
               "subject_name", "object_type", "object_name"}


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(kg.domain, stamp.overlay)
    new_entities: dict[str, Entity] = {}
    records = jsonl_records(decode(data, log) or "", log)
    for fact in checked(records, log, lambda line, record: _triple(record, line, stamp, kg, new_entities)):
        overlay.facts.append(fact)
        overlay.rows += 1
    log.raise_if_any()
    overlay.entities += new_entities.values()
    return overlay


def _triple(record: dict[str, Any], line: int, stamp: ImportStamp, kg: KnowledgeGraph,
            new_entities: dict[str, Entity]) -> Fact:
    unknown = sorted(set(record) - _KNOWN_KEYS)
    if unknown:
        raise FieldError(unknown[0], "is not a field of the triples format")
    relation = text(record, "relation")
    if relation is None or not _RELATION.match(relation):
        raise FieldError("relation", f"must be snake_case (a-z, 0-9, _), got {relation!r}")
    source = text(record, "source")
    as_of = iso_date(record, "as_of")
    assert source is not None and as_of is not None
    provenance = stamp.provenance(source=source, line=line, what=f"{record.get('subject')} {relation}", as_of=as_of)
    subject = _entity(record, "subject", kg, new_entities, provenance)
    qualifiers = record.get("qualifiers") or {}
    if not isinstance(qualifiers, dict) or not all(isinstance(v, str | int | float | bool) for v in qualifiers.values()):
        raise FieldError("qualifiers", "must be an object of text, number or true/false values")
    has_object, has_value = record.get("object") is not None, record.get("value") is not None
    if has_object == has_value:
        raise FieldError("object", "give exactly one of 'object' (an entity) or 'value' (a literal)")
    if has_object:
        return Fact(subject, relation, _entity(record, "object", kg, new_entities, provenance),
                    qualifiers=dict(qualifiers), provenance=provenance)
    value = record["value"]
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise FieldError("value", "must be text or a number")
    unit = text(record, "unit", required=False)
    return Fact(subject, relation, value=value, unit=unit, qualifiers=dict(qualifiers), provenance=provenance)


def _entity(record: dict[str, Any], role: str, kg: KnowledgeGraph, new_entities: dict[str, Entity],
            provenance: Any) -> str:
    reference = text(record, role)
    assert reference is not None
    if kg.entity(reference) is not None or reference in new_entities:
        return reference
    declared = record.get(f"{role}_type")
    if declared is not None:
        if not _ENTITY_ID.match(reference):
            raise FieldError(role, f"a new entity needs an id like 'type:name', got {reference!r}")
        if not isinstance(declared, str) or not _TYPE.match(declared):
            raise FieldError(f"{role}_type", f"must be a lower-case type name, got {declared!r}")
        name = text(record, f"{role}_name", required=False) or reference.split(":", 1)[1]
        new_entities[reference] = Entity(reference, declared, name, [], {}, provenance)
        return reference
    matches = list(dict.fromkeys(e.id for e in kg.lookup(reference)))
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise FieldError(role, f"{reference!r} names {len(matches)} entities ({', '.join(matches[:4])}); give an id")
    raise FieldError(role, f"{reference!r} is neither an entity id nor a name of the {kg.domain} KG "
                           f"(add '{role}_type' to create it)")
