"""Finance KG: countries/currencies load, dated risk-list snapshots, thresholds, identifier validators."""

import importlib

import pytest

from knowledge_graphs import load_kg
from knowledge_graphs.sources.finance import latest_snapshot

# The 60 largest economies by nominal GDP (IMF order of magnitude; membership is what matters here).
LARGEST_ECONOMIES = (
    "US CN DE JP IN GB FR IT CA BR RU KR AU ES MX ID NL SA TR CH PL TW BE SE IE AR AT TH NO IL AE SG "
    "PH VN BD IR MY DK CO HK ZA EG RO PK CL FI CZ PT KZ PE NZ IQ GR QA DZ HU NG UA KW MA"
).split()


@pytest.fixture(scope="module")
def kg():
    return load_kg("finance")


def test_pycountry_data_loads(kg):
    assert sum(1 for _ in kg.entities("country")) == 249
    assert sum(1 for _ in kg.entities("currency")) >= 170
    assert kg.entity("country:IR").attributes["alpha_3"] == "IRN"
    assert [e.id for e in kg.lookup("Islamic Republic of Iran")] == ["country:IR"]


def test_common_names_link_but_english_words_do_not(kg):
    assert [e.id for e in kg.lookup("North Korea")] == ["country:KP"]
    assert [e.id for e in kg.lookup("Burma")] == ["country:MM"]
    assert kg.lookup("and") == [] and kg.lookup("can") == [] and kg.lookup("all") == []


def test_uses_currency_covers_large_economies_and_listed_jurisdictions(kg):
    listed = {f.subject for f in kg.facts(relation="listed_on")}
    for country in [*(f"country:{c}" for c in LARGEST_ECONOMIES), *listed]:
        assert kg.facts(country, "uses_currency"), country
    assert kg.facts("country:US", "uses_currency", "currency:USD")
    assert kg.facts("country:DE", "uses_currency", "currency:EUR")
    assert kg.facts("country:NO", "uses_currency", "currency:NOK")


def test_iran_is_on_the_fatf_call_for_action_list(kg):
    latest = latest_snapshot(kg.facts(relation="listed_on"), "list:fatf_call_for_action")
    assert latest == "2025-06-13"
    on_latest = {f.subject for f in kg.facts(relation="listed_on", object="list:fatf_call_for_action")
                 if f.qualifiers["as_of"] == latest}
    assert on_latest == {"country:IR", "country:KP", "country:MM"}
    assert kg.entity("list:fatf_call_for_action").attributes["as_of"] == latest


def test_grey_list_snapshots_differ_so_as_of_matters(kg):
    def members(as_of):
        return {f.subject for f in kg.facts(relation="listed_on", object="list:fatf_increased_monitoring")
                if f.qualifiers["as_of"] == as_of}
    february_2024, june_2025 = members("2024-02-23"), members("2025-06-13")
    assert "country:HR" in february_2024 and "country:HR" not in june_2025   # Croatia removed June 2025
    assert "country:VG" in june_2025 and "country:VG" not in february_2024   # BVI added June 2025
    assert len(february_2024) == 21 and len(june_2025) == 24


def test_eu_list_snapshot_names_its_amending_act(kg):
    facts = kg.facts("country:AF", "listed_on", "list:eu_high_risk_third_countries")
    assert facts and "2025/1184" in facts[0].qualifiers["instrument"]


@pytest.mark.parametrize(("regulation", "value", "unit", "comparison"), [
    ("regulation:31-cfr-1010-311", 10000, "USD", "more than"),
    ("regulation:31-cfr-1020-320", 5000, "USD", "at least"),
    ("regulation:31-cfr-1022-320", 2000, "USD", "at least"),
    ("regulation:26-usc-6050i", 10000, "USD", "more than"),
    ("regulation:31-cfr-1010-410", 3000, "USD", "at least"),
    ("regulation:31-cfr-1010-340", 10000, "USD", "more than"),
    ("regulation:eu-2015-849-art-2", 10000, "EUR", "at least"),
    ("regulation:eu-2024-1624-art-80", 10000, "EUR", "at most"),
])
def test_thresholds(kg, regulation, value, unit, comparison):
    facts = kg.facts(regulation, "threshold")
    assert (value, unit, comparison) in {(f.value, f.unit, f.qualifiers["comparison"]) for f in facts}


def test_regulations_link_from_their_common_names(kg):
    assert [e.id for e in kg.lookup("Currency Transaction Report")] == ["regulation:31-cfr-1010-311"]
    assert [e.id for e in kg.lookup("Form 8300")] == ["regulation:26-usc-6050i"]


@pytest.mark.parametrize(("identifier_type", "valid", "invalid"), [
    ("isin", "US0378331005", "US0378331006"),
    ("iban", "DE89370400440532013000", "DE89370400440532013001"),
    ("lei", "5493001KJTIIGC8Y1R12", "5493001KJTIIGC8Y1R13"),
    ("cusip", "037833100", "037833101"),
])
def test_validators_exist_and_validate(kg, identifier_type, valid, invalid):
    facts = kg.facts(f"identifier_type:{identifier_type}", "validated_by")
    stdnum_paths = [f.value for f in facts if f.value.startswith("stdnum.")]
    assert stdnum_paths
    for path in stdnum_paths:
        module = importlib.import_module(path)
        assert module.is_valid(valid) and not module.is_valid(invalid)


def test_every_validator_value_resolves(kg):
    for fact in kg.facts(relation="validated_by"):
        module_path, _, attribute = fact.value.rpartition(".")
        if fact.value.startswith("stdnum."):
            assert hasattr(importlib.import_module(fact.value), "validate"), fact.value
        else:
            assert hasattr(importlib.import_module(module_path), attribute), fact.value
