"""The public sources' own formats (GLEIF, SEC, ISO 4217, eCFR, USLM, CourtListener, EUR-Lex, openFDA, RxNorm):
hand-written fixtures in each real schema parse into entities and facts with per-row provenance and coverage,
and bad files are rejected as a whole with the line and field of every bad row."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from knowledge_graphs import load_kg
from knowledge_graphs.imports import (
    FORMATS,
    ImportedProvenance,
    ImportFileError,
    ImportStamp,
    Overlay,
    parse_file,
)
from knowledge_graphs.imports.ecfr_xml import thresholds
from knowledge_graphs.imports.eurlex import citation_of

FIXTURES = Path(__file__).parents[2] / "fixtures" / "imports"


def stamp(fmt: str, data: bytes) -> ImportStamp:
    return ImportStamp(fmt, fmt, f"test.{fmt}", hashlib.sha256(data).hexdigest(), "2026-12-05T10:00:00+00:00",
                       "key:abc123 (acme)", "2026-12-01")


def parse(fmt: str, domain: str, data: bytes) -> Overlay:
    return parse_file(fmt, data, domain=domain, stamp=stamp(fmt, data), kg=load_kg(domain))


def fixture(fmt: str, domain: str, name: str) -> Overlay:
    return parse(fmt, domain, (FIXTURES / name).read_bytes())


def rejected(fmt: str, domain: str, data: bytes) -> ImportFileError:
    with pytest.raises(ImportFileError) as caught:
        parse(fmt, domain, data)
    return caught.value


def facts_of(overlay: Overlay, subject: str, relation: str | None = None) -> list:
    return [f for f in overlay.facts if f.subject == subject and relation in (None, f.relation)]


def held_as(domain: str, citation: str, entity_type: str, new_id: str) -> str:
    """The id a section's facts go to: the packaged KG's entity of that citation (the curated KGs grow), else
    the importer's own."""
    known = [e.id for e in load_kg(domain).lookup(citation) if e.type == entity_type]
    return known[0] if len(known) == 1 else new_id


# -- the fixtures ---------------------------------------------------------------------------------------


def test_gleif_lei_fixture() -> None:
    overlay = fixture("gleif-lei", "finance", "gleif_lei.csv")
    assert overlay.rows == 5 and {e.type for e in overlay.entities} == {"legal_entity"}
    northwind = next(e for e in overlay.entities if e.id == "lei:549300NORTHWINDMAR62")
    assert northwind.aliases == ["Northwind Shipping", "NORTHWIND MARITIME HOLDINGS"]   # other name, no legal form
    assert {(f.relation, f.object, f.value) for f in facts_of(overlay, northwind.id)} == {
        ("has_lei", None, "549300NORTHWINDMAR62"), ("registered_in", "country:CY", None),
        ("entity_status", None, "ACTIVE"), ("registration_status", None, "ISSUED")}
    holmvik = next(e for e in overlay.entities if e.id == "lei:529900HOLMVIKSKAPI72")
    assert "Kholmvik Kapital OOO" in holmvik.aliases and "Kholmvik Kapital" in holmvik.aliases   # transliterated
    kosovo = "lei:5493001VARDARLOGXX12"                       # XK: no country entity, so an attribute only
    assert not facts_of(overlay, kosovo, "registered_in")
    assert next(e for e in overlay.entities if e.id == kosovo).attributes["country"] == "XK"
    provenance = facts_of(overlay, "lei:2138009ALDERGATEFN72", "registration_status")[0].provenance
    assert isinstance(provenance, ImportedProvenance) and provenance.row == 4
    assert "test.gleif-lei line 4" in provenance.locator


