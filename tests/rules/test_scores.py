"""FER, citation confidence and joint score maths, and the report's gate actions."""

import pytest

from rules import verify
from rules.report import Citation, Claim
from rules.scores import citation_confidence, factual_error_rate, joint_score
from tests.rules.kgs import legal_kg


def claim(verdict: str) -> Claim:
    return Claim(text="x", span=(0, 1), kind="k", verdict=verdict, confidence=0.9)


def citation(resolution: str, supports: bool | None) -> Citation:
    return Citation(text="x", span=(0, 1), kind="case", resolution=resolution, supports_claim=supports, claim_index=0)


@pytest.mark.parametrize(
    ("verdicts", "fer"),
    [
        ([], None),
        (["unverifiable", "unverifiable"], None),         # nothing verified: no rate, not 0
        (["supported", "supported", "contradicted", "unverifiable"], 1 / 3),
        (["contradicted"], 1.0),
        (["supported"], 0.0),
    ],
)
def test_fer(verdicts: list[str], fer: float | None) -> None:
    assert factual_error_rate([claim(v) for v in verdicts]) == (pytest.approx(fer) if fer is not None else None)


def test_citation_confidence() -> None:
    assert citation_confidence([]) is None
    cites = [citation("resolved", True), citation("unconfirmed", None), citation("invalid", None),
             citation("resolved", False)]
    assert citation_confidence(cites) == pytest.approx((1.0 + 0.5 + 0.0 + 0.0) / 4)


@pytest.mark.parametrize(("fer", "rc", "joint"), [(0.25, 0.8, 0.6), (None, 0.8, None), (0.5, None, None), (0.0, 1.0, 1.0)])
def test_joint(fer, rc, joint) -> None:
    got = joint_score(fer, rc)
    assert got == (pytest.approx(joint) if joint is not None else None)


def test_report_scores_and_gate() -> None:
    text = ("Brown v. Board of Education, 347 U.S. 483 (1954), and Miranda v. Arizona, 384 U.S. 436 (1967), "
            "are landmarks; see also 42 U.S.C. § 9999.")
    report = verify(text, "legal", kg=legal_kg())
    # each citation and the year in its parenthetical are two claims: Miranda's citation is right, its year wrong
    assert [(c.kind, c.verdict) for c in report.claims] == [
        ("case_citation", "supported"), ("case_year", "supported"), ("case_citation", "supported"),
        ("case_year", "contradicted"), ("statute", "unverifiable")]
    assert report.fer == pytest.approx(0.25)
    # Brown resolves and agrees (1), Miranda resolves but the year disagrees (0), the statute is unconfirmed (0.5)
    assert report.citation_confidence == pytest.approx(0.5)
    assert report.joint_score == pytest.approx(0.375)
    action = report.strongest_action()
    assert action is not None and action.on_fail == "block" and action.rule_id == "legal.citation.case"
    assert report.claims[action.claim_index].verdict == "contradicted"
    assert report.versions.kg == legal_kg().version and len(report.versions.rule_pack) == 64
    assert report.versions.packages["eyecite"] != "unknown"


def test_clean_text_has_no_gate_action() -> None:
    report = verify("Brown v. Board of Education, 347 U.S. 483 (1954).", "legal", kg=legal_kg())
    assert report.strongest_action() is None and report.fer == 0.0
