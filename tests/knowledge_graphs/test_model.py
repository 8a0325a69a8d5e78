from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance, normalise_alias

SRC = Provenance("test", "fixture", "2026-01-01")


def _kg(extra_fact=None):
    facts = [Fact("drug:a", "indicated_for", "condition:t2d", provenance=SRC),
             Fact("condition:t2d", "has_code", "icd10cm:E11", provenance=SRC)]
    if extra_fact:
        facts.append(extra_fact)
    return KnowledgeGraph("medical", [
        Entity("drug:a", "drug", "Metformin", ["Glucophage"]),
        Entity("condition:t2d", "condition", "type 2 diabetes"),
        Entity("icd10cm:E11", "icd10cm", "Type 2 diabetes mellitus"),
    ], facts)


def test_lookup_ignores_case_and_punctuation():
    kg = _kg()
    assert [e.id for e in kg.lookup("GLUCOPHAGE.")] == ["drug:a"]
    assert normalise_alias("Metformin  HCl.") == "metformin hcl"


def test_neighbours_follow_hops_and_relations():
    kg = _kg()
    assert kg.neighbours("drug:a") == {"condition:t2d"}
    assert kg.neighbours("drug:a", hops=2) == {"condition:t2d", "icd10cm:E11"}
    assert kg.neighbours("drug:a", relations={"has_code"}, hops=2) == set()


def test_version_changes_with_content():
    assert _kg().version == _kg().version
    assert _kg().version != _kg(Fact("drug:a", "max_daily_dose", value=2550, unit="mg", provenance=SRC)).version