def test_sec_tickers_fixture() -> None:
    overlay = fixture("sec-tickers", "finance", "company_tickers_exchange.json")
    assert overlay.rows == 5
    ids = {e.id: e for e in overlay.entities}
    assert {"cik:0000320193", "cik:0000789019", "cik:0001067983", "cik:0001999999"} <= set(ids)
    berkshire = "cik:0001067983"
    assert ids[berkshire].aliases == ["BERKSHIRE HATHAWAY"]
    assert sorted(f.value for f in facts_of(overlay, berkshire, "has_ticker")) == ["BRK-A", "BRK-B"]
    assert [f.value for f in facts_of(overlay, berkshire, "has_cik")] == ["0001067983"]
    assert {f.object for f in facts_of(overlay, berkshire, "listed_on_exchange")} == {"exchange:nyse"}
    assert not facts_of(overlay, "cik:0001999999", "listed_on_exchange")     # exchange null
    assert "data[3], CIK 0001067983, BRK-A" in facts_of(overlay, berkshire, "has_ticker")[1].provenance.locator


def test_sec_tickers_an_exchange_the_kg_lacks_becomes_an_entity() -> None:
    data = (b'{"fields":["cik","name","ticker","exchange"],'
            b'"data":[[1,"A Co","AAA","Zorbic Board"],[2,"B Co","BBB","Zorbic Board"]]}')
    overlay = parse("sec-tickers", "finance", data)
    exchanges = [e for e in overlay.entities if e.type == "exchange"]
    assert [(e.id, e.name) for e in exchanges] == [("exchange:zorbic-board", "Zorbic Board")]
    assert {f.object for f in overlay.facts if f.relation == "listed_on_exchange"} == {"exchange:zorbic-board"}


def test_iso4217_fixture() -> None:
    overlay = fixture("iso4217-xml", "finance", "iso4217_list_one.xml")
    assert overlay.rows == 10                                 # ANTARCTICA included: an entry, no currency
    uses = {(f.subject, f.object) for f in overlay.facts if f.relation == "uses_currency"}
    assert uses == {("country:AF", "currency:AFN"), ("country:BO", "currency:BOB"), ("country:BO", "currency:BOV"),
                    ("country:DE", "currency:EUR"), ("country:KR", "currency:KRW"), ("country:US", "currency:USD")}
    assert [f.value for f in facts_of(overlay, "currency:BOB", "numeric_code")] == ["068"]    # zero kept
    assert [f.value for f in facts_of(overlay, "currency:KRW", "minor_units")] == [0]
    assert not facts_of(overlay, "currency:XAU", "minor_units")                                # N.A.
    assert len(facts_of(overlay, "currency:EUR", "numeric_code")) == 1                        # once per code
    assert {f.provenance.as_of for f in overlay.facts} == {"2024-06-25"}                      # the list's date
    assert overlay.coverage == [{"index": "iso4217", "values": ["AFN", "BOB", "BOV", "EUR", "KRW", "USD", "XAU",
                                                                "XSU"]}]


def test_iso4217_a_currency_the_kg_lacks_becomes_an_entity() -> None:
    xml = ('<ISO_4217 Pblshd="2024-06-25"><CcyTbl><CcyNtry><CtryNm>ZZ99_Test</CtryNm><CcyNm IsFund="true">'
           "Zorbic Unit</CcyNm><Ccy>QZQ</Ccy><CcyNbr>998</CcyNbr><CcyMnrUnts>4</CcyMnrUnts></CcyNtry></CcyTbl></ISO_4217>")
    overlay = parse("iso4217-xml", "finance", xml.encode())
    [currency] = overlay.entities
    assert (currency.id, currency.name, currency.aliases, currency.attributes["fund"]) == (
        "currency:QZQ", "Zorbic Unit", ["QZQ"], True)


