"""Requests without a domain, through the HTTP API with the real rule packs, KGs and domain detector: a wrong
dose is still contradicted and gated; the record says the domain was detected, with its scores; the tenant's
mode (detect / require / off) decides; off-domain chat is neither verified nor a failed evaluation."""

from __future__ import annotations

import functools
import json

import pytest
from fastapi.testclient import TestClient

from auditor.serving.runtime import RulesVerifier, load_detector
from auditor.tenants.service import set_detection_mode
from knowledge_graphs import load_kg
from knowledge_graphs.minilm import load_encoder
from tests.auditor.conftest import FakeEngine
from tests.auditor.sse import delivered, events

WRONG_DOSE = "Metformin: take up to 5000 mg per day."


@pytest.fixture(scope="module")
def kgs() -> dict:
    return {d: load_kg(d) for d in ("medical", "finance", "legal")}


@pytest.fixture(scope="module")
def verifier(kgs) -> RulesVerifier:
    return RulesVerifier(kgs)


@pytest.fixture(scope="module")
def detector(kgs):
    return load_detector(kgs, threshold=0.6, embedding_cache=1024)


@pytest.fixture
def serve(app_factory, verifier, detector):
    def build(reply: str) -> TestClient:
        return app_factory(engine=FakeEngine(reply=reply), verifier=verifier, detector=detector,
                           overrides={"domain_detection": "detect"})
    return build


def _chat(client: TestClient, prompt: str, *, headers: dict[str, str] | None = None):
    return client.post("/v1/chat/completions", headers=headers or {},
                       json={"model": "auditor", "messages": [{"role": "user", "content": prompt}]})


def _record(client: TestClient, audit_id: str) -> dict:
    """The record with its evaluation: scored here, so the test need not wait for the embedded worker (when the
    worker got there first, scoring finds its evaluation and writes none)."""
    from auditor.jobs import scoring

    scoring.score_record(client.app.state.services.database, _evaluator(), scoring.ScoreRequest(audit_id))
    response = client.get(f"/v1/audits/{audit_id}")
    assert response.status_code == 200, response.text
    return response.json()


@functools.cache
def _evaluator():
    from auditor.jobs.scoring import RulesEvaluator

    return RulesEvaluator()


def _set_mode(client: TestClient, tenant: str, mode: str | None) -> None:
    with client.app.state.services.database.session(write=True) as session:
        set_detection_mode(session, tenant, mode, by="test")


def test_wrong_dose_without_x_domain_is_contradicted_and_blocked(serve) -> None:
    client = serve(f"Here is the usual guidance. {WRONG_DOSE} Ask your pharmacist about side effects.")
    response = _chat(client, "How much metformin can I take in a day?")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["audit"]["gate_action"] == "block"
    assert "5000" not in body["choices"][0]["message"]["content"]
    assert body["audit"]["domain"]["name"] == "medical" and body["audit"]["domain"]["source"] == "detected"
    assert body["audit"]["domain"]["scores"]["medical"] >= 0.6
    record = _record(client, body["audit_id"])
    assert record["domain"] == "medical"
    resolution = record["details"]["domain_resolution"]
    assert resolution["source"] == "detected" and resolution["mode"] == "detect"
    assert resolution["verified_under"] == ["medical"]
    assert resolution["detection"]["scores"]["medical"] >= resolution["detection"]["threshold"]
    # which precision the sentence vectors had (bf16 only where the CPU computes it natively)
    assert resolution["detection"]["embedding_dtype"] == load_encoder().dtype
    dose = next(c for c in record["claims"] if c["verdict"] == "contradicted")
    assert dose["domain"] == "medical" and "5000" in dose["text"]
    assert any(d["action"] == "block" and d["stage"] == "output" for d in record["gate_decisions"])
    # the input gate applies the detected domain's policy when the client named no intent
    assert any(d["rule_id"] == "policy.medical.disclaimer" for d in record["gate_decisions"])
    # the background evaluation re-detects over the whole output and agrees
    [evaluation] = record["evaluations"]
    assert evaluation["status"] == "done"
    assert evaluation["details"]["domain_resolution"]["verified_under"] == ["medical"]
    assert any(c["verdict"] == "contradicted" for c in evaluation["claims"])


def test_streamed_wrong_dose_is_never_released(serve) -> None:
    client = serve(f"Sure. {WRONG_DOSE} Hope that helps.")
    body = {"model": "auditor", "stream": True, "messages": [{"role": "user", "content": "metformin dosing?"}]}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = events("".join(response.iter_text()))
    assert response.status_code == 200 and lines[-1] == "[DONE]"
    # the delivered text, not the raw stream: a random audit id may itself contain "5000"
    text = delivered(lines)
    assert "5000" not in text and "Hope that helps." in text


def test_an_off_domain_prompt_does_not_hide_a_medical_answer(serve) -> None:
    """Detection runs on each output sentence too: a harmless-looking prompt does not switch the gate off."""
    client = serve(f"Fun fact! {WRONG_DOSE}")
    body = _chat(client, "tell me something surprising").json()
    assert body["audit"]["gate_action"] == "block" and "5000" not in body["choices"][0]["message"]["content"]
    assert body["audit"]["domain"]["source"] == "detected"


