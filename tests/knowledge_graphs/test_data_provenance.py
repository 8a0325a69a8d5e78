"""Every entity and fact in every domain says where it came from; references resolve."""

import datetime as dt

import pytest

from knowledge_graphs import DOMAINS, load_kg
from knowledge_graphs.model import Provenance

PACKAGE_SOURCE = "=="   # package-derived provenance names `package==version`


def _assert_complete(provenance: Provenance | None, what: str) -> None:
    assert provenance is not None, f"{what}: no provenance"
    assert provenance.source.strip() and provenance.locator.strip(), f"{what}: empty source/locator"
    dt.date.fromisoformat(provenance.as_of)   # raises on anything but YYYY-MM-DD


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_entity_and_fact_has_provenance(domain):
    kg = load_kg(domain)
    for entity in kg.entities():
        _assert_complete(entity.provenance, entity.id)
    for fact in kg.facts():
        _assert_complete(fact.provenance, f"{fact.subject} {fact.relation}")


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_fact_names_known_entities(domain):
    kg = load_kg(domain)
    for fact in kg.facts():
        assert kg.entity(fact.subject) is not None, fact
        assert fact.object is None or kg.entity(fact.object) is not None, fact
        assert (fact.object is None) != (fact.value is None), f"exactly one of object/value: {fact}"


@pytest.mark.parametrize("domain", DOMAINS)
def test_package_entities_name_their_package_version(domain):
    kg = load_kg(domain)
    package_derived = [e for e in kg.entities() if PACKAGE_SOURCE in e.provenance.source]
    assert len(package_derived) > 400
    from importlib import metadata
    for source in {e.provenance.source for e in package_derived}:
        name, version = source.split("==")
        assert metadata.version(name) == version


def test_totals_meet_the_issue():
    kgs = [load_kg(d) for d in DOMAINS]
    assert sum(len(kg) for kg in kgs) >= 5000
    curated_facts = [f for kg in kgs for f in kg.facts() if PACKAGE_SOURCE not in f.provenance.source]
    assert len(curated_facts) >= 300
    for domain, kg in zip(DOMAINS, kgs, strict=True):
        assert sum(1 for f in kg.facts() if PACKAGE_SOURCE not in f.provenance.source) >= 100, domain