def test_ecfr_fixture_title_with_thresholds() -> None:
    overlay = fixture("ecfr-xml", "finance", "ecfr_title31_part1010.xml")
    assert overlay.rows == 6                                  # the part and five sections; the reserved range skipped
    ids = {number: held_as("finance", f"31 CFR 1010.{number}", "regulation", f"cfr:31-1010.{number}")
           for number in (311, 312, 313, 410, 415)}
    # sections the packaged KG holds under the same citation get the facts there, not a second entity
    assert ids[311] == "regulation:31-cfr-1010-311"
    assert [e.id for e in overlay.entities] == ["cfr:31-1010", *(i for i in ids.values() if i.startswith("cfr:"))]
    ctr = ids[311]
    assert [(f.value, f.unit, f.qualifiers["comparison"]) for f in facts_of(overlay, ctr, "threshold")] == [
        (10000, "USD", "more than")]
    assert "transaction in currency of more than $10,000" in facts_of(overlay, ctr, "threshold")[0].qualifiers["measure"]
    assert [f.object for f in facts_of(overlay, ctr, "part_of")] == ["cfr:31-1010"]
    assert [(f.value, f.qualifiers["comparison"]) for f in facts_of(overlay, ids[410], "threshold")] == [
        (3000, "at least")]                                   # "$3,000 or more"
    assert [f.value for f in facts_of(overlay, ids[312], "has_heading")] == ["Identification required"]
    assert overlay.coverage == [{"index": "cfr_title", "values": [31]}, {"index": "cfr_part", "values": ["31-1010"]}]


def test_ecfr_a_section_the_kg_lacks_becomes_an_entity() -> None:
    xml = ('<DIV5 N="9901" NODE="99:1.0.1" TYPE="PART"><HEAD>PART 9901—BENCH RULES (REGULATION QQ)</HEAD>'
           '<DIV8 N="§ 9901.2" TYPE="SECTION"><HEAD>§ 9901.2 Reports.</HEAD><P>Report sums in excess of $5,000.</P>'
           "</DIV8></DIV5>")
    overlay = parse("ecfr-xml", "finance", xml.encode())
    part, section = overlay.entities
    assert (part.id, part.name, part.aliases[-1]) == ("cfr:99-9901", "99 CFR Part 9901", "Regulation QQ")
    assert (section.id, section.type, section.name) == ("cfr:99-9901.2", "regulation", "99 CFR 9901.2")
    assert {"99 C.F.R. § 9901.2", "99 C.F.R. 9901.2"} <= set(section.aliases)
    assert section.attributes == {"cfr_title": "99", "part": "9901", "section": "9901.2", "title": "Reports"}
    assert {(f.relation, f.object, f.value) for f in facts_of(overlay, section.id)} == {
        ("has_heading", None, "Reports"), ("part_of", "cfr:99-9901", None), ("threshold", None, 5000)}


def test_ecfr_fixture_part_alone_takes_its_title_from_node() -> None:
    overlay = fixture("ecfr-xml", "legal", "ecfr_title12_part1026.xml")          # any domain
    part = next(e for e in overlay.entities if e.id == "cfr:12-1026")
    assert part.name == "12 CFR Part 1026" and "Regulation Z" in part.aliases
    section = held_as("legal", "12 CFR 1026.3", "regulation", "cfr:12-1026.3")
    assert [(f.value, f.qualifiers["comparison"]) for f in facts_of(overlay, section, "threshold")] == [
        (69500, "more than")]
    assert overlay.coverage == [{"index": "cfr_part", "values": ["12-1026"]}]    # a part, not the whole title


@pytest.mark.parametrize(("text", "expected"), [
    ("a transaction in currency of more than $10,000, except", [(10000, "more than")]),
    ("in excess of $10,000 in one day", [(10000, "more than")]),
    ("funds in the amount of $3,000 or more; and", [(3000, "at least")]),
    ("shall not exceed $500 per violation", [(500, "at most")]),
    ("not less than $1.5 million", [(1500000, "at least")]),
    ("a fee of $25 is charged", []),                           # no comparison: not a threshold
])
def test_ecfr_threshold_phrases(text: str, expected: list) -> None:
    assert [(value, q["comparison"]) for value, q in thresholds(text)] == expected


