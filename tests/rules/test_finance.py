"""Finance validators on real and corrupted identifiers, list snapshots and thresholds."""

import pytest

from rules import verify
from tests.rules.kgs import finance_kg


def verdicts(text: str, kind: str | None = None) -> list[tuple[str, str]]:
    report = verify(text, "finance", kg=finance_kg())
    return [(c.text, c.verdict) for c in report.claims if kind is None or c.kind == kind]


@pytest.mark.parametrize(
    ("text", "identifier", "verdict"),
    [
        ("Apple's ISIN is US0378331005.", "US0378331005", "unverifiable"),
        ("Apple's ISIN is US0378331006.", "US0378331006", "contradicted"),        # check digit changed
        ("Microsoft's ISIN is US5949181045.", "US5949181045", "unverifiable"),
        ("Apple Inc. has the LEI HWUPKR0MPOU8FGXBT394.", "HWUPKR0MPOU8FGXBT394", "supported"),
        ("Apple Inc. has the LEI HWUPKR0MPOU8FGXBT395.", "HWUPKR0MPOU8FGXBT395", "contradicted"),
        # a valid check digit says nothing about the issuer the text credits it to (no offline register)
        ("Apple's CUSIP is 037833100.", "037833100", "unverifiable"),
        ("Apple's CUSIP is 037833101.", "037833101", "contradicted"),
        ("Pay to IBAN DE89 3704 0044 0532 0130 00.", "DE89 3704 0044 0532 0130 00", "supported"),
        ("Pay to IBAN GB82 WEST 1234 5698 7654 32.", "GB82 WEST 1234 5698 7654 32", "supported"),
        ("Pay to IBAN GB82 WEST 1234 5698 7654 33.", "GB82 WEST 1234 5698 7654 33", "contradicted"),
        ("Deutsche Bank's BIC is DEUTDEFFXXX.", "DEUTDEFFXXX", "supported"),
        ("The BIC is DEUTXXFF.", "DEUTXXFF", "contradicted"),                    # XX is no country
        ("JPMorgan Chase's SWIFT code is CHASUS33.", "CHASUS33", "unverifiable"),  # absent from registry != fake
    ],
)
def test_identifiers(text: str, identifier: str, verdict: str) -> None:
    assert (identifier, verdict) in verdicts(text, "identifier")


def test_identifier_evidence_names_the_package_version() -> None:
    claim = verify("ISIN US0378331006", "finance", kg=finance_kg()).claims[0]
    assert claim.evidence[0].source.startswith("python-stdnum==")
    assert claim.evidence[0].rule_id == "fin.identifier.checksum"


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Iran is on the FATF black list.", "supported"),
        ("Germany is on the FATF black list.", "contradicted"),
        ("North Korea is not on the FATF blacklist.", "contradicted"),
        ("Bulgaria was on the FATF grey list in February 2024.", "supported"),
        ("Bulgaria is not on the FATF grey list.", "contradicted"),
        ("Bulgaria was on the FATF grey list in 2019.", "unverifiable"),       # before the oldest snapshot
    ],
)
def test_list_membership(text: str, verdict: str) -> None:
    [(_, got)] = verdicts(text, "list_membership")
    assert got == verdict


def test_list_evidence_carries_snapshot_date_and_notes_stale_snapshot() -> None:
    report = verify("Iran is on the FATF black list as of June 2026.", "finance", kg=finance_kg())
    claim = report.claims[0]
    assert claim.verdict == "supported"
    assert claim.evidence[0].as_of == "2025-06-13"
    assert any("later than the newest snapshot" in e.description for e in claim.evidence)
    assert claim.confidence < 0.9


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("The CTR threshold is $10,000.", "supported"),
        ("A Currency Transaction Report is required for cash over $5,000.", "contradicted"),
        ("The CTR threshold is USD 10,000.", "supported"),
        ("The CTR threshold is EUR 10,000.", "unverifiable"),   # no conversion between currencies
    ],
)
def test_thresholds(text: str, verdict: str) -> None:
    [(_, got)] = verdicts(text, "threshold")
    assert got == verdict


def test_currency_code_and_country_currency() -> None:
    got = verdicts("The currency code is EUD. Germany uses the euro as its currency. Japan uses the euro as its currency.")
    assert ("EUD", "contradicted") in got
    assert ("Germany uses the euro", "supported") in got
    assert ("Japan uses the euro", "contradicted") in got


def test_acronym_forms_need_capitals() -> None:
    # "and" must not link to Andorra (alpha-3 AND), "can" not to Canada
    report = verify("Iran and Germany can be on the FATF black list.", "finance", kg=finance_kg())
    assert {c.subject for c in report.claims} == {"country:IR", "country:DE"}


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("The currency code of the Japanese yen is JPN.", "contradicted"),        # a country code, not ISO 4217
        ("The ISO 4217 currency code for the euro is EUR.", "supported"),
        ("The ISO 4217 currency code for the Japanese yen is EUR.", "contradicted"),   # real code, wrong currency
    ],
)
def test_currency_code_claims(text: str, verdict: str) -> None:
    assert [v for _, v in verdicts(text, "currency_code")] == [verdict]


def test_polarity_is_per_clause() -> None:
    got = verdicts("Iran is on the FATF black list, but Germany is not.", "list_membership")
    assert got == [("Iran is on the FATF black list", "supported"), ("Germany is not", "supported")]


def test_threshold_range_uses_the_lower_bound() -> None:
    # "$3,000 to $10,000": only the lower bound is the threshold being claimed
    # (the claim's span is the amount with its comparison, not the whole sentence)
    assert verdicts("A CTR is required for cash from $10,000 to $20,000.", "threshold") == [("$10,000", "supported")]


def test_prompt_supplies_the_date() -> None:
    # Bulgaria is on the February 2024 snapshot; a question about 2019 predates every snapshot
    answer = "Bulgaria is on the FATF grey list."
    assert verdicts(answer, "list_membership") == [("Bulgaria is on the FATF grey list", "supported")]
    asked = verify(answer, "finance", kg=finance_kg(), prompt="Was Bulgaria grey-listed in 2019?")
    assert [c.verdict for c in asked.claims] == ["unverifiable"]


def test_isin_and_cusip_in_one_sentence_must_agree() -> None:
    assert ("037833100", "contradicted") not in verdicts("Apple's ISIN US0378331005 embeds its CUSIP 037833100.")
    got = verdicts("Apple's ISIN US0378331005 embeds its CUSIP 594918104.", "consistency")
    assert got == [("594918104", "contradicted")]    # both valid on their own: Microsoft's CUSIP
