"""Finance validators' per-KG-version lookups (identifier types, regulation ids): built once per KG version,
the same as a walk over the KG's entities, and a new version (an import) gets its own."""

from __future__ import annotations

from knowledge_graphs import load_kg
from knowledge_graphs.model import Entity
from rules import verify
from rules.validators.finance.identifiers import _identifier_types
from rules.validators.finance.thresholds import _regulation_ids


def _imported():
    """The packaged finance KG plus a thousand listed parties and one more identifier type."""
    kg = load_kg("finance")
    parties = [Entity(id=f"test-sdn-{i}", type="sanctioned_party", name=f"Testparty Holdings {i} LLC") for i in range(1000)]
    extra_type = Entity(id="test-identifier-type", type="identifier_type", name="WKN", attributes={"length": 6})
    return kg, kg.extended([*parties, extra_type], [], version="test-finance-lookups")


def test_lookups_match_a_walk_over_the_entities() -> None:
    for kg in _imported():
        assert _identifier_types(id(kg), kg.version, kg) == {e.name.casefold(): e for e in kg.entities("identifier_type")}
        assert _regulation_ids(id(kg), kg.version, kg) == tuple(e.id for e in kg.entities("regulation"))


def test_each_kg_version_has_its_own() -> None:
    packaged, imported = _imported()
    assert "wkn" not in _identifier_types(id(packaged), packaged.version, packaged)
    assert "wkn" in _identifier_types(id(imported), imported.version, imported)


def test_length_claims_judged_alike_under_both() -> None:
    # sentences written for this test
    texts = ["A LEI is always 20 characters long.", "Every ISIN has exactly 11 characters.",
             "An IBAN for a Dutch account is 18 characters; a BIC is either 8 or 11 characters."]
    for text in texts:
        verdicts = [[(c.kind, c.verdict) for c in verify(text, "finance", kg=kg).claims] for kg in _imported()]
        assert verdicts[0] == verdicts[1] and verdicts[0], text