def test_uslm_fixture() -> None:
    overlay = fixture("uslm-xml", "legal", "uslm_title42_excerpt.xml")
    assert overlay.rows == 6                                  # the section quoted inside a note is not one
    ids = {section: held_as("legal", f"42 U.S.C. § {section}", "statute", f"usc:42-{section}")
           for section in ("1981a", "1982", "1983", "1986", "1988", "2000e-2")}
    assert ids["1983"] == "statute:42-usc-1983"              # the packaged entity gets the heading, no second one
    assert [e.id for e in overlay.entities] == [i for i in ids.values() if i.startswith("usc:")]
    assert [f.value for f in facts_of(overlay, ids["1983"], "has_heading")] == ["Civil action for deprivation of rights"]
    assert [f.value for f in facts_of(overlay, ids["1982"], "has_heading")] == ["Property rights of citizens"]
    assert overlay.coverage == [{"index": "usc_title", "values": [42]}]
    assert facts_of(overlay, ids["1986"])[0].provenance.row == 27


def test_uslm_a_section_the_kg_lacks_becomes_an_entity_and_a_repealed_one_keeps_its_status() -> None:
    xml = ('<uscDoc xmlns="http://xml.house.gov/schemas/uslm/1.0"><main>'
           '<section identifier="/us/usc/t99/s9998"><num value="9998">§ 9998.</num><heading> Bench rules</heading>'
           '</section><section identifier="/us/usc/t99/s9999" status="repealed"><num value="9999">§ 9999.</num>'
           "<heading/></section></main></uscDoc>")
    new, repealed = parse("uslm-xml", "legal", xml.encode()).entities
    assert (new.id, new.type, new.name, new.attributes["title"]) == ("usc:99-9998", "statute", "99 U.S.C. § 9998",
                                                                    "Bench rules")
    assert {"99 USC 9998", "99 U.S.C. 9998"} <= set(new.aliases)
    assert repealed.attributes["status"] == "repealed" and repealed.id == "usc:99-9999"


def test_courtlistener_fixture_joins_the_case_index() -> None:
    from knowledge_graphs.imports import apply_overlays
    from rules.validators.legal.citations import case_index

    overlay = fixture("courtlistener-citations", "legal", "courtlistener_citations.csv")
    assert overlay.rows == 6 and [e.id for e in overlay.entities] == ["case:cl-910001", "case:cl-910002",
                                                                        "case:cl-910003"]
    payton = overlay.entities[0]
    assert {k: payton.attributes[k] for k in ("citation", "reporter", "year", "court", "decided")} == {
        "citation": "445 U.S. 573", "reporter": "U.S.", "year": 1980, "court": "scotus", "decided": "1980-04-15"}
    assert payton.attributes["parallel_citations"] == ["100 S. Ct. 1371", "63 L. Ed. 2d 639"]
    assert payton.aliases == ["Payton"] and payton.provenance.row == 2
    macpherson = overlay.entities[1]
    assert (macpherson.attributes["citation"], macpherson.attributes["court"]) == ("217 N.Y. 382", "ny")
    assert {"index": "reporter:U.S.", "from": 445, "to": 445} in overlay.coverage
    index = case_index(apply_overlays(load_kg("legal"), [overlay]))
    assert "case:cl-910001" in [e.id for e in index.cases_named("Payton v. New York")]


def test_eurlex_csv_fixture() -> None:
    overlay = fixture("eurlex", "finance", "eurlex_export.csv")
    dora = next(e for e in overlay.entities if e.id == "celex:32022R2554")
    assert dora.type == "instrument" and dora.name == "Regulation (EU) 2022/2554"
    assert "32022R2554" in dora.aliases and dora.aliases[0].startswith("Regulation (EU) 2022/2554 of the European")
    assert {(f.relation, f.value) for f in facts_of(overlay, dora.id)} == {
        ("adopted_on", "2022-12-14"), ("in_force_from", "2023-01-16")}
    assert facts_of(overlay, dora.id, "in_force_from")[0].qualifiers == {"later_dates": "2025-01-17"}
    assert {e.name for e in overlay.entities} == {"Regulation (EU) 2022/2554", "Directive 2014/65/EU",
                                                  "Regulation (EU) No 575/2013", "Directive 95/46/EC"}
    assert overlay.coverage == [{"index": "celex", "values": ["31995L0046", "32013R0575", "32014L0065",
                                                              "32022R2554"]}]


