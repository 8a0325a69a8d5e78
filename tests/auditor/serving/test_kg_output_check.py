"""Each output is checked against the prompt's allowed KG neighbourhood, and the check is recorded (what
`auditor loadgen` reads as the entity-violation rate); `AUDITOR_KG_CONSTRAINT=false` links and checks but does
not constrain decoding."""

from __future__ import annotations

from auditor.serving import runtime
from tests.auditor.conftest import FakeEngine
from tests.auditor.real_engine import tiny_medical_kg

QUESTION = {"model": "auditor-medical", "messages": [{"role": "user", "content": "Is Metformin used for T2DM?"}]}


def _knowledge() -> runtime.KgKnowledge:
    return runtime.KgKnowledge({"medical": tiny_medical_kg()})


def test_violations_are_mentions_outside_the_allowed_set() -> None:
    knowledge = _knowledge()
    kg = knowledge.constraint_for("medical", "Is Metformin used for T2DM?")
    assert kg is not None and "drug:DB00331" in kg.allowed_entity_ids and "drug:DB00682" not in kg.allowed_entity_ids
    check = knowledge.violations
    assert check("medical", "Take Coumadin instead; warfarin is cheaper.", kg.allowed_entity_ids) == ["drug:DB00682"]
    assert check("medical", "Glucophage (metformin) treats type 2 diabetes.", kg.allowed_entity_ids) == []
    assert check("medical", "Nothing to see here.", kg.allowed_entity_ids) == []
    assert check("finance", "Warfarin", kg.allowed_entity_ids) == []   # no such KG here


def _record(app_factory, reply: str, **overrides):
    engine = FakeEngine(reply=reply)
    client = app_factory(engine=engine, knowledge=_knowledge(), overrides=overrides)
    response = client.post("/v1/chat/completions", json=QUESTION)
    assert response.status_code == 200, response.text
    return client.get(f"/v1/audits/{response.json()['audit_id']}").json(), engine


def test_the_output_check_is_recorded(app_factory) -> None:
    record, engine = _record(app_factory, "Metformin is first line. Warfarin would also do.")
    linking, check = record["kg_events"][0], record["kg_events"][-1]
    assert linking["kind"] == "constrained" and "kg_constraint" in engine.calls[0]["params"].extra_args
    assert check["kind"] == "output_check" and check["data"] == {"violations": 1, "entity_ids": ["drug:DB00682"]}
    clean, _ = _record(app_factory, "Metformin is first line for type 2 diabetes.")
    assert clean["kg_events"][-1]["data"] == {"violations": 0, "entity_ids": []}


def test_without_anchors_there_is_nothing_to_check(app_factory) -> None:
    client = app_factory(engine=FakeEngine(reply="Warfarin."), knowledge=_knowledge())
    response = client.post("/v1/chat/completions", json={"model": "auditor-medical", "messages": [
        {"role": "user", "content": "How are you today?"}]})
    record = client.get(f"/v1/audits/{response.json()['audit_id']}").json()
    assert [e["kind"] for e in record["kg_events"]] == ["no_anchors"]


def test_constraint_off_links_and_checks_but_does_not_constrain(app_factory) -> None:
    record, engine = _record(app_factory, "Warfarin would do.", kg_constraint=False)
    assert engine.calls[0]["params"].extra_args == {}
    assert "kg_constraint" not in record["sampling_params"]
    assert [e["kind"] for e in record["kg_events"]] == ["not_enforced", "output_check"]
    assert record["kg_events"][-1]["data"]["violations"] == 1
