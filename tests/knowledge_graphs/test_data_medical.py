"""Medical KG: package data really loads, and the curated label facts users rely on are there."""

import pytest

from knowledge_graphs import load_kg


@pytest.fixture(scope="module")
def kg():
    return load_kg("medical")


def _drug(kg, name: str) -> str:
    matches = [e for e in kg.lookup(name) if e.type == "drug"]
    assert len(matches) == 1, (name, [e.id for e in matches])
    return matches[0].id


def test_package_data_loads_in_full(kg):
    drugs = list(kg.entities("drug"))
    assert len(drugs) >= 19_000
    assert sum(1 for d in drugs if d.id.startswith("drug:DB")) >= 12_000
    codes = list(kg.entities("icd10cm_code"))
    assert len(codes) >= 45_000
    assert sum(1 for c in codes if c.attributes["billable"]) >= 20_000


def test_drug_ids_names_and_synonyms(kg):
    metformin = kg.entity("drug:DB00331")
    assert metformin.name == "Metformin"
    assert metformin.attributes["drugbank_id"] == "DB00331"
    assert _drug(kg, "Glucophage") == "drug:DB00331"
    assert _drug(kg, "paracetamol") == _drug(kg, "acetaminophen")


def test_icd10cm_codes_resolve_with_and_without_dot(kg):
    code = kg.entity("icd10cm:E11.9")
    assert code.name == "Type 2 diabetes mellitus without complications"
    assert code.attributes["billable"] is True
    assert kg.entity("icd10cm:E11").attributes["billable"] is False
    assert [e.id for e in kg.lookup("E119")] == ["icd10cm:E11.9"]


def test_icd10cm_reading_agrees_with_the_package_api(kg):
    import simple_icd_10_cm as cm

    expected = {c for c in cm.get_all_codes(with_dots=True) if not cm.is_extended_subcategory(c)}
    ours = {e.attributes["code"]: e for e in kg.entities("icd10cm_code")}
    assert set(ours) == expected
    for code in expected:
        assert ours[code].name == cm.get_description(code), code
        if not cm.is_chapter_or_block(code):
            assert ours[code].attributes["billable"] == cm.is_leaf(code), code


def test_metformin_max_daily_dose_is_2550_mg_oral_adult(kg):
    doses = kg.facts("drug:DB00331", "max_daily_dose")
    immediate = [f for f in doses if f.qualifiers.get("formulation") == "immediate-release" and f.qualifiers["population"] == "adult"]
    assert [(f.value, f.unit, f.qualifiers["route"]) for f in immediate] == [(2550, "mg", "oral")]
    assert "GLUCOPHAGE" in immediate[0].provenance.locator and "section 2" in immediate[0].provenance.locator


@pytest.mark.parametrize(("drug", "value", "unit"), [
    ("sertraline", 200, "mg"), ("atorvastatin", 80, "mg"), ("amlodipine", 10, "mg"), ("losartan", 100, "mg"),
    ("lisinopril", 80, "mg"), ("escitalopram", 20, "mg"), ("ibuprofen", 3200, "mg"),
])
def test_known_adult_oral_maximums(kg, drug, value, unit):
    facts = [f for f in kg.facts(_drug(kg, drug), "max_daily_dose")
             if f.qualifiers["population"] == "adult" and f.qualifiers["route"] == "oral"]
    assert (value, unit) in {(f.value, f.unit) for f in facts}


def test_at_least_sixty_drugs_have_curated_label_facts(kg):
    curated = {f.subject for f in kg.facts() if f.relation in {"max_daily_dose", "indicated_for"}}
    assert len(curated) >= 60
    with_dose = {f.subject for f in kg.facts(relation="max_daily_dose")}
    assert len(with_dose) >= 60


@pytest.mark.parametrize(("first", "second"), [
    ("warfarin", "aspirin"), ("simvastatin", "clarithromycin"), ("sildenafil", "nitroglycerin"),
    ("sertraline", "phenelzine"), ("ciprofloxacin", "tizanidine"),
])
def test_major_interactions_are_found_from_either_drug(kg, first, second):
    a, b = _drug(kg, first), _drug(kg, second)
    for subject, obj in ((a, b), (b, a)):
        facts = kg.facts(subject, "interacts_with", obj)
        assert [f.qualifiers["severity"] for f in facts] == ["major"]
        assert facts[0].qualifiers["effect"]
    assert b in kg.neighbours(a, relations={"interacts_with"})


