"""Failure classes of issue 40, each in new sentences written for this file (never sentences of an evaluation set):
numbers in words, structured blocks, polarity, attribution to a drug that only names a condition, regulation
citations read as case reporters, and a supported span that hides a contradicted one."""

from __future__ import annotations

import pytest

from rules import verify
from rules.extraction.numbers import numeric_view
from rules.extraction.polarity import negated_before
from rules.extraction.reading import reading_view


@pytest.fixture(scope="module", autouse=True)
def kgs_load() -> None:
    from knowledge_graphs import load_kg

    for domain in ("finance", "legal", "medical"):
        load_kg(domain)


def claims(text: str, domain: str, kind: str | None = None) -> list[tuple[str, str]]:
    return [(c.verdict, c.text) for c in verify(text, domain).claims if kind is None or c.kind == kind]


# -- numbers said in words: decimals, parts of a scale, colloquial amounts ----------------------------------
@pytest.mark.parametrize(("said", "read"), [
    ("take one point five grams", "take 1.5 grams"),
    ("zero point two five milligrams", "0.25 milligrams"),
    ("point five mg", "0.5 mg"),
    ("a quarter of a million dollars", "250000 dollars"),
    ("half a million euros", "500000 euros"),
    ("half a milligram", "0.5 milligram"),
    ("a thousand dollars", "1000 dollars"),
    ("deposits over twelve grand", "deposits over $12000"),
    ("about 8 grand in cash", "about $8000 in cash"),
    ("one hundred and forty", "140"),
    ("nineteen ninety-four", "1994"),
])
def test_number_words_with_decimals_and_colloquial_amounts(said: str, read: str) -> None:
    assert numeric_view(said).text == read


def test_a_decimal_in_words_is_judged_whole() -> None:
    # the label's single dose of acetaminophen is 1,000 mg: "one point five grams" is 1,500 mg, not 5 g
    found = claims("A single dose of acetaminophen for an adult can be one point five grams.", "medical", "dose")
    assert found and found[0][1] == "one point five grams"


def test_colloquial_amount_is_read_as_dollars() -> None:
    # the CTR threshold is more than $10,000
    assert {v for v, _ in claims("A bank files a CTR for cash deposits over ten grand.", "finance")} == {"supported"}
    assert {v for v, _ in claims("A bank must file a CTR once cash deposits pass four grand.", "finance")} == {"contradicted"}


# -- structured blocks: JSON, YAML and config-style lines are read as sentences ------------------------------
def test_json_block_values_are_claims_on_their_own_span() -> None:
    text = 'Summary:\n```json\n{"drug": "ibuprofen", "otc_max_daily_mg": 2400, "route": "oral"}\n```\nAsk a pharmacist.'
    found = verify(text, "medical").claims
    dose = [c for c in found if c.kind == "dose"]
    assert dose and dose[0].verdict == "contradicted"     # the OTC maximum is 1,200 mg a day
    assert text[dose[0].span[0]:dose[0].span[1]] == dose[0].text and "2400" in dose[0].text
    assert "drug" not in dose[0].text                     # the span stays on its own key, not across the object


def test_yaml_block_and_config_lines_carry_units_in_their_keys() -> None:
    text = "Reporting setup:\n```yaml\nbank_rules:\n  ctr_threshold_usd: 10000\n  travel_rule_threshold_usd: 3000\n```\n"
    assert {v for v, _ in claims(text, "finance")} == {"supported"}
    wrong = {v for v, _ in claims("fbar_aggregate_threshold_usd: 50000\n", "finance")}
    assert "contradicted" in wrong and "supported" not in wrong


def test_prose_is_its_own_reading_view() -> None:
    text = "Metformin is taken with meals. The usual ceiling is 2,550 mg a day."
    view = reading_view(text)
    assert view.text == text and not view.rewritten


# -- polarity: a negated relation is judged as negated ------------------------------------------------------
@pytest.mark.parametrize(("text", "verdict"), [
    ("Tadalafil is not contraindicated with isosorbide mononitrate.", "contradicted"),
    ("Tadalafil isn't contraindicated alongside isosorbide mononitrate, just monitor pressure.", "contradicted"),
    ("Tadalafil is contraindicated with isosorbide mononitrate.", "supported"),
])
def test_negated_contraindication_between_two_drugs(text: str, verdict: str) -> None:
    found = claims(text, "medical", "interaction")
    if not found:
        pytest.skip("the KG holds no interaction for this pair")
    assert {v for v, _ in found} == {verdict}


