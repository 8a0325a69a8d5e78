"""Legal KG: reporters and courts load with dates; landmark cases, statutes, fabricated citations."""

import re

import pytest

from knowledge_graphs import load_kg


@pytest.fixture(scope="module")
def kg():
    return load_kg("legal")


def test_package_data_loads(kg):
    assert sum(1 for _ in kg.entities("reporter")) >= 1_200
    assert sum(1 for _ in kg.entities("court")) >= 2_500
    f3d = kg.entity("reporter:F.3d")
    assert f3d.attributes["start"] == "1993-01-01"
    assert f3d.attributes["editions"]["F.2d"] == {"start": "1924-01-01", "end": "1993-12-31"}
    assert set(f3d.attributes["editions"]) >= {"F.", "F.2d", "F.3d", "F.4th"}
    assert kg.entity("court:ca9").attributes["start"] == "1891-03-03"
    assert [e.id for e in kg.lookup("9th Cir.")] == ["court:ca9"]


def test_brown_v_board(kg):
    brown = kg.entity("case:brown-v-board-of-education")
    assert brown.attributes["citation"] == "347 U.S. 483"
    assert kg.facts(brown.id, "decided_by", "court:scotus")
    assert kg.facts(brown.id, "reported_in", "reporter:U.S.")
    assert [f.value for f in kg.facts(brown.id, "decided_in_year")] == [1954]
    assert [e.id for e in kg.lookup("Brown v. Board")] == [brown.id]


def test_at_least_eighty_cases_with_court_and_year(kg):
    cases = list(kg.entities("case"))
    assert len(cases) >= 80
    for case in cases:
        assert len(kg.facts(case.id, "decided_by")) == 1
        assert len(kg.facts(case.id, "decided_in_year")) == 1


def test_case_years_fall_within_their_reporter_edition(kg):
    # Early U.S. Reports volumes (nominative reporters, before 1875) predate reporters-db's U.S. dates.
    for case in kg.entities("case"):
        if "reporter" not in case.attributes:     # UK cases carry a neutral citation ("[2015] UKSC 11"), no reporter
            assert re.fullmatch(r"\[\d{4}\] [A-Z]{2,6}(?: \(\w+\))? \d+|\[\d{4}\] \d? ?[A-Z][\w. ]+ \d+",
                                case.attributes["citation"]), case.name
            continue
        reporter = kg.entity(f"reporter:{case.attributes['reporter']}")
        start, end = reporter.attributes["start"], reporter.attributes["end"]
        year = case.attributes["year"]
        if reporter.id == "reporter:U.S." and case.attributes["volume"] <= 90:
            continue
        assert start is None or year >= int(start[:4]), case.name
        assert end is None or year <= int(end[:4]), case.name


def test_statutes_link_from_common_forms(kg):
    assert len(list(kg.entities("statute"))) >= 40
    for form in ("42 U.S.C. § 1983", "42 USC 1983", "Section 1983"):
        assert [e.id for e in kg.lookup(form)] == ["statute:42-usc-1983"], form
    assert [e.id for e in kg.lookup("FRCP 12(b)(6)")] == ["statute:fed-r-civ-p-12-b-6"]


def test_mata_v_avianca_fabrications_are_documented(kg):
    varghese = kg.entity("fabricated:varghese-v-china-southern-airlines-co-ltd")
    assert varghese.attributes["citation"] == "925 F.3d 1339 (11th Cir. 2019)"
    assert "Mata v. Avianca" in varghese.attributes["found_in"]
    [order] = kg.facts(varghese.id, "fabrication_documented_in")
    assert "678 F. Supp. 3d 443" in order.value
    names = {e.name for e in kg.entities("fabricated_citation")}
    assert {"Shaboon v. Egyptair", "Petersen v. Iran Air", "Miller v. United Airlines, Inc."} <= names
    # The sanctioning decisions themselves are real cases.
    assert kg.facts("case:mata-v-avianca-inc", "decided_by", "court:nysd")
    assert kg.facts("case:park-v-kim", "decided_by", "court:ca2")
