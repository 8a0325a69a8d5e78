"""Legal validators: reporters, edition dates, courts, landmark cases, fabrications, statutes."""

import pytest

from rules import verify
from rules.validators.legal.citation_parsing import find_case_citations
from tests.rules.kgs import legal_kg


def case_verdicts(text: str) -> list[str]:
    """One verdict per citation: its own, merged with the year in its parenthetical (a separate claim, so a
    right citation with a wrong year is not blamed on the citation) -- contradicted if either is."""
    claims = verify(text, "legal", kg=legal_kg()).claims
    out = []
    for claim in [c for c in claims if c.kind == "case_citation"]:
        year = [c for c in claims if c.kind == "case_year" and claim.span[1] <= c.span[0] <= claim.span[1] + 12]
        verdicts = {claim.verdict, *(c.verdict for c in year)}
        out.append("contradicted" if "contradicted" in verdicts else claim.verdict)
    return out


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Brown v. Board of Education, 347 U.S. 483 (1954), ended de jure segregation.", "supported"),
        ("Brown v. Board of Education, 347 U.S. 483 (1955), ended de jure segregation.", "contradicted"),  # year
        ("Brown v. Board of Education, 347 U.S. 484 (1954), ended de jure segregation.", "contradicted"),  # page
        ("Miranda v. Board of Education, 347 U.S. 483 (1954), is cited.", "contradicted"),                 # name
        ("Varghese v. China Southern Airlines Co., 925 F.3d 1339 (11th Cir. 2019), tolls the period.", "contradicted"),
        ("Smith v. Jones, 12 Foo.Rep. 44 (1999), holds so.", "contradicted"),     # reporter in no registry
        ("Doe v. Roe, 500 F.3d 100 (1990), holds so.", "contradicted"),           # F.3d starts in 1993
        ("Jones v. Smith, 500 F.3d 123 (S.D.N.Y. 2008), holds so.", "contradicted"),  # district court in F.3d
        ("Jones v. Smith, 500 F.3d 123 (2d Cir. 2008), holds so.", "unverifiable"),   # well-formed, unconfirmable
        ("Roe v. Wade, 410 U.S. 113 (1973), is not in this small KG.", "unverifiable"),
    ],
)
def test_case_citations(text: str, verdict: str) -> None:
    assert case_verdicts(text) == [verdict]


def test_year_comes_from_the_parenthetical_after_each_citation() -> None:
    # eyecite attaches 2019 to Brown here; each citation must keep its own year
    text = ("See Brown v. Board of Education, 347 U.S. 483 (1954); Roe v. Wade, 410 U.S. 113 (1973), "
            "and Varghese v. China Southern Airlines Co., 925 F.3d 1339 (11th Cir. 2019).")
    assert [(c.volume, c.year) for c in find_case_citations(text)] == [("347", 1954), ("410", 1973), ("925", 2019)]
    assert case_verdicts(text) == ["supported", "unverifiable", "contradicted"]


def test_fabrication_evidence_quotes_the_sanctions_order() -> None:
    claim = verify("Varghese v. China Southern Airlines Co., 925 F.3d 1339 (11th Cir. 2019).", "legal",
                   kg=legal_kg()).claims[0]
    assert claim.evidence[0].kind == "fabrication"
    assert "Mata v. Avianca" in (claim.evidence[0].source or "")


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("The claim arises under 42 U.S.C. § 1983.", "supported"),
        ("The claim arises under 42 USC 1983.", "supported"),
        ("Dismissal under Fed. R. Civ. P. 12(b)(6) was proper.", "supported"),
        ("The Computer Fraud and Abuse Act, 18 U.S.C. § 1031, applies.", "contradicted"),
        ("The Computer Fraud and Abuse Act, 42 U.S.C. § 1983, applies.", "contradicted"),
        ("Relief is available under 42 U.S.C. § 9999.", "unverifiable"),
    ],
)
def test_statutes(text: str, verdict: str) -> None:
    assert [c.verdict for c in verify(text, "legal", kg=legal_kg()).claims if c.kind == "statute"] == [verdict]


def test_statute_references_are_not_case_citations() -> None:
    assert find_case_citations("See 42 U.S.C. § 1983 and 28 USC 1331 and 17 C.F.R. § 240.10b-5.") == []


@pytest.mark.parametrize("text", ["18 Pa. C.S. 2501", "42 Pa. Cons. Stat. 5524", "124 Stat. 119", "10 Del. Code 8106"])
def test_code_citations_are_not_unknown_reporters(text: str) -> None:
    assert find_case_citations(f"The claim is governed by {text}.") == []


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Lee v. Hart, 900 F. Supp. 100 (1995), is persuasive.", "unverifiable"),     # reporters-db says F. Supp. ended 1988
        ("Lee v. Hart, 100 F. Supp. 2d 100 (1990), is persuasive.", "contradicted"),  # F. Supp. 2d began in 1998
    ],
)
def test_corrected_edition_dates(text: str, verdict: str) -> None:
    assert case_verdicts(text) == [verdict]


# -- denials of documented fabrications -----------------------------------------------------------------
VARGHESE = "Varghese v. China Southern Airlines Co., 925 F.3d 1339 (11th Cir. 2019)"


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        # the sentence says the citation is fabricated: a correct denial
        (f"No. {VARGHESE}, does not exist: it is a fabricated citation documented in Mata v. Avianca.", "supported"),
        (f"{VARGHESE}, is a fake case invented by ChatGPT.", "supported"),
        (f"{VARGHESE}, is fictitious.", "supported"),
        (f"{VARGHESE}, was made up by a chatbot.", "supported"),
        (f"Counsel cited a non-existent case, {VARGHESE}.", "supported"),
        (f"The bogus citation {VARGHESE} was sanctioned.", "supported"),
        # the sentence relies on it, or the cue is about something else, or the cue is negated
        (f"{VARGHESE}, holds that the limitations period is tolled.", "contradicted"),
        (f"{VARGHESE}, holds that the carrier's fake records were inadmissible.", "contradicted"),
        (f"{VARGHESE}, is not fabricated; it tolls the period.", "contradicted"),
        (f"{VARGHESE}, isn't a fake case.", "contradicted"),
        (f"{VARGHESE}, does exist and is not made up.", "contradicted"),
        (f"{VARGHESE}, tolls the period. It is a fabricated citation.", "contradicted"),   # the cue is in another sentence
        (f"Unlike the fabricated Miller v. United Airlines cite, {VARGHESE}, tolls the period.", "contradicted"),
        (f"{VARGHESE}, tolls the limitations period under the Montreal Convention, and the opposing "
         f"brief's claim that our authorities were fabricated is baseless.", "contradicted"),   # cue too far away
    ],
)
def test_denial_of_a_documented_fabrication(text: str, verdict: str) -> None:
    assert case_verdicts(text) == [verdict]


def test_denial_evidence_is_the_documented_fabrication() -> None:
    report = verify(f"{VARGHESE}, does not exist.", "legal", kg=legal_kg())
    claim = report.claims[0]
    assert claim.verdict == "supported"
    assert claim.evidence[0].kind == "fabrication"
    assert "Mata v. Avianca" in (claim.evidence[0].source or "")
    assert report.citations[0].resolution == "invalid" and report.citations[0].supports_claim is True


def test_denial_cue_does_not_rescue_a_real_case_with_wrong_details() -> None:
    # no fabrication record: the denial logic does not apply, the ordinary checks still run
    assert case_verdicts("Brown v. Board of Education, 347 U.S. 483 (1955), is not made up.") == ["contradicted"]