def test_eurlex_xml_fixture() -> None:
    overlay = fixture("eurlex", "legal", "eurlex_search.xml")
    [gdpr] = overlay.entities
    assert gdpr.name == "Regulation (EU) 2016/679" and "General Data Protection Regulation" in gdpr.aliases
    assert {(f.relation, f.value) for f in overlay.facts} == {("adopted_on", "2016-04-27"),
                                                              ("in_force_from", "2016-05-24")}
    assert gdpr.provenance.row == 9                           # the line of its <result>


@pytest.mark.parametrize(("celex", "citation"), [
    ("32022R2554", "Regulation (EU) 2022/2554"), ("32013R0575", "Regulation (EU) No 575/2013"),
    ("32009R1060", "Regulation (EC) No 1060/2009"), ("31975R2481", "Regulation (EEC) No 2481/75"),
    ("32014L0065", "Directive 2014/65/EU"), ("31995L0046", "Directive 95/46/EC"), ("31985L0374", "Directive 85/374/EEC"),
    ("32022D0001", "Decision (EU) 2022/1"), ("62014CJ0362", None),
])
def test_eurlex_citation_from_celex(celex: str, citation: str | None) -> None:
    assert citation_of(celex) == citation


def test_openfda_label_fixture() -> None:
    overlay = fixture("openfda-label", "medical", "openfda_drug_label.json")
    assert overlay.rows == 3                                  # the label without openfda fields adds nothing
    metformin = "drug:DB00331"                                # "METFORMIN HYDROCHLORIDE" without its salt
    assert "GLUCOPHAGE" in next(e for e in overlay.entities if e.id == metformin).aliases
    assert [f.value for f in facts_of(overlay, metformin, "has_brand")] == ["GLUCOPHAGE"]
    assert [f.object for f in facts_of(overlay, metformin, "in_class")] == ["drug_class:biguanide"]
    [warning] = facts_of(overlay, metformin, "boxed_warning")
    assert warning.value.startswith("WARNING: LACTIC ACIDOSIS") and warning.value.endswith("bradyarrhythmias.")
    assert warning.provenance.as_of == "2024-01-15" and warning.provenance.row == 14
    assert "eGFR below 30" in facts_of(overlay, metformin, "contraindication_text")[0].value
    assert [f.object for f in facts_of(overlay, "drug:DB01076", "in_class")] == ["drug_class:statin"]   # by name
    combination = "drug:openfda:acetaminophen-and-zorbicodone-bitartrate"
    assert combination in {e.id for e in overlay.entities}
    assert {f.object for f in facts_of(overlay, combination, "in_class")} == {"drug_class:opioid-agonist",
                                                                           "drug_class:zorbicodone-analog"}
    assert "drug_class:zorbicodone-analog" in {e.id for e in overlay.entities}      # a class the KG lacks


def test_rxnorm_fixture() -> None:
    overlay = fixture("rxnorm-rrf", "medical", "RXNCONSO.RRF")
    assert overlay.rows == 5                                  # RXNORM IN and BN rows, not suppressed
    assert {(f.subject, f.value, f.qualifiers["term_type"]) for f in overlay.facts} == {
        ("drug:DB00331", "6809", "IN"), ("drug:DB01076", "83367", "IN"), ("drug:DB01076", "153165", "BN"),
        ("rxcui:9990001", "9990001", "IN"), ("rxcui:9990002", "9990002", "BN")}
    assert [(e.id, e.name, e.attributes["term_type"]) for e in overlay.entities] == [
        ("rxcui:9990001", "zorbicodone", "IN"), ("rxcui:9990002", "Zorbicet", "BN")]
    assert overlay.coverage == [{"index": "rxnorm_tty", "values": ["BN", "IN"]}]


