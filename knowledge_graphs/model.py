"""The knowledge-graph data model: entities, facts with provenance, and the graph that holds them.

Entity ids are namespaced strings (`drug:DB00331`, `icd10cm:E11.9`, `country:IR`, `case:brown-v-board`),
so ids from different sources never collide and the namespace says where an id comes from.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import networkx as nx


@dataclass(frozen=True, slots=True)
class Provenance:
    source: str        # e.g. "FDA label: Glucophage (metformin) 2018", "pycountry==26.2.16"
    locator: str       # label section, statute, URL, table name
    as_of: str         # ISO date the source was read or published


@dataclass(slots=True)
class Entity:
    id: str
    type: str                                  # drug, condition, country, currency, court, case, ...
    name: str                                  # canonical surface form
    aliases: list[str] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)
    provenance: Provenance | None = None

    @property
    def surface_forms(self) -> list[str]:
        """Name first, then aliases, without duplicates."""
        return list(dict.fromkeys([self.name, *self.aliases]))


@dataclass(slots=True)
class Fact:
    """subject -relation-> object (an entity id) or value (a literal, with unit)."""

    subject: str
    relation: str
    object: str | None = None
    value: Any = None
    unit: str | None = None
    qualifiers: dict[str, Any] = field(default_factory=dict)   # route, population, as_of, severity, ...
    provenance: Provenance | None = None
    # The period the fact holds in the world (ISO dates, from inclusive, to exclusive; None: open-ended). A yearly
    # limit is one fact per year; a claim is judged against the fact valid at the time it refers to.
    valid_from: str | None = None
    valid_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.valid_from is None and self.valid_to is None:   # facts without a period hash as they always did
            del out["valid_from"], out["valid_to"]
        return out

    def valid_on(self, day: str) -> bool:
        """Whether the fact holds on `day` (ISO date; comparing ISO strings compares dates)."""
        return (self.valid_from is None or self.valid_from <= day) and (self.valid_to is None or day < self.valid_to)


@dataclass(frozen=True, slots=True)
class RelationSpec:
    """How a relation is said in text and what kind of value it holds, for the generic fact checker.

    `functional`: a subject has one value at a time (for the same qualifiers), so a different stated value is
    wrong; otherwise a value the KG does not list is only not found."""

    name: str
    label: str
    value: str                        # money | percent | quantity | duration | count | year | date | entity | text
    functional: bool = False
    aliases: tuple[str, ...] = ()
    object_types: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KgOutline:
    """What a compiled KG-constraint index needs of its KG once the index itself is on disk: the domain, the
    content version (part of the index's key) and which entity ids exist (to refuse unknown ones). Reading it
    instead of the whole KG spares an engine core most of its KG loading (`snapshot.load_outline`)."""

    domain: str
    version: str
    entity_ids: frozenset[str]

    @classmethod
    def of(cls, kg: KnowledgeGraph) -> KgOutline:
        return cls(kg.domain, kg.version, frozenset(entity.id for entity in kg.entities()))


class KnowledgeGraph:
    """One domain's KG: a networkx MultiDiGraph whose edges carry `Fact`s, plus an alias index."""

    def __init__(self, domain: str, entities: Iterable[Entity], facts: Iterable[Fact], *, data_version: str = "0",
                 relations: Iterable[RelationSpec] = ()):
        self.domain = domain
        self.graph: nx.MultiDiGraph = nx.MultiDiGraph()
        self._lower_graphs: tuple[nx.MultiDiGraph, ...] = ()   # the KGs this one extends (`extended`)
        self._entities: dict[str, Entity] = {}
        self._aliases: dict[str, list[str]] = {}
        self._facts: list[Fact] = []
        self._facts_by_subject: dict[str, list[Fact]] = {}
        self._facts_by_object: dict[str, list[Fact]] = {}   # facts about a relation to an entity, by that entity
        # relations declared with aliases (curated fact files), for the generic fact checker
        self.relations: dict[str, RelationSpec] = {spec.name: spec for spec in relations}
        # ranges of an index held completely, declared by the imports that brought them ({"index": "reporter:U.S.",
        # "from": 1, "to": 600}): inside one, a reference that matches nothing does not exist (issue 48)
        self.coverage: list[dict[str, Any]] = []
        for entity in entities:
            self.add_entity(entity)
        for fact in facts:
            self.add_fact(fact)
        self.version = self._content_hash(data_version)

    # -- building -------------------------------------------------------------------------------
    def add_entity(self, entity: Entity) -> None:
        if entity.id in self._entities:  # same id from two sources: merge aliases, keep the first record
            known = self._entities[entity.id]
            known.aliases = list(dict.fromkeys([*known.aliases, *entity.aliases]))
        else:
            self._entities[entity.id] = entity
            self.graph.add_node(entity.id, type=entity.type)
        for form in entity.surface_forms:
            ids = self._aliases.setdefault(normalise_alias(form), [])
            if entity.id not in ids:
                ids.append(entity.id)

    def add_fact(self, fact: Fact) -> None:
        self._facts.append(fact)
        self._facts_by_subject.setdefault(fact.subject, []).append(fact)
        if fact.object is not None:
            self._facts_by_object.setdefault(fact.object, []).append(fact)
            self.graph.add_edge(fact.subject, fact.object, key=fact.relation, fact=fact)

    def extended(self, entities: Iterable[Entity], facts: Iterable[Fact], *, version: str,
                 superseded: Callable[[Fact], bool] | None = None) -> KnowledgeGraph:
        """A new KG: this one plus `entities` and `facts`, minus the literal facts `superseded` selects, named
        `version`. This KG is not changed and shares its Entity and Fact objects and its graph with the new one
        (the containers are copied, lists on write), so an overlay of a few thousand rows on the medical KG
        costs tens of milliseconds, not a rebuild. Same-id entities merge their aliases into a copy."""
        kg = KnowledgeGraph.__new__(KnowledgeGraph)
        kg.domain, kg.version = self.domain, version
        kg.graph, kg._lower_graphs = nx.MultiDiGraph(), (*self._lower_graphs, self.graph)
        kg._entities, kg._aliases = dict(self._entities), dict(self._aliases)
        kg._facts, kg._facts_by_subject = list(self._facts), dict(self._facts_by_subject)
        kg._facts_by_object = dict(self._facts_by_object)
        kg.relations = dict(self.relations)
        kg.coverage = list(getattr(self, "coverage", []))
        if superseded is not None:
            kg._drop_facts(superseded)
        for entity in entities:
            kg._add_entity_copying(entity)
        for fact in facts:
            kg._facts.append(fact)
            kg._facts_by_subject[fact.subject] = [*kg._facts_by_subject.get(fact.subject, ()), fact]
            if fact.object is not None:
                kg._facts_by_object[fact.object] = [*kg._facts_by_object.get(fact.object, ()), fact]
                kg.graph.add_edge(fact.subject, fact.object, key=fact.relation, fact=fact)
        return kg

    def _drop_facts(self, superseded: Callable[[Fact], bool]) -> None:
        dropped = [f for f in self._facts if superseded(f)]
        if any(f.object is not None for f in dropped):
            raise ValueError("only literal facts (no object entity) can be superseded")
        if dropped:
            gone = {id(f) for f in dropped}
            self._facts = [f for f in self._facts if id(f) not in gone]
            for subject in {f.subject for f in dropped}:
                self._facts_by_subject[subject] = [f for f in self._facts_by_subject[subject] if id(f) not in gone]

    def _add_entity_copying(self, entity: Entity) -> None:
        known = self._entities.get(entity.id)
        if known is not None:   # merge into a copy: the KG this one extends keeps its own record
            entity = replace(known, aliases=list(dict.fromkeys([*known.aliases, *entity.aliases])))
        else:
            self.graph.add_node(entity.id, type=entity.type)
        self._entities[entity.id] = entity
        for form in entity.surface_forms:
            key = normalise_alias(form)
            ids = self._aliases.get(key, [])
            if entity.id not in ids:
                self._aliases[key] = [*ids, entity.id]

    def _content_hash(self, data_version: str) -> str:
        digest = hashlib.sha256(f"{self.domain}:{data_version}".encode())
        for entity_id in sorted(self._entities):
            e = self._entities[entity_id]
            digest.update(json.dumps([e.id, e.type, e.name, sorted(e.aliases)], default=str).encode())
        for fact in self._facts:
            digest.update(json.dumps(fact.to_dict(), sort_keys=True, default=str).encode())
        for name in sorted(self.relations):
            digest.update(json.dumps(asdict(self.relations[name]), sort_keys=True).encode())
        return digest.hexdigest()[:16]

    # -- reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entities)

    def entity(self, entity_id: str) -> Entity | None:
        return self._entities.get(entity_id)

    def lookup(self, alias: str) -> list[Entity]:
        """Entities whose name or alias equals `alias` after normalisation."""
        return [self._entities[i] for i in self._aliases.get(normalise_alias(alias), [])]

    def entities(self, type: str | None = None) -> Iterator[Entity]:
        return (e for e in self._entities.values() if type is None or e.type == type)

    def aliases(self) -> dict[str, list[str]]:
        """Normalised surface form -> entity ids (read-only view for linkers)."""
        return self._aliases

    def facts(self, subject: str | None = None, relation: str | None = None, object: str | None = None) -> list[Fact]:
        if subject is not None:
            pool = self._facts_by_subject.get(subject, [])
        elif object is not None:   # "which facts point at this list / class": an index, not a scan of all facts
            pool = self._facts_by_object.get(object, [])
        else:
            pool = self._facts
        return [f for f in pool if (relation is None or f.relation == relation) and (object is None or f.object == object)]

    def neighbours(self, entity_id: str, *, relations: Collection[str] | None = None, hops: int = 1) -> set[str]:
        """Entity ids within `hops` edges of `entity_id` in either direction, over `relations` (all if None)."""
        seen = {entity_id}
        frontier = {entity_id}
        layers = (*self._lower_graphs, self.graph)
        for _ in range(hops):
            nxt: set[str] = set()
            for node in frontier:
                for graph in layers:
                    if node not in graph:
                        continue
                    for _, other, rel in graph.out_edges(node, keys=True):
                        if relations is None or rel in relations:
                            nxt.add(other)
                    for other, _, rel in graph.in_edges(node, keys=True):
                        if relations is None or rel in relations:
                            nxt.add(other)
            frontier = nxt - seen
            seen |= nxt
        seen.discard(entity_id)
        return seen


# Runs of characters that are not str.isalnum(): for str patterns `\w` is exactly isalnum() plus "_".
_NON_ALNUM_RUN = re.compile(r"[\W_]+")


def normalise_alias(text: str) -> str:
    """Case- and punctuation-insensitive key: 'Metformin HCl.' -> 'metformin hcl'.

    Every non-alphanumeric run becomes one space (a regex, ~2.5x faster than a per-character loop: the
    medical KG normalises ~270k surface forms at load).
    """
    return _NON_ALNUM_RUN.sub(" ", text.casefold()).strip(" ")
