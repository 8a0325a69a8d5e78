"""Overlays: what one import adds to a domain KG, how it is stored, applied and compared.

An overlay holds entities and facts, each fact with the provenance of its row, and `supersedes`: literal
facts it replaces, matched by subject, relation and the qualifiers its row names (a formulary's maximum dose
replaces the packaged label's for the same drug, route and population, and setting, formulation or
indication where the row names them; nothing else). A KG version is the packaged KG plus an ordered list
of overlays; its version hash is a hash of the packaged version and the overlays' content digests, so the
same overlays on the same packaged KG always give the same version, and any change of content gives another.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from knowledge_graphs.imports.stamp import ImportedProvenance
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance


@dataclass(frozen=True, slots=True)
class Supersession:
    """Literal facts `subject -relation->` whose qualifiers include every item of `match` and none of `unless`.

    `unless` keeps facts the importing row does not name although `match` alone would cover them: a formulary
    row that names no setting is a prescriber's limit, so it leaves the OTC Drug Facts maximum in place."""

    subject: str
    relation: str
    match: tuple[tuple[str, Any], ...] = ()
    unless: tuple[tuple[str, Any], ...] = ()

    def covers(self, fact: Fact) -> bool:
        return (fact.subject == self.subject and fact.relation == self.relation and fact.object is None
                and all(fact.qualifiers.get(key) == value for key, value in self.match)
                and not any(fact.qualifiers.get(key) == value for key, value in self.unless))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"subject": self.subject, "relation": self.relation, "match": dict(self.match)}
        if self.unless:   # overlays stored before `unless` existed keep their digests (and their versions)
            out["unless"] = dict(self.unless)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Supersession:
        return cls(data["subject"], data["relation"], tuple(sorted(data["match"].items())),
                   tuple(sorted(data.get("unless", {}).items())))


@dataclass(slots=True)
class Overlay:
    domain: str
    name: str
    entities: list[Entity] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    supersedes: list[Supersession] = field(default_factory=list)
    rows: int = 0
    # What the file covers completely, as data: [{"index": "usc_title", "values": [18, 42]},
    # {"index": "reporter:U.S.", "from": 1, "to": 600}]; a claim inside a covered range that the overlay
    # does not hold can be called absent, not merely unknown.
    coverage: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "domain": self.domain, "name": self.name, "rows": self.rows,
            "entities": [_entity_json(e) for e in self.entities], "facts": [_fact_json(f) for f in self.facts],
            "supersedes": [s.to_json() for s in self.supersedes]}
        if self.coverage:                     # an overlay without coverage keeps its digest
            out["coverage"] = self.coverage
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Overlay:
        provenance = _ProvenanceReader()   # a row's entity and facts share one provenance object, as when parsed
        return cls(
            data["domain"], data["name"],
            [Entity(e["id"], e["type"], e["name"], list(e["aliases"]), dict(e["attributes"]),
                    provenance(e["provenance"])) for e in data["entities"]],
            [Fact(f["subject"], f["relation"], f["object"], f["value"], f["unit"], dict(f["qualifiers"]),
                  provenance(f["provenance"]), f.get("valid_from"), f.get("valid_to")) for f in data["facts"]],
            [Supersession.from_json(s) for s in data["supersedes"]],
            int(data.get("rows", 0)),
            [dict(entry) for entry in data.get("coverage", [])],
        )

    def canonical(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          default=str).encode()

    def digest(self) -> str:
        return hashlib.sha256(self.canonical()).hexdigest()


def version_of(base_version: str, digests: Sequence[str]) -> str:
    """The version hash of `base_version` plus overlays with these content digests, in order."""
    if not digests:
        return base_version
    return hashlib.sha256(":".join([base_version, *digests]).encode()).hexdigest()[:16]


def apply_overlays(base: KnowledgeGraph, overlays: Sequence[Overlay]) -> KnowledgeGraph:
    """The packaged KG `base` with `overlays` on top, in order (a later overlay supersedes earlier facts too)."""
    kg = base
    digests: list[str] = []
    for overlay in overlays:
        if overlay.domain != base.domain:
            raise ValueError(f"overlay {overlay.name!r} is for {overlay.domain}, not {base.domain}")
        digests.append(overlay.digest())
        supersedes = overlay.supersedes
        kg = kg.extended(overlay.entities, overlay.facts, version=version_of(base.version, digests),
                         superseded=(lambda f, s=supersedes: any(x.covers(f) for x in s)) if supersedes else None)
        kg.coverage += [{**entry, "overlay": overlay.name} for entry in overlay.coverage]
    return kg