def test_indications_link_through_conditions_to_icd10cm(kg):
    assert kg.facts("drug:DB00331", "indicated_for", "condition:type-2-diabetes")
    assert kg.facts("condition:type-2-diabetes", "has_icd10cm_code", "icd10cm:E11")
    assert "icd10cm:E11" in kg.neighbours("drug:DB00331", relations={"indicated_for", "has_icd10cm_code"}, hops=2)
    assert [e.id for e in kg.lookup("T2DM")] == ["condition:type-2-diabetes"]


def test_contraindications_and_classes(kg):
    assert kg.facts("drug:DB00331", "contraindicated_in", "condition:severe-renal-impairment")
    assert kg.facts(_drug(kg, "sertraline"), "in_class", "drug_class:ssri")
    assert "drug_class:ssri" in [e.id for e in kg.lookup("SSRIs")]


def test_dose_facts_are_well_formed(kg):
    for fact in kg.facts():
        if fact.relation in {"max_daily_dose", "max_single_dose"}:
            assert fact.value > 0 and fact.unit in {"mg", "mcg", "g", "units", "mg/kg"}, fact
            assert fact.qualifiers["route"] and fact.qualifiers["population"], fact


def _write_labels(tmp_path, body: str):
    path = tmp_path / "labels.yaml"
    path.write_text("labels:\n" + body)
    return path


def _read_labels(path):
    from knowledge_graphs.curated import DATA_DIR, load_manifest
    from knowledge_graphs.sources.medical import label_facts

    return label_facts(path, load_manifest("medical", DATA_DIR), {"metformin": "drug:DB00331", "aspirin": "drug:DB00945"},
                       {"condition:type-2-diabetes"}, {"drug_class:biguanide"})


def test_label_record_without_provenance_fails_naming_file_and_drug(tmp_path):
    from knowledge_graphs import CuratedDataError

    path = _write_labels(tmp_path, "  - {drug: metformin, label: GLUCOPHAGE, source: dailymed}\n")
    with pytest.raises(CuratedDataError, match=r"labels\.yaml: labels record #0 \(drug='metformin'\): missing provenance field\(s\) as_of"):
        _read_labels(path)


@pytest.mark.parametrize(("body", "message"), [
    ("  - {drug: metfromin, label: L, source: dailymed, as_of: 2026-01-01}\n", "drug 'metfromin' is not in"),
    ("  - {drug: metformin, label: L, source: dailymed, as_of: 2026-01-01, indicated_for: [diabetes]}\n", "unknown condition 'diabetes'"),
    ("  - {drug: metformin, label: L, source: dailymed, as_of: 2026-01-01, max_daily_dose: [{value: 2550, unit: mgs, route: oral, population: adult}]}\n", "unit 'mgs'"),
    ("  - {drug: metformin, label: L, source: dailymed, as_of: 2026-01-01, max_daily_dose: [{value: 2550, unit: mg, population: adult}]}\n", "missing field\\(s\\) route"),
    ("  - {drug: metformin, label: L, source: dailymed, as_of: 2026-01-01, interacts_with: [{drug: aspirin, severity: minor, effect: x}]}\n", "severity must be one of"),
])
def test_label_references_and_doses_are_checked(tmp_path, body, message):
    from knowledge_graphs import CuratedDataError

    with pytest.raises(CuratedDataError, match=message):
        _read_labels(_write_labels(tmp_path, body))


def test_label_sections_become_the_locator(tmp_path):
    path = _write_labels(tmp_path, "  - {drug: metformin, label: GLUCOPHAGE, source: dailymed, as_of: 2026-01-01, "
                                   "indicated_for: [type-2-diabetes], interacts_with: [{drug: aspirin, severity: moderate, effect: x}]}\n")
    facts = {(f.subject, f.relation): f for f in _read_labels(path)}
    assert facts[("drug:DB00331", "indicated_for")].provenance.locator == "GLUCOPHAGE, section 1 INDICATIONS AND USAGE"
    assert facts[("drug:DB00945", "interacts_with")].object == "drug:DB00331"
    assert facts[("drug:DB00331", "interacts_with")].provenance.as_of == "2026-01-01"
