"""Validators use the organisation's imports (tests/knowledge_graphs/imports/fixtures): a party on the imported
SDN list said not to be sanctioned, a case from the imported SCDB table cited with the wrong year or volume, a
dose above the imported formulary maximum: each contradicted, with the imported row as evidence. Several
sentences per class, and the packaged KG alone as the control."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

import pytest

from knowledge_graphs import KnowledgeGraph, load_kg
from knowledge_graphs.imports import ImportStamp, Overlay, apply_overlays, diff_versions, parse_file
from rules import verify

FIXTURES = Path(__file__).parents[1] / "knowledge_graphs" / "imports" / "fixtures"


@cache
def imported(fmt: str, domain: str, file: str) -> KnowledgeGraph:
    data = (FIXTURES / file).read_bytes()
    stamp = ImportStamp(fmt, fmt, file, hashlib.sha256(data).hexdigest(), "2026-12-05T10:00:00+00:00",
                        "key:k1 (acme)", "2026-12-01")
    return apply_overlays(load_kg(domain), [parse_file(fmt, data, domain=domain, stamp=stamp, kg=load_kg(domain))])


def claims(text: str, domain: str, kg: KnowledgeGraph, kind: str) -> list:
    return [c for c in verify(text, domain, kg=kg).claims if c.kind == kind]


def sdn() -> KnowledgeGraph:
    return imported("ofac-sdn", "finance", "sdn.csv")


# -- sanctions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "party", "line"), [
    ("Teodor Zavoransky is not sanctioned.", "Teodor Zavoransky", 1),
    ("Our records show that ZAVORANSKI, Fedor is not on the OFAC SDN list.", "ZAVORANSKI, Fedor", 1),
    ("Northwind Maritime Holdings was removed from the SDN list last year.", "Northwind Maritime Holdings", 2),
    ("You can wire funds to Bluefern Exchange LLC: it is not subject to any U.S. sanctions.", "Bluefern Exchange LLC", 5),
    ("The vessel Coral Star isn't designated by OFAC.", "Coral Star", 3),
    ("Hamid Nur Qarshi's sanctions were lifted.", "Hamid Nur Qarshi", 4),
])
def test_a_listed_party_said_not_to_be_sanctioned_is_contradicted_by_its_row(text: str, party: str, line: int) -> None:
    (claim,) = claims(text, "finance", sdn(), "sanctions")
    assert claim.verdict == "contradicted" and claim.text == party
    assert f"sdn.csv line {line} " in claim.evidence[0].locator and claim.evidence[0].as_of == "2026-12-01"
    assert "U.S. Treasury OFAC" in claim.evidence[0].source
    assert verify(text, "finance", kg=sdn()).gate_actions[0].on_fail == "block"
    assert not claims(text, "finance", load_kg("finance"), "sanctions")      # packaged KG: nothing to judge by


@pytest.mark.parametrize("text", [
    "Teodor Zavoransky is sanctioned by OFAC.",
    "The tanker Coral Star is on the SDN list under the IRAN-EO13846 program.",
    "Hamid Nur Qarshi is designated under SDGT.",
    "OFAC blocked the assets of Orlovsky Air Cargo.",
])
def test_a_true_sanctions_claim_is_supported(text: str) -> None:
    (claim,) = claims(text, "finance", sdn(), "sanctions")
    assert claim.verdict == "supported"


def test_a_listed_party_under_the_wrong_program_is_contradicted() -> None:
    (claim,) = claims("The tanker Coral Star is sanctioned under the SDGT program.", "finance", sdn(), "sanctions")
    assert claim.verdict == "contradicted"
    assert any("not SDGT" in e.description for e in claim.evidence)


def test_polarity_is_per_clause() -> None:
    found = claims("OFAC has sanctioned Orlovsky Air Cargo, but Bluefern Exchange LLC is not sanctioned.", "finance",
                   sdn(), "sanctions")
    assert [(c.text, c.verdict) for c in found] == [("Orlovsky Air Cargo", "supported"),
                                                     ("Bluefern Exchange LLC", "contradicted")]


@pytest.mark.parametrize("text", [
    "Bluefern Exchange LLC opened an office in Riga.",            # named, no sanctions claim
    "Acme Shipping Ltd. is not sanctioned.",                       # a sanctions claim about an unlisted party
])
def test_no_claim_without_both_a_listed_party_and_a_sanctions_statement(text: str) -> None:
    assert not claims(text, "finance", sdn(), "sanctions")


# -- cases ------------------------------------------------------------------------------------------------


def cases() -> KnowledgeGraph:
    return imported("cases", "legal", "scdb_cases.csv")


@pytest.mark.parametrize(("text", "kind", "wrong"), [
    # the year in a citation's parenthetical is a claim of its own (case_year); a wrong volume is the citation's
    ("Kyllo v. United States, 533 U.S. 27 (1999), held that thermal imaging of a home is a search.", "case_year",
     "decided in 2001"),
    ("See Chimel v. California, 396 U.S. 752 (1969).", "case_citation", "reported at 395 U.S. 752, not 396 U.S. 752"),
    ("Tennessee v. Garner, 471 U.S. 1 (1986), limits deadly force.", "case_year", "decided in 1985"),
    ("In Gonzales v. Raich, 546 U.S. 1 (2005), the Court upheld the federal ban.", "case_citation",
     "545 U.S. 1, not 546 U.S. 1"),
    ("Escobedo v. Illinois, 378 U.S. 478 (1966).", "case_year", "decided in 1964"),
])
def test_an_imported_case_with_the_wrong_year_or_volume_is_contradicted_by_its_row(text: str, kind: str,
                                                                                    wrong: str) -> None:
    (claim,) = claims(text, "legal", cases(), kind)
    assert claim.verdict == "contradicted"
    assert any(wrong in e.description for e in claim.evidence), claim.evidence
    assert any("scdb_cases.csv line" in (e.locator or "") for e in claim.evidence)
    assert claims(text, "legal", load_kg("legal"), "case_citation")[0].verdict == "unverifiable"


@pytest.mark.parametrize("text", [
    "Kyllo v. United States, 533 U.S. 27 (2001).",
    "Chimel v. California, 395 U.S. 752 (1969), limits searches incident to arrest.",
])
def test_an_imported_case_cited_right_is_supported(text: str) -> None:
    (claim,) = claims(text, "legal", cases(), "case_citation")
    assert claim.verdict == "supported"


def test_an_imported_citation_given_to_another_case_is_contradicted() -> None:
    (claim,) = claims("Smith v. Jones, 533 U.S. 27 (2001).", "legal", cases(), "case_citation")
    assert claim.verdict == "contradicted" and any("is KYLLO v. UNITED STATES" in e.description for e in claim.evidence)


# -- formulary --------------------------------------------------------------------------------------------


def formulary() -> KnowledgeGraph:
    return imported("formulary", "medical", "formulary.csv")


@pytest.mark.parametrize(("text", "line"), [
    ("Metformin: take up to 2400 mg per day.", 2),                  # within the label's 2550, above the formulary
    ("Adults can take metformin 1200 mg twice daily.", 2),
    ("The maximum daily dose of metformin is 2550 mg.", 2),
    # the formulary row names no setting: it is the prescription limit, the OTC Drug Facts 4000 mg stays
    ("With a prescription, acetaminophen can be taken orally up to 4000 mg per day.", 3),
    ("For elderly patients, acetaminophen up to 3000 mg per day by mouth is fine.", 4),
    ("Ibuprofen 800 mg orally four times daily.", 5),
])
def test_a_dose_above_the_formulary_maximum_is_contradicted_by_the_formulary_row(text: str, line: int) -> None:
    (claim,) = claims(text, "medical", formulary(), "dose")
    assert claim.verdict == "contradicted", claim
    row = next(e for e in claim.evidence if "formulary.csv" in (e.locator or ""))
    assert f"formulary.csv line {line} " in row.locator
    assert row.source.startswith("St. Example Hospital Formulary 2026") and row.as_of == "2026-11-01"


@pytest.mark.parametrize("text", [
    "The maximum daily dose of metformin is 2000 mg.",
    "Prescription acetaminophen 500 mg orally every 6 hours.",
])
def test_a_dose_within_the_formulary_is_judged_against_its_row(text: str) -> None:
    # Within the maximum is not proof that the dose is right (the KG holds no usual dose): a stated maximum
    # that matches is supported, a regimen below it unverifiable; either way the evidence is the formulary row.
    (claim,) = claims(text, "medical", formulary(), "dose")
    assert claim.verdict == ("supported" if "maximum" in text else "unverifiable"), claim
    assert any("formulary.csv" in (e.locator or "") for e in claim.evidence)


def test_without_the_import_the_label_decides() -> None:
    (claim,) = claims("Metformin: take up to 2400 mg per day.", "medical", load_kg("medical"), "dose")
    assert claim.verdict == "contradicted" and "2550" in claim.evidence[0].description    # maximum per the label
    (claim,) = claims("Adults can take metformin 1200 mg twice daily.", "medical", load_kg("medical"), "dose")
    assert claim.verdict == "unverifiable" and "2550" in claim.evidence[0].description   # below the label's maximum


# -- a partial import keeps the facts it does not name ------------------------------------------------------


def one_row_formulary(row: str, extra_columns: str = ""):
    """The overlay of a formulary file of one row (extra columns after the required ones)."""
    data = f"drug,route,max_daily_dose,unit,source{extra_columns}\n{row}\n".encode()
    stamp = ImportStamp("st-example", "formulary", "one-row.csv", hashlib.sha256(data).hexdigest(),
                        "2026-12-05T10:00:00+00:00", "key:k1 (acme)", "2026-12-01")
    return parse_file("formulary", data, domain="medical", stamp=stamp, kg=load_kg("medical"))


@pytest.mark.parametrize(("row", "extra_columns", "drug", "kept", "gone", "claim"), [
    # a row that names no setting is a prescriber's limit: the OTC Drug Facts maximum stays
    ("Ibuprofen,oral,2400,mg,St. Example", "", "drug:DB01050", {"setting": "over-the-counter"},
     {"setting": "prescription"}, "The maximum daily dose of ibuprofen is 1200 mg."),
    # a row for the OTC setting replaces only the OTC maximum
    ("Ibuprofen,oral,1000,mg,St. Example,over-the-counter", ",setting", "drug:DB01050", {"setting": "prescription"},
     {"setting": "over-the-counter"}, "Ibuprofen: the maximum daily dose is 3200 mg."),
    # a row for one formulation replaces only that formulation's maximum
    ("Metformin,oral,1500,mg,St. Example,extended-release", ",formulation", "drug:DB00331",
     {"formulation": "immediate-release"}, {"formulation": "extended-release"},
     "Metformin immediate-release: the maximum daily dose is 2550 mg."),
], ids=["no-setting-keeps-the-otc-maximum", "otc-row-keeps-the-prescription-maximum",
        "formulation-row-keeps-the-other-formulation"])
def test_a_one_row_import_keeps_the_maxima_it_does_not_name(row: str, extra_columns: str, drug: str,
                                                           kept: dict, gone: dict, claim: str) -> None:
    packaged, overlay = load_kg("medical"), one_row_formulary(row, extra_columns)
    kg = apply_overlays(packaged, [overlay])

    def adult_oral(graph: KnowledgeGraph, qualifiers: dict) -> list:
        return [f for f in graph.facts(drug, "max_daily_dose") if f.qualifiers.get("population") == "adult"
                and "formulary" not in f.qualifiers and qualifiers.items() <= f.qualifiers.items()]

    assert adult_oral(kg, kept) == adult_oral(packaged, kept) != []          # the fact the row does not name
    assert adult_oral(kg, gone) == [] and adult_oral(packaged, gone) != []   # the one it names is superseded
    before = [(c.verdict, c.evidence[0].description) for c in claims(claim, "medical", packaged, "dose")]
    assert before and before[0][0] == "supported"
    assert [(c.verdict, c.evidence[0].description) for c in claims(claim, "medical", kg, "dose")] == before
    changes = diff_versions(packaged, [], [overlay])       # what `auditor kg diff` prints: exactly the change
    assert [f.qualifiers for f in changes.facts_removed] == [f.qualifiers for f in adult_oral(packaged, gone)]
    assert [(f.subject, f.value) for f in changes.facts_added] == [(drug, overlay.facts[0].value)]
    assert Overlay.from_json(overlay.to_json()).supersedes == overlay.supersedes          # as the store keeps it


# -- coverage: inside an index's complete range, a citation that matches nothing does not exist (issue 48) ----------
def test_a_fabricated_citation_is_contradicted_inside_imported_coverage_and_a_possible_fabrication_outside() -> None:
    from pathlib import Path

    data = (Path(__file__).parents[1] / "fixtures" / "imports" / "courtlistener_citations.csv").read_bytes()
    stamp = ImportStamp("courtlistener-citations", "courtlistener", "courtlistener_citations.csv",
                        hashlib.sha256(data).hexdigest(), "2026-12-05T10:00:00+00:00", "key:k1 (acme)", "2026-12-01")
    packaged = load_kg("legal")
    covered = apply_overlays(packaged, [parse_file("courtlistener-citations", data, domain="legal", stamp=stamp,
                                                   kg=packaged)])
    (entry,) = [c for c in covered.coverage if c["index"] == "reporter:U.S."]
    volume = entry["from"]
    text = f"The firm relied on Holloway v. Brinmark Freight Co., {volume} U.S. 901 (1980)."
    (inside,) = claims(text, "legal", covered, "case_citation")
    assert inside.verdict == "contradicted"
    assert any(e.kind == "fabrication" and f"no case at {volume} U.S. 901" in e.description for e in inside.evidence)
    (outside,) = claims(text, "legal", packaged, "case_citation")
    assert outside.verdict == "unverifiable"
    assert any(e.kind == "possible_fabrication" for e in outside.evidence)


def _imported(source: str, fixture: str, domain: str = "legal") -> KnowledgeGraph:
    from pathlib import Path

    data = (Path(__file__).parents[1] / "fixtures" / "imports" / fixture).read_bytes()
    stamp = ImportStamp(source, source.split("-")[0], fixture, hashlib.sha256(data).hexdigest(),
                        "2026-12-08T10:00:00+00:00", "key:k1 (acme)", "2026-12-01")
    packaged = load_kg(domain)
    return apply_overlays(packaged, [parse_file(source, data, domain=domain, stamp=stamp, kg=packaged)])


@pytest.mark.parametrize(("source", "fixture", "text", "absent", "nearest"), [
    # a U.S. Code title read whole: a section it lacks does not exist
    ("uslm-xml", "uslm_title42_excerpt.xml", "A plaintiff may also sue under 42 U.S.C. § 1984 for lost wages.",
     "no section 1984 in Title 42", "42 U.S.C. 1982, 1983"),
    # an eCFR part read whole: a section of that part it lacks does not exist
    ("ecfr-xml", "ecfr_title12_part1026.xml", "Creditors must follow 12 C.F.R. § 1026.2999 for every mortgage.",
     "no section 1026.2999 in 12 C.F.R. Part 1026", "12 C.F.R. 1026."),
], ids=["usc-section", "cfr-section"])
def test_a_code_section_missing_from_a_title_imported_whole_is_contradicted(source, fixture, text, absent,
                                                                             nearest) -> None:
    covered = _imported(source, fixture)
    (inside,) = claims(text, "legal", covered, "statute")
    assert inside.verdict == "contradicted"
    [evidence] = [e for e in inside.evidence if e.kind == "fabrication"]
    assert absent in evidence.description and "completely" in evidence.description and nearest in evidence.description
    (outside,) = claims(text, "legal", load_kg("legal"), "statute")   # the starter KG declares no such coverage
    assert outside.verdict == "unverifiable" and any(e.kind == "possible_fabrication" for e in outside.evidence)


def test_a_part_of_a_title_imported_only_in_part_stays_a_possible_fabrication() -> None:
    # the fixture holds part 1026 of title 12, not the whole title: part 1099's absence proves nothing
    covered = _imported("ecfr-xml", "ecfr_title12_part1026.xml")
    (claim,) = claims("Disclosures fall under 12 C.F.R. Part 1099.", "legal", covered, "statute")
    assert claim.verdict == "unverifiable" and any(e.kind == "possible_fabrication" for e in claim.evidence)


def test_a_section_imported_from_ecfr_resolves_as_a_reference() -> None:
    # eCFR sections arrive as "regulation" entities; a reference to one is found, never a possible fabrication
    covered = _imported("ecfr-xml", "ecfr_title12_part1026.xml")
    (claim,) = claims("Under 12 C.F.R. § 1026.1, Regulation Z states its purpose.", "legal", covered, "statute")
    assert claim.verdict != "contradicted" and not any(e.kind == "possible_fabrication" for e in claim.evidence)
    assert any("1026.1" in e.description for e in claim.evidence)


def test_a_section_proved_absent_is_blocked_under_the_legal_packs_default_rules() -> None:
    covered = _imported("uslm-xml", "uslm_title42_excerpt.xml")
    report = verify("Fee awards are governed by 42 U.S.C. § 1989 in every civil rights case.", "legal", kg=covered)
    [claim] = [c for c in report.claims if c.kind == "statute"]
    assert claim.verdict == "contradicted"
    actions = {(a.rule_id, a.on_fail) for a in report.gate_actions}
    assert ("legal.citation.statute.exists", "block") in actions
    # without the import the same citation is only a possible fabrication, and nothing is blocked
    plain = verify("Fee awards are governed by 42 U.S.C. § 1989 in every civil rights case.", "legal")
    assert not any(a.on_fail == "block" for a in plain.gate_actions)
