"""The /v1/reaudits API on the in-process pool (no broker): 422s in the OpenAI error shape, a job
run to its summary, cancel/resume/404/409."""

from __future__ import annotations

import time

import pytest

from auditor.api import reaudits
from auditor.trail.access_log import access_log_query
from auditor.trail.schemas import AccessLogFilters
from tests.auditor.scoring_doubles import append_output


@pytest.fixture
def api(app_factory, monkeypatch):
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:MarkerEvaluator")
    client = app_factory()
    client.app.include_router(reaudits.router)   # see the report: one line in create_app
    yield client


def _wait_done(client, job_id: str, timeout_s: float = 20.0, headers: dict[str, str] | None = None) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/v1/reaudits/{job_id}", headers=headers).json()
        if body["status"] != "running":
            return body
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still running: {body}")


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"filter": {"colour": "red"}}, "filter.colour", "unknown_field"),
    ({"filter": {"domain": "finance"}, "priority": "high"}, "priority", "unknown_field"),
    ({"filter": {"fer_min": 3}}, "filter.fer_min", "invalid_parameter"),
    ({}, "filter", "invalid_parameter"),
    ({"filter": {}, "import_id": "x"}, "filter", "invalid_parameter"),
])
def test_bad_reaudit_requests_get_422_in_the_openai_error_shape(api, body, param, code) -> None:
    response = api.post("/v1/reaudits", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    assert error["message"]


def test_job_runs_to_a_summary_and_its_evaluations_show_on_the_record(api) -> None:
    database = api.app.state.services.database
    flipped = append_output(database, "[false] Rates rose in 2022.",
                            claims=[{"text": "Rates rose in 2022.", "verdict": "supported"}], fer=0.0)
    append_output(database, "Gold is a metal.", fer=0.0)
    created = api.post("/v1/reaudits", json={"filter": {"domain": "finance"}, "chunk_size": 1})
    assert created.status_code == 202
    job = created.json()
    # Created without collecting ids: the records are frozen in the background, so the total grows from 0.
    assert job["object"] == "reaudit" and job["filter"] == {"domain": "finance"} and job["max_seq"] == 2
    done = _wait_done(api, job["id"])
    assert done["status"] == "done" and done["progress"]["total"] == 2 and done["planning"] is False
    assert {k: done["progress"][k] for k in ("done", "failed", "pending", "eta_s")} == \
        {"done": 2, "failed": 0, "pending": 0, "eta_s": None}
    assert done["summary"]["verdict_changes"]["total"] == 1
    assert done["summary"]["gate_action_changes"]["listed"] == [{"record_id": flipped, "before": "allow",
                                                                 "after": "block"}]
    record = api.get(f"/v1/audits/{flipped}").json()
    # The job's evaluation is there; live scoring of the same record (job_id None) may land at any time.
    assert [(e["job_id"], e["status"], e["fer"]) for e in record["evaluations"]
            if e["job_id"] is not None] == [(job["id"], "done", 1.0)]

    conflict = api.post(f"/v1/reaudits/{job['id']}/cancel")
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "reaudit_finished"
    with database.session() as session:   # creating and reading the summary are logged reads of the trail
        actions = [e.action for e in session.execute(access_log_query(AccessLogFilters(), tenant_scope=None)).scalars()]
    assert "reaudit_create" in actions and "reaudit_show" in actions
    missing = api.get("/v1/reaudits/no-such-job")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "reaudit_not_found"


def test_cancel_then_resume_over_http(api) -> None:
    database = api.app.state.services.database
    for i in range(3):
        append_output(database, f"Statement {i}.")
    # A queue that holds chunks until released, so the cancel lands before any work.
    held: list[tuple[str, int]] = []

    class HoldingQueue:
        def enqueue_score(self, outbox_id: int, record_id: str) -> None:
            raise AssertionError("not used")

        def enqueue_chunk(self, job_id: str, chunk: int) -> None:
            held.append((job_id, chunk))

    services = api.app.state.services
    real_queue, services.task_queue = services.task_queue, HoldingQueue()
    job = api.post("/v1/reaudits", json={"filter": {}}).json()
    cancelled = api.post(f"/v1/reaudits/{job['id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and cancelled["cancelled_at"] is not None
    services.task_queue = real_queue   # back to the real in-process pool
    resumed = api.post(f"/v1/reaudits/{job['id']}/resume")
    # The pool already holds a loaded evaluator, so the resumed job may finish before the response is built.
    assert resumed.status_code == 200 and resumed.json()["status"] in ("running", "done")
    assert resumed.json()["cancelled_at"] is None
    assert _wait_done(api, job["id"])["progress"]["done"] == 3


def test_jobs_are_scoped_to_the_callers_tenant_and_role(api) -> None:
    from auditor.auth.keys import create_key

    database = api.app.state.services.database
    with database.session() as session:
        _, acme = create_key(session, tenant="acme", role="auditor")
        _, other = create_key(session, tenant="other", role="auditor")
        _, client_key = create_key(session, tenant="acme", role="client")
    mine = append_output(database, "Acme statement.", tenant="acme")
    append_output(database, "Other statement.", tenant="other")

    def as_(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    created = api.post("/v1/reaudits", json={"filter": {}}, headers=as_(acme))
    assert created.status_code == 202
    job_id = created.json()["id"]
    assert api.get(f"/v1/reaudits/{job_id}", headers=as_(other)).status_code == 404
    assert api.post(f"/v1/reaudits/{job_id}/cancel", headers=as_(other)).status_code == 404
    forbidden = api.post("/v1/reaudits", json={"filter": {"tenant": "other"}}, headers=as_(acme))
    assert forbidden.status_code == 403 and forbidden.json()["error"]["param"] == "filter.tenant"
    assert api.post("/v1/reaudits", json={"filter": {}}, headers=as_(client_key)).status_code == 403
    finished = _wait_done(api, job_id, headers=as_(acme))["progress"]
    assert (finished["total"], finished["done"]) == (1, 1)   # only acme's record
    record = api.get(f"/v1/audits/{mine}", headers=as_(acme)).json()
    # the record's own scoring (job_id None) may or may not have run yet: the job's evaluation is there once
    assert [e["job_id"] for e in record["evaluations"] if e["job_id"] is not None] == [job_id]
