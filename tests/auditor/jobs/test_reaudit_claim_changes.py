"""What a re-audit summary counts as a verdict change: claims judged on both sides whose verdict moved, and a
claim judged on one side only when it is contradicted there (a newly found error, or one no longer found)."""

from __future__ import annotations

from auditor.jobs.reaudit_summary import claim_verdict_changes


def _claim(text: str, verdict: str, kind: str = "statement") -> dict:
    return {"text": text, "verdict": verdict, "kind": kind, "evidence": [{"description": verdict}]}


def test_a_newly_contradicted_claim_is_a_change() -> None:
    # An imported answer judged with nothing to check, then re-audited under a KG version that lists the party.
    before = [_claim("Japan uses the yen.", "supported")]
    after = [_claim("Japan uses the yen.", "supported"), _claim("Halvard LLC is not sanctioned.", "contradicted")]
    [change] = claim_verdict_changes(before, after)
    assert change["claim"] == "Halvard LLC is not sanctioned."
    assert change["before"] == {"verdict": None} and change["after"]["verdict"] == "contradicted"


def test_an_error_no_longer_found_is_a_change_and_new_support_is_not() -> None:
    before = [_claim("The CTR threshold is $5,000.", "contradicted")]
    after = [_claim("Gold is a metal.", "supported")]
    [change] = claim_verdict_changes(before, after)
    assert change["claim"] == "The CTR threshold is $5,000."
    assert change["before"]["verdict"] == "contradicted" and change["after"] == {"verdict": None}


def test_claims_judged_on_both_sides_compare_by_text_and_kind() -> None:
    before = [_claim("Rates rose in 2022.", "supported"), _claim("Oil is traded.", "unverifiable")]
    after = [_claim("rates  rose in 2022.", "contradicted"), _claim("Oil is traded.", "unverifiable")]
    [change] = claim_verdict_changes(before, after)
    assert (change["before"]["verdict"], change["after"]["verdict"]) == ("supported", "contradicted")
    assert claim_verdict_changes(None, None) == [] and claim_verdict_changes([], [_claim("X.", "supported")]) == []
