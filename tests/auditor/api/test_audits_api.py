"""The compliance API on SQLite and PostgreSQL: filters, cursor pagination, JSONL/CSV export, verify,
and read logging."""

from __future__ import annotations

import csv
import io
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from auditor.trail.models import AccessLogEntry
from tests.auditor.conftest import FakeEngine, ScriptedVerifier


@pytest.fixture
def app_database_url(database_url: str) -> str:
    return database_url


@pytest.fixture(autouse=True)
def _inline_verdicts_stay_current(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live scoring would replace the gate's inline verdicts with an evaluation's, at a moment the test does
    not control; these tests are about the gate's verdicts, so scoring records a failure instead."""
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:Unscored")


def _chat(client: TestClient, content: str, **headers: str) -> str:
    response = client.post("/v1/chat/completions", headers=headers,
                           json={"model": "auditor-medical", "messages": [{"role": "user", "content": content}]})
    assert response.status_code == 200, response.text
    return response.json()["audit_id"]


def _populated(app_factory) -> tuple[TestClient, list[str]]:
    engine = FakeEngine(reply="Aspirin is safe. Warfarin doubles the dose für Patienten.")
    client = app_factory(engine=engine, verifier=ScriptedVerifier(
        {"Warfarin": ("contradicted", "annotate"), "Aspirin": ("supported", None)}))
    ids = [_chat(client, f"question {i}", **({"X-Intent": "medical-diagnosis"} if i % 2 else {})) for i in range(5)]
    return client, ids


def test_filters_and_cursor_pagination(app_factory) -> None:
    client, ids = _populated(app_factory)
    page = client.get("/v1/audits", params={"limit": 2}).json()
    assert [r["id"] for r in page["data"]] == ids[::-1][:2]   # newest first
    seen = [r["id"] for r in page["data"]]
    while page["next_cursor"]:
        page = client.get("/v1/audits", params={"limit": 2, "cursor": page["next_cursor"]}).json()
        seen += [r["id"] for r in page["data"]]
    assert seen == ids[::-1]

    def count(**params: object) -> int:
        response = client.get("/v1/audits", params=params)
        assert response.status_code == 200, response.text
        return len(response.json()["data"])

    assert count(intent="medical-diagnosis") == 2
    assert count(domain="medical", has_contradicted=True) == 5
    assert count(has_contradicted=False) == 0
    assert count(fer_min=0.4, fer_max=0.6) == 5 and count(fer_min=0.9) == 0
    assert count(rule_id="test.Warfarin") == 5 and count(rule_id="test.Warf") == 0
    assert count(rule_id="policy.medical.disclaimer") == 2
    assert count(q="warfarin doubles") == 5 and count(q="insulin") == 0
    assert count(q="für patienten") == 5   # non-ASCII text search
    assert count(gate_action="annotate") == 5 and count(model="fake-model") == 5
    assert count(since="2000-01-01T00:00:00Z", until="2000-01-02T00:00:00Z") == 0


def test_bad_filters_are_400(client: TestClient) -> None:
    for params in ({"cursor": "garbage!"}, {"fer_min": 2}, {"limit": 0}, {"gate_action": "explode"}, {"nope": 1}):
        response = client.get("/v1/audits", params=params)
        assert response.status_code == 400, (params, response.text)
        assert response.json()["error"]["type"] == "invalid_request_error"


def test_show_includes_evidence_and_evaluations(app_factory) -> None:
    client, ids = _populated(app_factory)
    database = client.app.state.services.database
    with database.engine.begin() as conn:
        conn.execute(text("INSERT INTO evaluations (id, record_id, evaluator_version, status, fer, created_at) "
                          "VALUES ('e1', :r, 'rules-2', 'done', 0.25, CURRENT_TIMESTAMP)"), {"r": ids[0]})
    record = client.get(f"/v1/audits/{ids[0]}").json()
    assert record["claims"][1]["evidence"][0]["fact"] == "Warfarin fact"
    # Live scoring (the Unscored double) may have failed its own evaluation by now: only the inserted one counts.
    assert [(e["evaluator_version"], e["fer"]) for e in record["evaluations"]
            if e["evaluator_version"] != "unscored/1"] == [("rules-2", 0.25)]
    assert client.get("/v1/audits/not-a-record").status_code == 404


def test_export_jsonl_and_csv(app_factory) -> None:
    client, ids = _populated(app_factory)
    lines = client.get("/v1/audits/export", params={"format": "jsonl", "limit": 2}).text.splitlines()
    assert [json.loads(line)["id"] for line in lines] == ids[::-1]
    rows = list(csv.DictReader(io.StringIO(client.get("/v1/audits/export", params={"format": "csv"}).text)))
    assert [r["id"] for r in rows] == ids[::-1]
    assert json.loads(rows[0]["claims"])[1]["verdict"] == "contradicted"


def test_every_read_is_logged(app_factory) -> None:
    client, ids = _populated(app_factory)
    client.get("/v1/audits", params={"intent": "medical-diagnosis"})
    client.get(f"/v1/audits/{ids[0]}")
    client.get("/v1/audits/missing-id")
    client.get("/v1/audits/export")
    client.get("/v1/audits/verify")
    with client.app.state.services.database.engine.connect() as conn:
        rows = conn.execute(select(AccessLogEntry.__table__).order_by(AccessLogEntry.id)).all()
    assert [r.action for r in rows] == ["list", "show", "show", "export", "export", "verify"]
    assert rows[0].filters["intent"] == "medical-diagnosis" and rows[0].result_count == 2
    assert sorted(rows[0].record_ids) == sorted([ids[1], ids[3]])          # the ids a list showed
    assert rows[1].target == ids[0] and rows[1].record_ids == [ids[0]] and rows[2].result_count == 0
    assert rows[3].record_ids is None and sorted(rows[4].record_ids) == sorted(ids)   # export: opening, then pages


def test_verify_endpoint_names_tampering(app_factory) -> None:
    client, ids = _populated(app_factory)
    report = client.get("/v1/audits/verify").json()
    assert {k: report[k] for k in ("ok", "records_checked", "last_seq", "problem")} == {
        "ok": True, "records_checked": 5, "last_seq": 5, "problem": None}
    assert report["ledgers"]["records"]["checkpoints_checked"] == 1
    with client.app.state.services.database.engine.begin() as conn:
        conn.execute(text("UPDATE audit_records SET delivered_output = 'edited' WHERE id = :i"), {"i": ids[2]})
    report = client.get("/v1/audits/verify").json()
    assert report["ok"] is False
    assert report["problem"]["record_id"] == ids[2] and report["problem"]["kind"] == "altered"
