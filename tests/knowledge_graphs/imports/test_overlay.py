"""Overlays on a KG: the packaged graph is never changed, versions are content hashes, later overlays
supersede earlier facts, a stored overlay round-trips exactly, and diffs compare content."""

from __future__ import annotations

import pytest

from knowledge_graphs.imports import (
    ImportStamp,
    Overlay,
    Supersession,
    apply_overlays,
    diff_versions,
    version_of,
)
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance

SOURCE = Provenance("test fixture", "test_overlay.py", "2026-12-01")


def base_kg() -> KnowledgeGraph:
    return KnowledgeGraph("medical", [
        Entity("drug:a", "drug", "Alphazole", ["Alpha"], provenance=SOURCE),
        Entity("condition:x", "condition", "Xeritis", provenance=SOURCE),
    ], [
        Fact("drug:a", "max_daily_dose", value=100, unit="mg", qualifiers={"route": "oral", "population": "adult"},
             provenance=SOURCE),
        Fact("drug:a", "max_daily_dose", value=50, unit="mg", qualifiers={"route": "oral", "population": "pediatric"},
             provenance=SOURCE),
        Fact("drug:a", "indicated_for", "condition:x", provenance=SOURCE),
    ], data_version="t1")


def stamp(name: str, row_date: str = "2026-12-05T10:00:00") -> ImportStamp:
    return ImportStamp(name, "triples", f"{name}.jsonl", "ab" * 32, row_date, "key:k1 (acme)", "2026-12-01")


def overlay(name: str, *, dose: int = 80, new_alias: str = "Alfa", imported_at: str = "2026-12-05T10:00:00") -> Overlay:
    provenance = stamp(name, imported_at).provenance(source="formulary", line=2, what="Alphazole")
    return Overlay("medical", name,
                   [Entity("drug:a", "drug", "Alphazole", [new_alias], provenance=provenance),
                    Entity("drug:b", "drug", "Betamab", provenance=provenance)],
                   [Fact("drug:a", "max_daily_dose", value=dose, unit="mg",
                         qualifiers={"route": "oral", "population": "adult"}, provenance=provenance),
                    Fact("drug:b", "indicated_for", "condition:x", provenance=provenance)],
                   [Supersession("drug:a", "max_daily_dose", (("population", "adult"), ("route", "oral")))], rows=2)


def test_an_overlay_adds_and_supersedes_without_changing_the_packaged_kg() -> None:
    base = base_kg()
    before = (base.version, [e.aliases[:] for e in base.entities()], len(base.facts()), dict(base.aliases()))
    kg = apply_overlays(base, [overlay("f1")])
    assert (base.version, [e.aliases[:] for e in base.entities()], len(base.facts()), dict(base.aliases())) == before
    assert base.entity("drug:b") is None and kg.entity("drug:b").name == "Betamab"
    assert set(kg.entity("drug:a").aliases) == {"Alpha", "Alfa"}
    assert [e.id for e in kg.lookup("alfa")] == ["drug:a"] and base.lookup("alfa") == []
    doses = {(f.qualifiers["population"], f.value) for f in kg.facts("drug:a", "max_daily_dose")}
    assert doses == {("adult", 80), ("pediatric", 50)}        # the adult oral maximum replaced, not the other
    assert kg.neighbours("condition:x") == {"drug:a", "drug:b"}  # edges of both layers
    assert base.neighbours("condition:x") == {"drug:a"}


def test_versions_are_content_hashes() -> None:
    base = base_kg()
    one = apply_overlays(base, [overlay("f1")])
    assert one.version == apply_overlays(base, [overlay("f1")]).version
    assert one.version == version_of(base.version, [overlay("f1").digest()]) != base.version
    assert apply_overlays(base, [overlay("f1", dose=81)]).version != one.version
    # the same rows imported again later are another import: another version, but no change in content
    later = overlay("f1", imported_at="2026-12-06T09:00:00")
    assert apply_overlays(base, [later]).version != one.version
    changes = diff_versions(base, [overlay("f1")], [later])
    assert not (changes.facts_added or changes.facts_removed or changes.entities_added or changes.entities_removed)
    assert apply_overlays(base, []).version == base.version


def test_overlays_apply_in_order_and_a_later_one_supersedes_an_earlier_ones_facts() -> None:
    kg = apply_overlays(base_kg(), [overlay("f1", dose=80), overlay("f2", dose=70)])
    adult = [f.value for f in kg.facts("drug:a", "max_daily_dose") if f.qualifiers["population"] == "adult"]
    assert adult == [70]


def test_only_literal_facts_can_be_superseded() -> None:
    with pytest.raises(ValueError, match="literal"):
        base_kg().extended([], [], version="v", superseded=lambda f: f.relation == "indicated_for")


def test_a_stored_overlay_round_trips_exactly() -> None:
    original = overlay("f1")
    again = Overlay.from_json(original.to_json())
    assert again.canonical() == original.canonical() and again.digest() == original.digest()
    assert again.facts[0].provenance == original.facts[0].provenance
    assert again.facts[0].provenance.row == 2


def test_diff_names_added_and_superseded_facts() -> None:
    base = base_kg()
    changes = diff_versions(base, [], [overlay("f1")])
    assert [e.id for e in changes.entities_added] == ["drug:b"]
    assert {(f.subject, f.value) for f in changes.facts_removed} == {("drug:a", 100)}
    assert {(f.subject, f.relation) for f in changes.facts_added} == {("drug:a", "max_daily_dose"),
                                                                      ("drug:b", "indicated_for")}
    back = diff_versions(base, [overlay("f1")], [])
    assert [e.id for e in back.entities_removed] == ["drug:b"]


def test_an_overlay_for_another_domain_is_refused() -> None:
    with pytest.raises(ValueError, match="for medical, not legal"):
        apply_overlays(KnowledgeGraph("legal", [], []), [overlay("f1")])
