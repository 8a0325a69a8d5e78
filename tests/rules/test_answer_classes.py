"""Classes of misses seen on chatbot-style answers (issue 19), each with new sentences of the class, against
the shipped KGs as the service uses them. Never sentences of the blind sets."""

import pytest

from rules import verify


@pytest.fixture(scope="module", autouse=True)
def kgs_load() -> None:
    from knowledge_graphs import load_kg

    for domain in ("finance", "legal", "medical"):
        load_kg(domain)


def claims_of(text: str, domain: str, kind: str) -> list[tuple[str, str]]:
    return [(c.verdict, c.text) for c in verify(text, domain).claims if c.kind == kind]


# -- a year stated after a citation is its own claim, clear of the citation (pattern 9) ----------------------
@pytest.mark.parametrize(
    ("text", "year_claim", "verdict"),
    [
        ("Terry v. Ohio, 392 U.S. 1, decided in 1970, allowed brief stops.", "decided in 1970", "contradicted"),
        ("Gideon v. Wainwright, 372 U.S. 335, was handed down in 1963.", "handed down in 1963", "supported"),
        ("Mapp v. Ohio, 367 U.S. 643, decided in 1951, concerned evidence.", "decided in 1951", "contradicted"),
    ],
)
def test_a_year_after_a_citation_spans_the_year_not_the_citation(text: str, year_claim: str, verdict: str) -> None:
    years = claims_of(text, "legal", "case_year")
    assert years == [(verdict, year_claim)]
    citations = claims_of(text, "legal", "case_citation")
    assert citations and all(v == "supported" for v, _ in citations)


def test_a_year_right_after_the_case_name_still_spans_the_name() -> None:
    assert claims_of("Gideon v. Wainwright was decided in 1973.", "legal", "case_year") == [
        ("contradicted", "Gideon v. Wainwright was decided in 1973")]


# -- every condition of an indication list is a claim, spanned clear of the previous item's parenthetical ---
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Lisinopril is approved for hypertension and migraine.",
         [("supported", "approved for hypertension"), ("contradicted", "migraine")]),
        ("Lisinopril is approved for hypertension, heart failure and migraine.",
         [("supported", "approved for hypertension"), ("supported", "heart failure"), ("contradicted", "migraine")]),
        ("Sertraline is approved for major depressive disorder (in adults), and also for panic disorder.",
         [("supported", "approved for major depressive disorder"), ("supported", "also for panic disorder")]),
        ("Metformin is approved for type 2 diabetes (in adults and children 10 and older), and for hypertension.",
         [("supported", "approved for type 2 diabetes"), ("contradicted", "for hypertension")]),
    ],
)
def test_each_listed_indication_is_its_own_claim(text: str, expected: list[tuple[str, str]]) -> None:
    assert claims_of(text, "medical", "indication") == expected


@pytest.mark.parametrize("text", [
    "Furosemide is approved for edema from heart failure or cirrhosis.",
    "Furosemide treats edema associated with heart failure, cirrhosis and kidney disease.",
    "Furosemide is used for edema due to cirrhosis and heart failure.",
])
def test_conditions_joined_to_a_cause_stay_modifiers(text: str) -> None:
    assert [v for v, _ in claims_of(text, "medical", "indication")] == ["supported"]


# -- "only": an exclusive indication or contraindication is contradicted by any other the label lists -------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Lisinopril is approved only for hypertension.", "contradicted"),      # heart failure, MI too
        ("Warfarin is contraindicated only in pregnancy.", "contradicted"),     # bleeding tendencies too
        ("Lisinopril is approved for hypertension.", "supported"),
        ("Warfarin is contraindicated in pregnancy.", "supported"),
        ("Sumatriptan is approved only for migraine.", "supported"),
    ],
)
def test_exclusive_relations(text: str, verdict: str) -> None:
    assert [v for v, _ in claims_of(text, "medical", "indication") + claims_of(text, "medical", "contraindication")] \
        == [verdict]


def test_only_elsewhere_in_the_clause_is_no_exclusivity() -> None:
    text = "Metformin is taken only once daily and is approved for type 2 diabetes."
    assert claims_of(text, "medical", "indication") == [("supported", "approved for type 2 diabetes")]


def test_only_allows_every_condition_its_sentence_names() -> None:
    text = "Lisinopril is only approved for hypertension and, after a heart attack, for heart failure."
    assert "contradicted" not in [v for v, _ in claims_of(text, "medical", "indication")]
