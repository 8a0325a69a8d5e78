"""Holds and keys over HTTP: admins only (refusals logged), bad input in the OpenAI error shape, the key's
secret shown once."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from auditor.auth.keys import create_key
from auditor.trail.models import AccessLogEntry
from tests.auditor.scoring_doubles import append_output


@pytest.fixture
def admin(app_factory) -> tuple[TestClient, dict[str, str], dict[str, str]]:
    client = app_factory()
    database = client.app.state.services.database
    with database.session() as session:
        _, admin_key = create_key(session, tenant="ops", role="admin")
        _, auditor_key = create_key(session, tenant="acme", role="auditor")
    return client, {"Authorization": f"Bearer {admin_key}"}, {"Authorization": f"Bearer {auditor_key}"}


def test_keys_over_http(admin) -> None:
    client, as_admin, as_auditor = admin
    created = client.post("/v1/keys", json={"tenant": "acme", "role": "reviewer", "name": "rev"}, headers=as_admin)
    assert created.status_code == 201 and created.json()["key"].startswith("aud_")
    key_id = created.json()["id"]
    listed = client.get("/v1/keys", params={"tenant": "acme"}, headers=as_admin).json()["data"]
    assert key_id in {k["id"] for k in listed} and all("key" not in k for k in listed)   # the secret: once
    reviewer = {"Authorization": f"Bearer {created.json()['key']}"}
    assert client.get("/v1/reviews/queue", headers=reviewer).status_code == 200
    assert client.get("/v1/audits", headers=reviewer).status_code == 403          # a reviewer does not list the trail
    assert client.post(f"/v1/keys/{key_id}/revoke", headers=as_admin).json()["revoked_at"] is not None
    assert client.get("/v1/reviews/queue", headers=reviewer).status_code == 401
    assert client.post("/v1/keys/nope/revoke", headers=as_admin).status_code == 404
    bad = client.post("/v1/keys", json={"tenant": "acme", "role": "root"}, headers=as_admin)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "role"
    refused = client.post("/v1/keys", json={"tenant": "acme", "role": "admin"}, headers=as_auditor)
    assert refused.status_code == 403
    with client.app.state.services.database.engine.connect() as conn:
        denied = conn.execute(select(AccessLogEntry.target).where(AccessLogEntry.action == "denied")).scalars().all()
    assert "/v1/keys" in denied   # refused attempts on admin endpoints are on the record


@pytest.mark.parametrize("body", [
    {"matter_id": "M-1", "reason": "x", "scope": {"tenant": "acme", "records": ["a"]}},   # two scopes
    {"matter_id": "M-1", "reason": "x", "scope": {}},                                     # none
    {"matter_id": "has space", "reason": "x", "scope": {"tenant": "acme"}},
    {"matter_id": "M-1", "reason": "  ", "scope": {"tenant": "acme"}},
    {"matter_id": "M-1", "reason": "x", "scope": {"filter": {"colour": "red"}}},
])
def test_bad_holds_are_400(admin, body) -> None:
    client, as_admin, _ = admin
    response = client.post("/v1/holds", json=body, headers=as_admin)
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error", response.text


def test_a_filter_hold_keeps_later_matching_records_too(admin) -> None:
    from auditor.trail.retention import purge_expired
    from tests.auditor.conftest import make_settings

    client, as_admin, _ = admin
    database = client.app.state.services.database
    early = append_output(database, "Medical one.", domain="medical")
    hold = client.post("/v1/holds", json={"matter_id": "RECALL-7", "reason": "recall review",
                                          "scope": {"filter": {"domain": "medical"}}}, headers=as_admin).json()
    later = append_output(database, "Medical two.", domain="medical")
    other = append_output(database, "Finance.", domain="finance")
    result = purge_expired(database, make_settings(database.url, default_retention_days=0), dry_run=True)
    assert set(result.held_ids) == {early, later} and result.purged_ids == [other]
    assert result.holds[later] == [hold["id"]]