def test_negation_window_stops_at_a_termination() -> None:
    text = "It is not cheap, but it is contraindicated with nitrates."
    assert not negated_before(text, text.index("contraindicated"))
    assert negated_before("it is not really contraindicated", len("it is not really "))
    assert not negated_before("not only is it contraindicated", len("not only is it "))


# -- attribution: a drug named inside a condition is not the subject -----------------------------------------
def test_drug_inside_a_condition_name_is_not_a_partner() -> None:
    text = "Naproxen should be avoided in aspirin-sensitive asthma."
    found = claims(text, "medical", "interaction")
    assert not any("aspirin" in t and v == "supported" for v, t in found)


# -- citations: a regulation is never a case reporter ---------------------------------------------------------
@pytest.mark.parametrize("text", [
    "The disclosure rules live in 12 C.F.R. Part 1026.",
    "HIPAA's privacy rule is codified at 45 CFR Part 164.",
    "Check 17 C.F.R. Parts 240 and 249 for the forms.",
])
def test_cfr_parts_are_not_case_citations(text: str) -> None:
    assert not [c for c in verify(text, "legal").claims if c.kind == "case_citation"]


# -- a supported span never hides a contradicted one ------------------------------------------------------------
def test_supported_claim_containing_a_contradicted_claim_is_not_supported() -> None:
    from rules.report import Claim
    from rules.verify import _without_hidden_contradiction

    outer = Claim(text="Section 5313 requires reports over $5,000", span=(0, 41), kind="statute", verdict="supported",
                  confidence=0.9, evidence=[], rule_ids=["r"])
    judged = _without_hidden_contradiction(outer, [(30, 41)])
    assert judged.verdict == "unverifiable" and "contradicted" in judged.evidence[0].description
    assert _without_hidden_contradiction(outer, [(50, 60)]).verdict == "supported"


# -- a right name in parentheses names the subject; it is not what the sentence asserts --------------------------
def test_parenthetical_brand_makes_no_claim_when_right_and_is_contradicted_when_wrong() -> None:
    assert not claims("Sertraline (Zoloft) should be taken at the same time each day.", "medical", "brand_generic")
    assert {v for v, _ in claims("Sertraline (Prozac) should be taken at the same time each day.", "medical",
                                 "brand_generic")} == {"contradicted"}


# -- a dose stated for a combination is that combination's limit, which the KG may not hold ---------------------
def test_a_dose_limit_stated_with_a_co_medication_is_not_contradicted_by_the_single_drug_maximum() -> None:
    assert {v for v, _ in claims("Simvastatin: keep it at 10 mg daily at most when combined with amlodipine.",
                                 "medical", "dose")} <= {"unverifiable", "supported"}
    assert {v for v, _ in claims("Simvastatin: keep it at 200 mg daily at most.", "medical", "dose")} == {"contradicted"}


# -- polarity of "billable": a negated statement about a code is read as negated ----------------------------------
@pytest.mark.parametrize(("text", "verdict"), [
    ("For claims since the 2022 code update, M54.5 is no longer a billable code.", {"unverifiable", "supported"}),
    ("E78.5 isn't a billable code.", {"contradicted"}),         # it is a billable leaf
])
def test_negated_billable_statements(text: str, verdict: set[str]) -> None:
    found = {v for v, _ in claims(text, "medical", "icd10cm_code")}
    assert found == verdict if len(verdict) == 1 else found <= verdict


# -- every domain an answer touches; references that may not exist (issue 48) --------------------------------------
def test_a_legal_answers_dose_claim_is_judged_by_the_medical_checkers() -> None:
    report = verify("The settlement memo notes that the plaintiff took apixaban at 40 mg a day before the bleed.", "legal")
    dose = [c for c in report.claims if c.kind == "dose"]
    assert [(c.domain, c.verdict) for c in dose] == [("medical", "contradicted")]
    assert "medical" in report.versions.other_domains
    assert any(a.rule_id.startswith("med.") for a in report.gate_actions)


def test_an_invented_drug_name_is_marked_as_a_possible_fabrication() -> None:
    found = [c for c in verify("Start Quorvantide 25 mg once daily for the neuropathy.", "medical").claims
             if c.kind == "drug_name"]
    assert [c.verdict for c in found] == ["unverifiable"]
    assert any(e.kind == "possible_fabrication" for e in found[0].evidence)


def test_without_routing_only_the_request_domain_judges() -> None:
    report = verify("The settlement memo notes that the plaintiff took apixaban at 40 mg a day before the bleed.", "legal",
                    route=False)
    assert not [c for c in report.claims if c.kind == "dose"] and not report.versions.other_domains