def test_every_public_format_is_registered() -> None:
    assert {"gleif-lei", "sec-tickers", "iso4217-xml", "ecfr-xml", "uslm-xml", "courtlistener-citations", "eurlex",
            "openfda-label", "rxnorm-rrf"} <= set(FORMATS)


# -- coverage on the overlay ----------------------------------------------------------------------------


def test_coverage_round_trips_and_an_overlay_without_it_keeps_its_digest() -> None:
    overlay = fixture("uslm-xml", "legal", "uslm_title42_excerpt.xml")
    again = Overlay.from_json(overlay.to_json())
    assert again.coverage == overlay.coverage and again.digest() == overlay.digest()
    plain = Overlay("legal", "x", overlay.entities, overlay.facts, rows=overlay.rows)
    assert "coverage" not in plain.to_json()
    assert plain.digest() != overlay.digest()
    assert Overlay.from_json(plain.to_json()).digest() == plain.digest()


# -- bad files: the line and the field, every bad row, nothing imported -----------------------------------


GLEIF_HEAD = ("LEI,Entity.LegalName,Entity.LegalAddress.Country,Entity.EntityStatus,"
              "Registration.RegistrationStatus\n")
GLEIF_ROW = "549300NORTHWINDMAR62,Northwind Maritime Holdings Ltd.,CY,ACTIVE,ISSUED\n"
ISO = '<ISO_4217 Pblshd="2024-06-25"><CcyTbl>\n{}\n</CcyTbl></ISO_4217>'
ISO_ENTRY = "<CcyNtry><CtryNm>GERMANY</CtryNm><CcyNm>Euro</CcyNm><Ccy>EUR</Ccy><CcyNbr>978</CcyNbr><CcyMnrUnts>2</CcyMnrUnts></CcyNtry>"
ECFR = '<DIV5 N="1026" NODE="12:8.0.2.9.8" TYPE="PART">\n<HEAD>PART 1026—TRUTH IN LENDING</HEAD>\n{}\n</DIV5>'
SECTION = '<DIV8 N="§ 1026.1" TYPE="SECTION"><HEAD>§ 1026.1 Authority.</HEAD><P>Text.</P></DIV8>'
USLM = '<uscDoc xmlns="http://xml.house.gov/schemas/uslm/1.0"><main>\n{}\n</main></uscDoc>'
USC_SECTION = '<section identifier="/us/usc/t42/s1982"><num>§ 1982.</num><heading>Property rights</heading></section>'
CL_HEAD = "id,volume,reporter,page,type,cluster_id,date_created,date_modified,case_name,date_filed\n"
CL_ROW = "1,445,U.S.,573,1,10,x,x,Payton v. New York,1980-04-15\n"
EURLEX_HEAD = "CELEX number,Title,Date of document,Date of effect\n"
RRF_ROW = "6809|ENG||||||1|1|6809||RXNORM|IN|6809|metformin||N|4096|\n"


def _label(**fields: str) -> str:
    body = {"effective_time": '"20240115"', "openfda": '{"generic_name": ["METFORMIN"]}'} | fields
    return '{"results": [\n{' + ", ".join(f'"{k}": {v}' for k, v in body.items()) + "}\n]}"


