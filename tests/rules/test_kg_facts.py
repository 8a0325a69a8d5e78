"""The generic KG fact checker (`kg.facts`) and the curated fact files it reads (issues 40 and 41).

A fixture fact file is laid over a copy of the packaged finance data (without the curated `facts/` folder, so these
tests do not move with the curated data): relations with aliases, facts with validity periods and qualifiers. Every
sentence is new, written for this file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from knowledge_graphs.curated import DATA_DIR, CuratedDataError
from knowledge_graphs.model import KnowledgeGraph
from knowledge_graphs.registry import build_kg
from rules import verify

FACTS = """
relations:
  deposit_insurance_limit:
    label: standard maximum deposit insurance amount
    value: money
    functional: true
    aliases: [insures deposits up to, insured up to, deposit insurance limit]
  elective_deferral_limit:
    label: elective deferral limit
    value: money
    functional: true
    aliases: [deferral limit, contribution limit]
  filing_deadline:
    label: filing deadline
    value: duration
    functional: true
    aliases: [due within, must be filed within]
  ratified_in:
    label: year of ratification
    value: year
    functional: true
    aliases: [ratified in]
  form_purpose:
    label: what the form reports
    value: text
    functional: true
    aliases: [is used for, is filed for]
  administered_by:
    label: administering agency
    value: entity
    functional: true
    aliases: [is administered by, is run by]
entities:
  - {id: "agency:fdic-test", type: agency, name: "Federal Deposit Insurance Corporation", aliases: [FDIC], source: uscode, locator: "12 U.S.C. 1811", as_of: 2026-12-07}
  - {id: "agency:fincen-test", type: agency, name: "Financial Crimes Enforcement Network", aliases: [FinCEN], source: uscode, locator: "31 U.S.C. 310", as_of: 2026-12-07}
  - {id: "agency:ofac-test", type: agency, name: "Office of Foreign Assets Control", aliases: [OFAC], source: uscode, locator: "31 CFR 501", as_of: 2026-12-07}
  - {id: "plan:k401-test", type: retirement_plan, name: "401(k) plan", aliases: ["401(k)"], source: uscode, locator: "26 U.S.C. 402(g)", as_of: 2026-12-07}
  - {id: "form:sec-10k-test", type: sec_form, name: "Form 10-K", aliases: ["10-K"], source: uscode, locator: "17 CFR 249.310", as_of: 2026-12-07}
  - {id: "form:sec-8k-test", type: sec_form, name: "Form 8-K", aliases: ["8-K"], source: uscode, locator: "17 CFR 249.308", as_of: 2026-12-07}
  - {id: "regime:bsa-test", type: regime, name: "Bank Secrecy Act", aliases: [BSA], source: uscode, locator: "31 U.S.C. 5311", as_of: 2026-12-07}
  - {id: "amendment:xxvi-test", type: amendment, name: "Twenty-sixth Amendment", aliases: [26th Amendment], source: uscode, locator: "U.S. Const. amend. XXVI", as_of: 2026-12-07}
facts:
  - {subject: "agency:fdic-test", relation: deposit_insurance_limit, value: 250000, unit: USD, valid_from: 2010-07-21, source: uscode, locator: "12 U.S.C. 1821(a)(1)(E)", as_of: 2026-12-07}
  - {subject: "agency:fdic-test", relation: deposit_insurance_limit, value: 100000, unit: USD, valid_from: 1980-03-31, valid_to: 2008-10-03, source: uscode, locator: "12 U.S.C. 1821(a)(1)(B) (1980)", as_of: 2026-12-07}
  - {subject: "plan:k401-test", relation: elective_deferral_limit, value: 23000, unit: USD, qualifiers: {tax_year: 2024}, valid_from: 2024-01-01, valid_to: 2025-01-01, source: uscode, locator: "IRS Notice 2023-75", as_of: 2026-12-07}
  - {subject: "plan:k401-test", relation: elective_deferral_limit, value: 23500, unit: USD, qualifiers: {tax_year: 2025}, valid_from: 2025-01-01, valid_to: 2026-01-01, source: uscode, locator: "IRS Notice 2024-80", as_of: 2026-12-07}
  - {subject: "form:sec-10k-test", relation: filing_deadline, value: 60, unit: days, qualifiers: {filer: large accelerated filer}, source: uscode, locator: "Form 10-K, General Instruction A", as_of: 2026-12-07}
  - {subject: "form:sec-10k-test", relation: filing_deadline, value: 75, unit: days, qualifiers: {filer: accelerated filer}, source: uscode, locator: "Form 10-K, General Instruction A", as_of: 2026-12-07}
  - {subject: "form:sec-10k-test", relation: filing_deadline, value: 90, unit: days, qualifiers: {filer: non-accelerated filer}, source: uscode, locator: "Form 10-K, General Instruction A", as_of: 2026-12-07}
  - {subject: "amendment:xxvi-test", relation: ratified_in, value: 1971, source: uscode, locator: "U.S. Const. amend. XXVI", as_of: 2026-12-07}
  - {subject: "form:sec-10k-test", relation: form_purpose, value: "annual report", qualifiers: {value_aliases: ["yearly report"]}, source: uscode, locator: "17 CFR 249.310", as_of: 2026-12-07}
  - {subject: "form:sec-8k-test", relation: form_purpose, value: "current report of material events", source: uscode, locator: "17 CFR 249.308", as_of: 2026-12-07}
  - {subject: "regime:bsa-test", relation: administered_by, object: "agency:fincen-test", source: uscode, locator: "31 CFR 1010.810", as_of: 2026-12-07}
