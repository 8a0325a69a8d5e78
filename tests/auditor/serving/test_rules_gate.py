"""The output gate on the real rule packs (`rules.verify`) with a tiny hand-built KG: a contradicted dose
is blocked before it is released, a supported indication passes, and both are kept as claims with evidence."""

from __future__ import annotations

from auditor.gate.gate import OutputGate
from auditor.serving.runtime import RulesVerifier
from tests.auditor.real_engine import tiny_medical_kg


def test_contradicted_dose_is_blocked_with_evidence() -> None:
    verifier = RulesVerifier({"medical": tiny_medical_kg()})
    gate = OutputGate(verifier, domain="medical", prompt="How much metformin?")
    text = "Metformin is indicated for type 2 diabetes. The usual dose is metformin 9000 mg daily. Ask your doctor."
    released = gate.feed(text) + gate.finish()
    assert "9000" not in released
    assert released.startswith("Metformin is indicated for type 2 diabetes.") and "Ask your doctor." in released
    blocked = [d for d in gate.decisions if d.action == "block"]
    assert [d.rule_id for d in blocked] == ["med.dose.max_daily"]
    verdicts = {c["kind"]: c["verdict"] for c in gate.claims}
    assert verdicts["indication"] == "supported" and verdicts["dose"] == "contradicted"
    dose = next(c for c in gate.claims if c["kind"] == "dose")
    assert dose["evidence"][0]["rule_id"] == "med.dose.max_daily" and dose["versions"]["rule_pack"]
    assert gate.fer() == 0.5
    assert verifier.rule_pack_hash("medical") == dose["versions"]["rule_pack"]


def test_no_domain_means_no_validation() -> None:
    verifier = RulesVerifier({"medical": tiny_medical_kg()})
    assert verifier.verify("Metformin 9000 mg daily.", domain=None, prompt=None).claims == []