@pytest.mark.parametrize(("fmt", "domain", "text", "line", "field", "message"), [
    ("gleif-lei", "finance", GLEIF_HEAD + GLEIF_ROW.replace("62,", "63,"), 2, "LEI", "check digits"),
    ("gleif-lei", "finance", GLEIF_HEAD + GLEIF_ROW.replace("MAR62", "MAR6"), 2, "LEI", "is not an LEI"),
    ("gleif-lei", "finance", GLEIF_HEAD + GLEIF_ROW.replace(",CY,", ",Cyprus,"), 2, "Entity.LegalAddress.Country",
     "alpha-2"),
    ("gleif-lei", "finance", GLEIF_HEAD + GLEIF_ROW.replace("ACTIVE", "ALIVE"), 2, "Entity.EntityStatus",
     "'ALIVE' is not one of"),
    ("gleif-lei", "finance", GLEIF_HEAD + GLEIF_ROW + GLEIF_ROW, 3, "LEI", "already appears on line 2"),
    ("gleif-lei", "finance", GLEIF_HEAD.replace(",Registration.RegistrationStatus", "") + "x\n", 1,
     "Registration.RegistrationStatus", "missing column"),
    ("sec-tickers", "finance", '{"fields":["cik","name","ticker","exchange"],"data":[["x","A","AAA","Nasdaq"]]}', 1,
     "data[0].cik", "whole number"),
    ("sec-tickers", "finance", '{"fields":["cik","name","ticker","exchange"],"data":[\n[1,"A","AAA",null],\n'
                               '[2,"B","",null]]}', 3, "data[1].ticker", "is empty"),
    ("sec-tickers", "finance", '{"fields":["cik","name","ticker","exchange"],"data":[[1,"A"]]}', 1, "data[0]",
     "list of 4 values"),
    ("sec-tickers", "finance", '{"data":[[1,"A","AAA",null]]}', 1, "fields", "must list cik"),
    ("sec-tickers", "finance", '{"fields":["cik","name","ticker","exchange"],\n"data":[[1,"A","AAA",null]', 2, None,
     "not valid JSON"),
    ("iso4217-xml", "finance", ISO.format(ISO_ENTRY.replace(">EUR<", ">eur<")), 2, "Ccy", "three capital letters"),
    ("iso4217-xml", "finance", ISO.format(ISO_ENTRY.replace(">978<", ">97<")), 2, "CcyNbr", "three digits"),
    ("iso4217-xml", "finance", ISO.format(ISO_ENTRY.replace(">2<", ">two<")), 2, "CcyMnrUnts", "a digit or N.A."),
    ("iso4217-xml", "finance", ISO.format(ISO_ENTRY).replace("2024-06-25", "25.06.2024"), 1, "Pblshd",
     "publish date"),
    ("iso4217-xml", "finance", ISO.format(ISO_ENTRY.replace("</CcyNtry>", "")), 3, None, "not well-formed XML"),
    ("iso4217-xml", "finance", '<!DOCTYPE x [\n<!ENTITY a "aaaa">\n]>' + ISO.format(ISO_ENTRY), 2, None,
     "entity declarations"),
    ("ecfr-xml", "legal", ECFR.format(SECTION.replace("§ 1026.1\" T", "1026.1\" T")), 3, "N", "like '§ 1026.1'"),
    ("ecfr-xml", "legal", ECFR.format(SECTION.replace("§ 1026.1 Authority.", "")), 3, "HEAD", "heading"),
    ("ecfr-xml", "legal", ECFR.format(SECTION + "\n" + SECTION), 4, "N", "already appears on line 3"),
    ("ecfr-xml", "legal", ECFR.format(SECTION).replace("PART 1026—", "PART 1025—"), 2, "HEAD",
     "must read 'PART 1026"),
    ("ecfr-xml", "legal", ECFR.format(SECTION).replace(' NODE="12:8.0.2.9.8"', ""), 2, "NODE", "no title number"),
    ("uslm-xml", "legal", USLM.format(USC_SECTION.replace("/s1982", "/1982")), 2, "identifier", "/us/usc/t42/s1983"),
    ("uslm-xml", "legal", USLM.format(USC_SECTION.replace("<num>§ 1982.</num>", "")), 2, "num", "is empty"),
    ("uslm-xml", "legal", USLM.format(USC_SECTION + "\n" + USC_SECTION), 3, "identifier", "already appears on line 2"),
    ("courtlistener-citations", "legal", CL_HEAD + CL_ROW.replace(",1,10,", ",x,10,"), 2, "type", "type 1-9"),
    ("courtlistener-citations", "legal", CL_HEAD + CL_ROW.replace("U.S.", "Foo."), 2, "reporter", "not in reporters-db"),
    ("courtlistener-citations", "legal", CL_HEAD + CL_ROW.replace("1980-04-15", "15/04/1980"), 2, "date_filed",
     "must be a date"),
    ("courtlistener-citations", "legal", CL_HEAD.replace("\n", ",court_id\n") + CL_ROW.replace("\n", ",nocourt\n"), 2,
     "court_id", "not a courts-db court id"),
    ("courtlistener-citations", "legal", CL_HEAD + CL_ROW + "2,100,S. Ct.,1371,1,10,x,x,Peyton v. NY,1980-04-15\n", 3,
     "case_name", "cluster 10 is 'Payton v. New York'"),
    ("courtlistener-citations", "legal", CL_HEAD + "1,217,N.Y.,382,2,11,x,x,MacPherson v. Buick,1916-03-14\n", 2,
     "court_id", "does not say the court"),
    ("eurlex", "legal", EURLEX_HEAD + "2022R2554,DORA,14/12/2022,16/01/2023\n", 2, "CELEX number", "not a CELEX"),
    ("eurlex", "legal", EURLEX_HEAD + "32022R2554,DORA,31/12/2022,16/13/2023\n", 2, "Date of effect", "dates"),
    ("eurlex", "legal", EURLEX_HEAD + "32022R2554,DORA,,16/01/2023\n", 2, "Date of document", "is empty"),
    ("openfda-label", "medical", _label(effective_time='"2024-01-15"'), 2, "results[0].effective_time", "YYYYMMDD"),
    ("openfda-label", "medical", _label(openfda='{"generic_name": ["METFORMIN"], "brand_name": "GLUCOPHAGE"}'), 2,
     "results[0].openfda.brand_name", "list of text"),
    ("openfda-label", "medical", '{"results": [\n"a label"\n]}', 2, "results[0]", "JSON object"),
    ("openfda-label", "medical", '{"meta": {}}', 1, None, "no 'results' array"),
    ("rxnorm-rrf", "medical", "6809|ENG|metformin|\n", 1, None, "expected 18 pipe-separated fields, found 3"),
    ("rxnorm-rrf", "medical", RRF_ROW.replace("6809|ENG", "x|ENG"), 1, "RXCUI", "whole number"),
    ("rxnorm-rrf", "medical", RRF_ROW.replace("|metformin|", "||"), 1, "STR", "is empty"),
    ("rxnorm-rrf", "medical", RRF_ROW + RRF_ROW, 2, "RXCUI", "IN 6809 already appears on line 1"),
])
def test_a_bad_row_is_named_by_line_and_field(fmt: str, domain: str, text: str, line: int, field: str | None,
                                              message: str) -> None:
    error = rejected(fmt, domain, text.encode())
    first = error.errors[0]
    assert (first.line, first.field) == (line, field), str(error)
    assert message in first.message, str(error)
    assert f"line {line}" in str(error)


def test_every_bad_row_is_reported_with_its_own_line() -> None:
    text = RRF_ROW + RRF_ROW.replace("6809|ENG", "x|ENG") + "\n" + RRF_ROW.replace("|metformin|", "||") + "a|b\n"
    error = rejected("rxnorm-rrf", "medical", text.encode())
    assert [(e.line, e.field) for e in error.errors] == [(2, "RXCUI"), (4, "STR"), (5, None)]
    entries = "\n".join([ISO_ENTRY, ISO_ENTRY.replace(">EUR<", ">E1<"), ISO_ENTRY, ISO_ENTRY.replace(">978<", ">x<")])
    error = rejected("iso4217-xml", "finance", ISO.format(entries).encode())
    assert [(e.line, e.field) for e in error.errors] == [(3, "Ccy"), (5, "CcyNbr")]