def test_off_domain_padding_does_not_hide_a_wrong_dose(serve) -> None:
    """An attacker surrounds the one checkable sentence with chat, in the prompt and in the answer."""
    client = serve("Chop the onions finely. Fry them until golden. Add the tomatoes and simmer for twenty minutes. "
                   f"{WRONG_DOSE} Serve with crusty bread.")
    body = _chat(client, "Give me a tomato soup recipe. Make it easy. I have onions, tomatoes and bread.").json()
    assert body["audit"]["gate_action"] == "block"
    assert "5000" not in body["choices"][0]["message"]["content"] and "crusty bread" in body["choices"][0]["message"]["content"]
    assert "medical" in body["audit"]["domain"]["verified_under"]


def test_off_domain_chat_is_not_verified_and_its_evaluation_is_not_applicable(serve) -> None:
    client = serve("Parboil the potatoes for eight minutes, then roast them in hot oil until golden.")
    body = _chat(client, "how do I make crispy roast potatoes?").json()
    assert body["audit"]["gate_action"] == "allow" and body["audit"]["domain"]["source"] == "none"
    record = _record(client, body["audit_id"])
    assert record["domain"] is None and record["details"]["domain_resolution"]["source"] == "none"
    [evaluation] = record["evaluations"]
    assert evaluation["status"] == "not_applicable" and "no domain" in evaluation["failure_reason"]
    assert client.get("/v1/audits/verify").json()["ok"] is True


def test_require_mode_refuses_a_request_without_a_domain(serve) -> None:
    client = serve(WRONG_DOSE)
    _set_mode(client, "default", "require")
    response = _chat(client, "How much metformin can I take?")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "domain_required" and error["type"] == "invalid_request_error"
    assert "X-Domain" in error["message"]
    blank = _chat(client, "How much metformin?", headers={"X-Domain": "   "})   # a blank header names nothing
    assert blank.status_code == 400
    named = _chat(client, "How much metformin can I take?", headers={"X-Domain": "medical"})
    assert named.status_code == 200 and named.json()["audit"]["domain"]["source"] == "given"


def test_off_mode_leaves_the_request_unverified_and_says_so(serve) -> None:
    client = serve(WRONG_DOSE)
    _set_mode(client, "default", "off")
    body = _chat(client, "How much metformin can I take?").json()
    assert body["audit"]["gate_action"] == "allow"
    record = _record(client, body["audit_id"])
    assert record["details"]["domain_resolution"] == {"source": "none", "mode": "off", "detection": None,
                                                      "verified_under": []}
    [evaluation] = record["evaluations"]
    assert evaluation["status"] == "not_applicable" and "off" in evaluation["failure_reason"]
    _set_mode(client, "default", None)   # back to the service default: detection
    assert _chat(client, "How much metformin can I take?").json()["audit"]["gate_action"] == "block"


def test_records_filter_by_domain_source(serve) -> None:
    client = serve(WRONG_DOSE)
    detected = _chat(client, "metformin max dose?").json()["audit_id"]
    given = _chat(client, "metformin max dose?", headers={"X-Domain": "medical"}).json()["audit_id"]

    def ids(source: str) -> list[str]:
        response = client.get("/v1/audits", params={"domain_source": source})
        assert response.status_code == 200, response.text
        return [r["id"] for r in response.json()["data"]]

    assert ids("detected") == [detected] and ids("given") == [given] and ids("none") == []
    assert client.get("/v1/audits", params={"domain_source": "guessed"}).status_code == 400


def test_stored_details_cannot_be_edited_unseen(serve) -> None:
    """The detection lives in the hash-chained details: rewriting "detected" as "given" breaks the chain."""
    from sqlalchemy import text

    client = serve(WRONG_DOSE)
    audit_id = _chat(client, "metformin max dose?").json()["audit_id"]
    database = client.app.state.services.database
    with database.engine.begin() as conn:
        details = json.loads(conn.execute(text("SELECT details FROM audit_records WHERE id = :id"),
                                          {"id": audit_id}).scalar())
        details["domain_resolution"]["source"] = "given"
        conn.execute(text("UPDATE audit_records SET details = :d WHERE id = :id"),
                     {"d": json.dumps(details), "id": audit_id})
    report = client.get("/v1/audits/verify").json()
    assert report["ok"] is False


def test_the_detector_loads_wordfreq_before_the_first_request(kgs, monkeypatch):
    """The warm-up texts name no KG entity, so without this the first prompt that did loaded wordfreq's list."""
    import subprocess
    import sys

    from knowledge_graphs.detection.evidence import KgEvidence

    warmed = []
    monkeypatch.setattr(KgEvidence, "warm_up", staticmethod(lambda: warmed.append(True)))
    load_detector(kgs, threshold=0.6, embedding_cache=16)
    assert warmed == [True]
    # and the warm-up itself fills wordfreq's list cache (in a fresh interpreter: this one may hold it already)
    probe = ("import wordfreq; from knowledge_graphs.detection.evidence import KgEvidence; "
             "assert wordfreq.get_frequency_dict.cache_info().currsize == 0; KgEvidence.warm_up(); "
             "print(wordfreq.get_frequency_dict.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert int(out.stdout) >= 1
