"""Each import format: the project's fixture files parse into entities and facts with per-row provenance, and
bad files are rejected as a whole with the line and field of every bad row."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from knowledge_graphs import load_kg
from knowledge_graphs.imports import (
    ImportedProvenance,
    ImportFileError,
    ImportFormatError,
    ImportStamp,
    apply_overlays,
    parse_file,
)

FIXTURES = Path(__file__).parent / "fixtures"


def stamp(fmt: str, data: bytes, name: str | None = None) -> ImportStamp:
    return ImportStamp(name or fmt, fmt, f"test.{fmt}", hashlib.sha256(data).hexdigest(), "2026-12-05T10:00:00+00:00",
                       "key:abc123 (acme)", "2026-12-01")


def parse(fmt: str, domain: str, data: bytes):
    return parse_file(fmt, data, domain=domain, stamp=stamp(fmt, data), kg=load_kg(domain))


def rejected(fmt: str, domain: str, data: bytes) -> ImportFileError:
    with pytest.raises(ImportFileError) as caught:
        parse(fmt, domain, data)
    return caught.value


# -- the fixtures ---------------------------------------------------------------------------------------


def test_ofac_sdn_fixture() -> None:
    data = (FIXTURES / "sdn.csv").read_bytes()
    overlay = parse("ofac-sdn", "finance", data)
    assert overlay.rows == 7
    parties = {e.id: e for e in overlay.entities if e.id.startswith("sdn:")}
    assert {e.type for e in parties.values()} == {"person", "organization", "vessel", "aircraft"}
    person = parties["sdn:9001"]
    assert person.name == "ZAVORANSKY, Teodor Ilyich"
    assert {"Teodor Ilyich ZAVORANSKY", "Teodor ZAVORANSKY", "ZAVORANSKI, Fedor", "Fedor ZAVORANSKI"} <= set(person.aliases)
    assert "NORTHWIND MARITIME HOLDINGS" in parties["sdn:9002"].aliases      # the legal form dropped
    listed = [f for f in overlay.facts if f.subject == "sdn:9002"]
    assert sorted(f.qualifiers["program"] for f in listed) == ["IRAN", "SDGT"]   # "IRAN] [SDGT"
    assert all(f.object == "list:ofac_sdn" and f.qualifiers["as_of"] == "2026-12-01" for f in listed)
    provenance = listed[0].provenance
    assert isinstance(provenance, ImportedProvenance)
    assert provenance.row == 2 and provenance.file_sha256 == hashlib.sha256(data).hexdigest()
    assert provenance.imported_by == "key:abc123 (acme)" and "test.ofac-sdn line 2" in provenance.locator


def test_formulary_fixture_supersedes_the_label_maxima_it_covers() -> None:
    overlay = parse("formulary", "medical", (FIXTURES / "formulary.csv").read_bytes())
    assert overlay.rows == 5
    metformin = [f for f in overlay.facts if f.subject == "drug:DB00331"]
    assert [(f.value, f.unit, f.qualifiers["route"], f.qualifiers["population"]) for f in metformin] == [
        (2000, "mg", "oral", "adult")]
    assert metformin[0].provenance.source.startswith("St. Example Hospital Formulary 2026")
    assert metformin[0].provenance.as_of == "2026-11-01"                     # the row's own date
    acetaminophen = {f.qualifiers["population"] for f in overlay.facts if f.subject == "drug:DB00316"}
    assert acetaminophen == {"adult", "elderly"}                            # "PO" read as oral
    assert [e.id for e in overlay.entities] == ["drug:formulary:zorbitrexal"]
    kg = apply_overlays(load_kg("medical"), [overlay])
    oral_adult = [f for f in kg.facts("drug:DB00331", "max_daily_dose")
                  if f.qualifiers.get("route") == "oral" and f.qualifiers.get("population") == "adult"]
    assert [f.value for f in oral_adult] == [2000]                          # both label maxima (2550 IR, 2000 XR) replaced
    pediatric = [f for f in kg.facts("drug:DB00331", "max_daily_dose") if f.qualifiers.get("population") == "pediatric"]
    assert pediatric and "DailyMed" in pediatric[0].provenance.source     # not covered by the formulary: kept


def test_cases_fixture() -> None:
    overlay = parse("cases", "legal", (FIXTURES / "scdb_cases.csv").read_bytes())
    assert overlay.rows == 5
    kyllo = next(e for e in overlay.entities if "KYLLO" in e.name)
    assert kyllo.id == "case:scdb-2000-077"
    assert {k: kyllo.attributes[k] for k in ("citation", "volume", "reporter", "page", "year", "court")} == {
        "citation": "533 U.S. 27", "volume": 533, "reporter": "U.S.", "page": 27, "year": 2001, "court": "scotus"}
    assert kyllo.attributes["decided"] == "2001-06-11" and kyllo.attributes["sctCite"] == "121 S. Ct. 2038"
    relations = sorted(f.relation for f in overlay.facts if f.subject == kyllo.id)
    assert relations == ["decided_by", "decided_in_year", "reported_in"]
    assert kyllo.provenance.row == 4


def test_triples_fixture() -> None:
    overlay = parse("triples", "medical", (FIXTURES / "triples.jsonl").read_bytes())
    assert overlay.rows == 4
    by_relation = {f.relation: f for f in overlay.facts}
    assert by_relation["interacts_with"].subject == "drug:DB00682"            # "Warfarin" resolved by name
    assert by_relation["interacts_with"].qualifiers == {"severity": "major", "effect": "bleeding risk"}
    assert (by_relation["max_daily_dose"].value, by_relation["max_daily_dose"].unit) == (10, "mg")
    assert [e.id for e in overlay.entities] == ["protocol:anticoag-2026"]
    assert by_relation["covers"].provenance.row == 4


# -- bad files: the line and the field, every bad row, nothing imported -----------------------------------


SDN_ROW = '9001,"DOE, Jane","individual","SDGT",-0- ,-0- ,-0- ,-0- ,-0- ,-0- ,-0- ,-0- '
FORMULARY_HEAD = "drug,route,max_daily_dose,unit,source\n"
CASES_HEAD = "caseName,usCite,dateDecision\n"


@pytest.mark.parametrize(("fmt", "domain", "text", "line", "field", "message"), [
    ("ofac-sdn", "finance", SDN_ROW.replace('"individual"', '"persn"'), 1, "SDN_Type", "'persn' is not"),
    ("ofac-sdn", "finance", SDN_ROW.replace("9001,", "90x1,"), 1, "ent_num", "whole number"),
    ("ofac-sdn", "finance", SDN_ROW + "\n" + SDN_ROW, 2, "ent_num", "already appears on line 1"),
    ("ofac-sdn", "finance", SDN_ROW.replace('"SDGT"', "-0- "), 1, "Program", "is empty"),
    ("ofac-sdn", "finance", '9001,"DOE, Jane","individual"', 1, None, "expected 12 columns, found 3"),
    ("ofac-sdn", "finance", SDN_ROW.replace('"DOE, Jane"', '"DOE, Jane'), 1, None, "not valid CSV"),
    ("formulary", "medical", FORMULARY_HEAD + "Metformin,oral,-5,mg,X\n", 2, "max_daily_dose", "positive number"),
    ("formulary", "medical", FORMULARY_HEAD + "Metformin,oral,lots,mg,X\n", 2, "max_daily_dose", "must be a number"),
    ("formulary", "medical", FORMULARY_HEAD + "Metformin,oral,2000,ml,X\n", 2, "unit", "'ml' is not one of"),
    ("formulary", "medical", FORMULARY_HEAD + "Metformin,by ear,2000,mg,X\n", 2, "route", "'by ear' is not one of"),
    ("formulary", "medical", FORMULARY_HEAD + "Metformin,oral,2000,mg,\n", 2, "source", "is empty"),
    ("formulary", "medical", "drug,route,unit,source\nMetformin,oral,mg,X\n", 1, "max_daily_dose", "missing column"),
    ("cases", "legal", CASES_HEAD + "Kyllo v. United States,533 U.S. 27,31/31/2001\n", 2, "dateDecision", "must be a date"),
    ("cases", "legal", CASES_HEAD + "Kyllo v. United States,533 Foo. 27,6/11/2001\n", 2, "usCite", "reporter 'Foo.'"),
    ("cases", "legal", CASES_HEAD + "Kyllo v. United States,page 27,6/11/2001\n", 2, "usCite", "not 'volume reporter page'"),
    ("cases", "legal", CASES_HEAD + ",533 U.S. 27,6/11/2001\n", 2, "caseName", "is empty"),
    ("cases", "legal", CASES_HEAD + "Kyllo v. United States,,6/11/2001\n", 2, "usCite", "no citation"),
    ("triples", "medical", '{"subject": "drug:DB00331", "relation": "Treats", "object": "condition:hypertension", '
                           '"source": "x", "as_of": "2026-01-01"}', 1, "relation", "snake_case"),
    ("triples", "medical", '{"subject": "Nosuchdrugium", "relation": "treats", "object": "condition:hypertension", '
                           '"source": "x", "as_of": "2026-01-01"}', 1, "subject", "neither an entity id nor a name"),
    ("triples", "medical", '{"subject": "drug:DB00331", "relation": "treats", "object": "condition:hypertension", '
                           '"source": "x", "as_of": "01/02/2026"}', 1, "as_of", "must be a date"),
    ("triples", "medical", '{"subject": "drug:DB00331", "relation": "treats", "source": "x", "as_of": "2026-01-01"}',
     1, "object", "exactly one of"),
    ("triples", "medical", '{"subject": "drug:DB00331", "relation": "treats", "object": "x", "colour": "red", '
                           '"source": "x", "as_of": "2026-01-01"}', 1, "colour", "not a field"),
    ("triples", "medical", '{"subject": "drug:DB00331",', 1, None, "not valid JSON"),
    ("triples", "medical", '["a", "list"]', 1, None, "JSON object"),
])
def test_a_bad_row_is_named_by_line_and_field(fmt: str, domain: str, text: str, line: int, field: str | None,
                                              message: str) -> None:
    error = rejected(fmt, domain, text.encode())
    first = error.errors[0]
    assert (first.line, first.field) == (line, field), str(error)
    assert message in first.message
    assert f"line {line}" in str(error)


def test_every_bad_row_is_reported_with_its_own_line() -> None:
    good = "Metformin,oral,2000,mg,X\n"
    text = FORMULARY_HEAD + good + "Metformin,oral,0,mg,X\n" + good + "Aspirin,iv,1,kg,X\n" + "\n" + "X,oral,1,mg,\n"
    error = rejected("formulary", "medical", text.encode())
    assert [(e.line, e.field) for e in error.errors] == [(3, "max_daily_dose"), (5, "unit"), (7, "source")]
    assert "(and 2 more errors)" in str(error)


def test_a_quoted_field_spanning_lines_keeps_the_line_numbers_right() -> None:
    text = CASES_HEAD + '"Long\nName v. Other",533 U.S. 27,6/11/2001\n' + "Bad v. Date,533 U.S. 27,13/1/2001\n"
    error = rejected("cases", "legal", text.encode())
    assert [(e.line, e.field) for e in error.errors] == [(4, "dateDecision")]


def test_text_that_is_not_utf8_names_its_line() -> None:
    error = rejected("cases", "legal", (CASES_HEAD + "Caf\xe9 v. Bar,533 U.S. 27,6/11/2001\n").encode("latin-1"))
    assert error.errors[0].line == 2 and "not UTF-8" in error.errors[0].message


def test_a_format_imports_only_into_its_domain() -> None:
    data = (FIXTURES / "sdn.csv").read_bytes()
    with pytest.raises(ImportFormatError, match="finance KG, not legal"):
        parse_file("ofac-sdn", data, domain="legal", stamp=stamp("ofac-sdn", data), kg=load_kg("legal"))
    with pytest.raises(ImportFormatError, match="unknown format"):
        parse_file("xlsx", data, domain="legal", stamp=stamp("xlsx", data), kg=load_kg("legal"))