"""


def _data_dir(tmp: Path, facts: str) -> Path:
    shutil.copytree(DATA_DIR / "finance", tmp / "finance", ignore=shutil.ignore_patterns("facts"))
    (tmp / "finance" / "facts").mkdir()
    (tmp / "finance" / "facts" / "test.yaml").write_text(facts, encoding="utf-8")
    return tmp


@pytest.fixture(scope="module")
def kg(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeGraph:
    return build_kg("finance", _data_dir(tmp_path_factory.mktemp("kgdata"), FACTS))


def judged(kg: KnowledgeGraph, text: str, prompt: str | None = None) -> list[tuple[str, str, str]]:
    report = verify(text, "finance", kg=kg, prompt=prompt, route=False)
    return [(c.verdict, c.kind, c.text) for c in report.claims if c.rule_ids == ["fin.kg.fact"]]


def verdicts(kg: KnowledgeGraph, text: str, prompt: str | None = None) -> set[str]:
    return {verdict for verdict, _, _ in judged(kg, text, prompt)}


def test_a_fact_is_checked_in_free_text_by_its_relation_aliases(kg: KnowledgeGraph) -> None:
    assert verdicts(kg, "Your bank's deposits are fine: the FDIC insures deposits up to $250,000.") == {"supported"}
    assert verdicts(kg, "Good news: the FDIC insures deposits up to $500,000 per person.") == {"contradicted"}
    # inflections of the alias read the same
    assert verdicts(kg, "Since the last reform the FDIC has insured deposits up to $250,000.") == {"supported"}


def test_a_time_valid_fact_judged_at_two_dates_gives_two_verdicts(kg: KnowledgeGraph) -> None:
    # the 2024 limit was $23,000; stated for 2025 it is wrong (that year's limit is $23,500)
    assert verdicts(kg, "For 2024 the 401(k) deferral limit was $23,000.") == {"supported"}
    assert verdicts(kg, "For 2025 the 401(k) deferral limit is $23,000.") == {"contradicted"}
    assert verdicts(kg, "In 1995 the FDIC insured up to $100,000.") == {"supported"}


def test_the_year_can_come_from_the_question(kg: KnowledgeGraph) -> None:
    assert verdicts(kg, "The 401(k) contribution limit is $23,500.", prompt="What can I put in my 401(k) in 2025?") \
        == {"supported"}


def test_two_years_in_one_sentence_leave_the_time_ambiguous(kg: KnowledgeGraph) -> None:
    assert verdicts(kg, "Between 2024 and 2025 the 401(k) deferral limit was $23,000.") == {"unverifiable"}


def test_qualifiers_named_in_the_text_select_the_fact(kg: KnowledgeGraph) -> None:
    assert verdicts(kg, "For large accelerated filers the 10-K is due within 60 days.") == {"supported"}
    # "non-accelerated filer" names "accelerated filer" too: the longer match decides
    assert verdicts(kg, "Non-accelerated filers: the 10-K is due within 60 days.") == {"contradicted"}
    # no filer named: a value that is right for one filer category is true in that reading; a value right for none
    # is not contradicted on a guess about which category was meant
    assert verdicts(kg, "The 10-K is due within 75 days of year end.") == {"supported"}
    assert verdicts(kg, "The 10-K is due within 45 days of year end.") == {"unverifiable"}


def test_units_that_cannot_be_compared_are_unverifiable(kg: KnowledgeGraph) -> None:
    assert verdicts(kg, "For large accelerated filers the 10-K is due within 60 business days.") == {"unverifiable"}


def test_negation_flips_a_match_and_a_negated_mismatch_says_nothing(kg: KnowledgeGraph) -> None:
    assert verdicts(kg, "The FDIC does not insure deposits up to $250,000.") == {"contradicted"}
    assert verdicts(kg, "The FDIC does not insure deposits up to $100,000.") == {"unverifiable"}


def test_a_subject_named_only_in_another_sentence_may_confirm_but_not_contradict(kg: KnowledgeGraph) -> None:
    text = "The Twenty-sixth Amendment lowered the voting age. The next one was ratified in 1992."
    assert verdicts(kg, text) == {"unverifiable"}
    assert verdicts(kg, "The 26th Amendment was ratified in 1971.") == {"supported"}
    assert verdicts(kg, "The 26th Amendment was ratified in 1961.") == {"contradicted"}


def test_a_value_far_from_the_phrase_is_not_its_value(kg: KnowledgeGraph) -> None:
    assert not judged(kg, "The 26th Amendment was ratified in the spring, decades after a failed push that began in 1942.")


def test_entity_values_confirm_but_a_different_entity_is_not_proof_of_error(kg: KnowledgeGraph) -> None:
    assert verdicts(kg, "The BSA is administered by FinCEN.") == {"supported"}
    assert verdicts(kg, "The BSA is administered by OFAC.") == {"unverifiable"}


def test_text_values_are_read_next_to_their_phrase(kg: KnowledgeGraph) -> None:
    assert verdicts(kg, "The 10-K is used for the annual report.") == {"supported"}
    assert verdicts(kg, "The 10-K is used for the yearly report to shareholders.") == {"supported"}
    assert verdicts(kg, "The 10-K is used for the current report of material events.") == {"contradicted"}
    # a value far from the phrase, in a list of other things, is not what the phrase states
    assert not judged(kg, "The 10-K is used for many things, and unlike the 8-K, which covers the annual report, it is long.")


def test_values_in_structured_blocks_are_checked_too(kg: KnowledgeGraph) -> None:
    text = 'Limits:\n```json\n{"agency": "FDIC", "deposit_insurance_limit_usd": 200000}\n```'
    found = judged(kg, text)
    assert [v for v, _, _ in found] == ["contradicted"] and "200000" in found[0][2]


def test_a_fact_file_with_an_unknown_subject_or_bad_value_does_not_load(tmp_path: Path) -> None:
    bad_subject = FACTS.replace('subject: "agency:fdic-test", relation: deposit_insurance_limit, value: 250000',
                                'subject: "agency:nobody", relation: deposit_insurance_limit, value: 250000')
    with pytest.raises(CuratedDataError, match="agency:nobody"):
        build_kg("finance", _data_dir(tmp_path / "a", bad_subject))
    bad_value = FACTS.replace("value: 1971,", "value: nineteen-seventy-one,")
    with pytest.raises(CuratedDataError, match="must be a number"):
        build_kg("finance", _data_dir(tmp_path / "b", bad_value))
    bad_period = FACTS.replace("valid_from: 1980-03-31, valid_to: 2008-10-03", "valid_from: 2008-10-03, valid_to: 1980-03-31")
    with pytest.raises(CuratedDataError, match="not after"):
        build_kg("finance", _data_dir(tmp_path / "c", bad_period))


def test_periods_and_relations_are_part_of_the_kg_version(tmp_path: Path, kg: KnowledgeGraph) -> None:
    moved = FACTS.replace("valid_to: 2008-10-03", "valid_to: 2008-10-04")
    assert build_kg("finance", _data_dir(tmp_path / "a", moved)).version != kg.version
    renamed = FACTS.replace("aliases: [ratified in]", "aliases: [ratified in, adopted in]")
    assert build_kg("finance", _data_dir(tmp_path / "b", renamed)).version != kg.version