@dataclass(slots=True)
class OverlayDiff:
    """What changes from one KG version to another, in terms of the overlays' content."""

    entities_added: list[Entity] = field(default_factory=list)
    entities_removed: list[Entity] = field(default_factory=list)
    facts_added: list[Fact] = field(default_factory=list)
    facts_removed: list[Fact] = field(default_factory=list)


def diff_versions(base: KnowledgeGraph, before: Sequence[Overlay], after: Sequence[Overlay]) -> OverlayDiff:
    """What changes from the KG version `before` (overlays on `base`) to `after`: entities and facts, packaged
    facts a formulary superseded included. Facts are compared on content (subject, relation, object, value,
    unit, qualifiers), not provenance, so re-importing the same data shows no change."""
    old_kg, new_kg = apply_overlays(base, before), apply_overlays(base, after)
    touched = [*before, *after]
    entity_ids = list(dict.fromkeys(e.id for overlay in touched for e in overlay.entities))
    subjects = list(dict.fromkeys([*entity_ids, *(f.subject for o in touched for f in o.facts),
                                   *(s.subject for o in touched for s in o.supersedes)]))
    diff = OverlayDiff(
        [e for i in entity_ids if (e := new_kg.entity(i)) is not None and old_kg.entity(i) is None],
        [e for i in entity_ids if (e := old_kg.entity(i)) is not None and new_kg.entity(i) is None],
    )
    for subject in subjects:
        old = {fact_key(f): f for f in old_kg.facts(subject)}
        new = {fact_key(f): f for f in new_kg.facts(subject)}
        diff.facts_added += [f for k, f in new.items() if k not in old]
        diff.facts_removed += [f for k, f in old.items() if k not in new]
    return diff


def fact_key(fact: Fact) -> str:
    return json.dumps([fact.subject, fact.relation, fact.object, fact.value, fact.unit, fact.qualifiers],
                      sort_keys=True, default=str)


def item_json(item: Entity | Fact) -> dict[str, Any]:
    """An entity or fact as stored in an overlay."""
    return _entity_json(item) if isinstance(item, Entity) else _fact_json(item)


def _entity_json(entity: Entity) -> dict[str, Any]:
    return {"id": entity.id, "type": entity.type, "name": entity.name, "aliases": entity.aliases,
            "attributes": entity.attributes, "provenance": _provenance_json(entity.provenance)}


def _fact_json(fact: Fact) -> dict[str, Any]:
    out = {"subject": fact.subject, "relation": fact.relation, "object": fact.object, "value": fact.value,
           "unit": fact.unit, "qualifiers": fact.qualifiers, "provenance": _provenance_json(fact.provenance)}
    if fact.valid_from is not None or fact.valid_to is not None:   # an overlay without periods keeps its digest
        out |= {"valid_from": fact.valid_from, "valid_to": fact.valid_to}
    return out


def _provenance_json(provenance: Provenance | None) -> dict[str, Any] | None:
    return asdict(provenance) if provenance is not None else None


class _ProvenanceReader:
    """Provenance from stored JSON, one object per distinct value and the import-wide strings shared: 10,000
    imported rows would otherwise hold 40,000 copies of the same file hash and timestamp."""

    def __init__(self) -> None:
        self.seen: dict[tuple[Any, ...], Provenance] = {}

    def __call__(self, data: dict[str, Any] | None) -> Provenance | None:
        if data is None:
            return None
        key = tuple(sorted(data.items()))
        known = self.seen.get(key)
        if known is None:
            values = {k: sys.intern(v) if isinstance(v, str) and k != "locator" else v for k, v in data.items()}
            known = ImportedProvenance(**values) if "file_sha256" in values else Provenance(
                values["source"], values["locator"], values["as_of"])
            self.seen[key] = known
        return known
