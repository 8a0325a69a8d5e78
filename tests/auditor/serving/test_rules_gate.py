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


def test_registry_warm_up_builds_the_icd10_index() -> None:
    # the index takes seconds to build: the server builds it after ready on a background thread, so that no
    # request finds it cold unless it comes in the first seconds (and then it waits for the same build)
    from rules.validators.medical import icd10

    icd10._build_index.cache_clear()
    verifier = RulesVerifier({"medical": tiny_medical_kg()})
    verifier.warm_up()
    assert icd10._build_index.cache_info().currsize == 0   # the quick warm-up on the ready path leaves it
    verifier.warm_registries()
    assert icd10._build_index.cache_info().currsize == 1


def test_icd10_index_is_built_once_when_threads_ask_together() -> None:
    import threading

    from rules.validators.medical import icd10

    icd10._build_index.cache_clear()
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(icd10._index())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert icd10._build_index.cache_info().misses == 1
    assert all(result is results[0] for result in results)


def test_expansion_prefilter_reads_descriptions_as_the_full_pass_does() -> None:
    # abbreviations still expand when present; text without any reads the same as before the prefilter
    from rules.validators.medical.icd10 import content_words

    assert content_words("T2DM with HTN") == content_words("type 2 diabetes mellitus with hypertension")
    assert content_words("Essential (primary) hypertension") == frozenset({"essential", "primary", "hypertension"})


def test_a_bare_opening_answer_is_withheld_with_the_blocked_sentence_it_answers_for() -> None:
    # "Yes." means whatever the next sentence says: released before a contradicted dose is blocked, it would
    # tell the user "yes" to the wrong dose. It is judged with that sentence, and streamed deltas change nothing.
    for opening in ("Yes. ", "Yes, that's correct. ", "Absolutely! "):
        verifier = RulesVerifier({"medical": tiny_medical_kg()})
        gate = OutputGate(verifier, domain="medical", prompt="Can I take metformin 9000 mg daily?")
        text = opening + "You can take metformin 9000 mg daily. Ask your doctor."
        released = "".join(gate.feed(ch) for ch in text) + gate.finish()
        assert released == "Ask your doctor.", (opening, released)
        assert "gate.bare_answer" in [d.rule_id for d in gate.decisions if d.action == "block"]


def test_a_bare_opening_answer_leaves_with_a_sentence_that_passes_and_alone_when_nothing_follows() -> None:
    verifier = RulesVerifier({"medical": tiny_medical_kg()})
    gate = OutputGate(verifier, domain="medical", prompt="Is metformin used for type 2 diabetes?")
    first = gate.feed("No. ")
    assert first == ""                                         # held until the sentence it answers for
    released = first + gate.feed("Metformin is indicated for type 2 diabetes. ") + gate.finish()
    assert released == "No. Metformin is indicated for type 2 diabetes. "
    alone = OutputGate(verifier, domain="medical", prompt="Is it safe?")
    assert alone.feed("Yes.") + alone.finish() == "Yes." and alone.delivered == "Yes."
    # only an opening is held: a short verdict later in the answer is judged on its own, as before
    later = OutputGate(verifier, domain="medical", prompt="?")
    assert later.feed("Metformin is indicated for type 2 diabetes. Correct. ") + later.finish() == (
        "Metformin is indicated for type 2 diabetes. Correct. ")


class _ActivePacks:
    """A pack source as the store's would be after an activation: given packs, else the bundled ones."""

    def __init__(self, **packs) -> None:
        self.packs = packs

    def pack_for(self, domain: str):
        return self.packs.get(domain)


def test_a_claim_in_another_domain_is_judged_under_that_domains_active_pack_and_served_kg(tmp_path) -> None:
    """A legal answer that states a drug dose: the dose is judged by the medical checkers, under the medical pack
    the store has activated (here it annotates instead of blocking) and the medical KG the service serves, and
    the claim names both versions."""
    from pathlib import Path

    import rules
    from knowledge_graphs import load_kg
    from rules import load_pack

    bundled = (Path(rules.__file__).parent / "packs" / "medical.yaml").read_text()
    edited = bundled.replace("    severity: critical\n    on_fail: block\n", "    severity: high\n    on_fail: annotate\n", 1)
    assert edited != bundled
    (tmp_path / "medical.yaml").write_text(edited)
    active_medical = load_pack(tmp_path / "medical.yaml")
    served_medical = tiny_medical_kg()
    verifier = RulesVerifier({"legal": load_kg("legal"), "medical": served_medical},
                             packs=_ActivePacks(medical=active_medical))
    text = "Under the settlement the clinic agreed that patients would take metformin 9000 mg daily."
    result = verifier.verify(text, domain="legal", prompt=None)
    dose = next(c for c in result.claims if c["kind"] == "dose")
    assert dose["domain"] == "medical" and dose["verdict"] == "contradicted"
    assert dose["versions"]["rule_pack"] == active_medical.hash != load_pack("medical").hash
    assert dose["versions"]["kg"] == served_medical.version
    [decision] = [d for d in result.decisions if d.rule_id == "med.dose.max_daily"]
    assert decision.action == "annotate"   # the active pack's action, not the bundled pack's block
