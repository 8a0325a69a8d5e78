"""Invariants over arbitrary text: verify never crashes, spans point at the claim text, scores stay in range."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rules import verify
from tests.rules.kgs import finance_kg, legal_kg, medical_kg

KGS = {"finance": finance_kg(), "medical": medical_kg(), "legal": legal_kg()}
# Fragments that trigger every validator, mixed with noise, so the search reaches the interesting paths.
FRAGMENTS = [
    "Brown v. Board of Education, 347 U.S. 483 (1954)", "12 Foo.Rep. 44", "(9th Cir. 2019)", "42 U.S.C. § 1983",
    "ISIN US0378331005", "IBAN DE89 3704 0044 0532 0130 00", "BIC DEUTDEFF", "$10,000", "CTR threshold",
    "Iran is on the FATF black list", "not", "June 2025", "metformin 500 mg twice daily", "maximum daily dose",
    "warfarin and aspirin together", "ICD-10-CM code E11.9", "type 2 diabetes", "Zyntravex 20 mg", ". ", ", ", "; ",
]
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), min_size=1, max_size=12).map(" ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts, domain=st.sampled_from(sorted(KGS)))
def test_verify_invariants(text: str, domain: str) -> None:
    if not text.strip():
        return
    report = verify(text, domain, kg=KGS[domain])
    for claim in report.claims:
        start, end = claim.span
        assert 0 <= start < end <= len(text)
        assert text[start:end] == claim.text
        assert claim.evidence, "every verdict carries evidence"
    for score in (report.fer, report.citation_confidence, report.joint_score):
        assert score is None or 0.0 <= score <= 1.0
    for citation in report.citations:
        assert report.claims[citation.claim_index].span == citation.span
