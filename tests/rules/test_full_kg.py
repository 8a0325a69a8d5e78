"""The validators against the real finance and legal KGs (`knowledge_graphs.load_kg`), as the service uses them."""

import pytest

from rules import verify


@pytest.fixture(scope="module", autouse=True)
def kgs_load() -> None:
    from knowledge_graphs import load_kg

    for domain in ("finance", "legal"):
        load_kg(domain)


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Iran is on the FATF black list as of June 2025.", "supported"),
        ("Japan is on the FATF grey list as of June 2025.", "contradicted"),
        ("Croatia is on the FATF grey list as of February 2024.", "supported"),   # older snapshot still used
        ("A Currency Transaction Report is required for cash over $5,000.", "contradicted"),
        ("An MSB SAR is required for suspicious transactions of at least $2,000.", "supported"),
    ],
)
def test_finance(text: str, verdict: str) -> None:
    verdicts = {c.verdict for c in verify(text, "finance").claims}
    assert verdicts == {verdict}


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Marbury v. Madison, 5 U.S. 137 (1803), established judicial review.", "supported"),  # pre-1875 U.S. volume
        ("Ashcroft v. Iqbal, 556 U.S. 662 (2009), extended Twombly.", "supported"),
        ("Gibbons v. Ogden, 556 U.S. 662 (2009), extended Twombly.", "contradicted"),     # alias "Iqbal" is no excuse
        ("Brown v. Board of Education, 347 F.2d 483 (1954), ended segregation.", "contradicted"),  # SCOTUS not in F.2d
        ("Miller v. United Airlines, Inc., 174 F.3d 366 (4th Cir. 1999), is on point.", "contradicted"),  # Mata list
        ("Miller v. United States, 307 U.S. 174 (1939), is on point.", "unverifiable"),   # same plaintiff, real case
    ],
)
def test_legal(text: str, verdict: str) -> None:
    assert [c.verdict for c in verify(text, "legal").claims if c.kind == "case_citation"] == [verdict]


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("No. Matter of Bourguignon v. Coordinated Behavioral Health Servs., Inc., 114 A.D.3d 947 (3d Dep't 2014), "
         "does not exist: it is a fabricated citation documented in Mata v. Avianca / Park v. Kim", "supported"),
        ("Matter of Bourguignon v. Coordinated Behavioral Health Servs., Inc., 114 A.D.3d 947 (3d Dep't 2014), "
         "supports the argument.", "contradicted"),
        ("Miller v. United Airlines, Inc., 174 F.3d 366 (4th Cir. 1999), was invented by ChatGPT.", "supported"),
    ],
)
def test_legal_denials_of_documented_fabrications(text: str, verdict: str) -> None:
    assert [c.verdict for c in verify(text, "legal").claims if c.kind == "case_citation"] == [verdict]


@pytest.mark.parametrize(
    "text",
    [
        "Under 31 U.S.C. 5318, Iran is on the FATF black list as of June 2025.",
        "Per 26 U.S.C.A. 6050I, Iran is on the FATF black list as of June 2025.",
        "Title 31 of the U.S. Code requires reports; the euro is the currency of Germany.",
        "Under 31 U.S.C. 5313, Japan uses the yen.",
    ],
)
def test_us_inside_a_statute_citation_is_not_the_country(text: str) -> None:
    claims = verify(text, "finance").claims
    assert claims and all(c.subject != "country:US" for c in claims)
    assert {c.verdict for c in claims} == {"supported"}
