"""Findings 8, 10 and 11: PII in the stored copy and in the output; refused and listed reads in the access
log; what a tenant's auditor sees of a verification."""

from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import text

from tests.security.conftest import CHAT, chat

PII_VARIANTS = {
    "my social security number is 123456789": "123456789",
    "SSN 123 45 6789 on file": "123 45 6789",
    "pay to iban de89 3704 0044 0532 0130 00 please": "de89 3704 0044 0532 0130 00",
    "account DE89370400440532013000": "DE89370400440532013000",
}


@pytest.mark.parametrize("prompt", list(PII_VARIANTS))
def test_finding_8_pii_variants_are_not_stored_in_clear(app_on, sql, store_url: str, prompt: str) -> None:
    client = app_on(store_url)
    body = {**CHAT, "messages": [{"role": "user", "content": prompt}]}
    assert client.post("/v1/chat/completions", json=body).status_code == 200
    with sql(store_url).connect() as conn:
        stored = conn.execute(text("SELECT prompt FROM audit_records")).scalar()
    assert PII_VARIANTS[prompt] not in stored and "[" in stored


def test_finding_8_stop_list_and_request_id_are_redacted_in_the_stored_copy(app_on, sql, store_url: str) -> None:
    client = app_on(store_url)
    body = {**CHAT, "stop": ["reach me at jane.doe@example.com"]}
    headers = {"X-Request-Id": "ticket-for-jane.doe@example.com"}
    assert client.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
    with sql(store_url).connect() as conn:
        row = conn.execute(text("SELECT request_id, sampling_params FROM audit_records")).one()
    assert "jane.doe" not in str(row.request_id) and "jane.doe" not in str(row.sampling_params)
    assert "[EMAIL]" in row.request_id


def test_finding_8_pii_in_model_output_does_not_reach_the_client(app_on, store_url: str) -> None:
    client = app_on(store_url, reply="Call the patient at 415-555-2671 or write to jane.doe@example.com. Done.")
    response = client.post("/v1/chat/completions", json=CHAT)
    content = response.json()["choices"][0]["message"]["content"]
    assert "jane.doe@example.com" not in content and "415-555-2671" not in content
    assert "[EMAIL]" in content and "[PHONE]" in content
    streamed = client.post("/v1/chat/completions", json={**CHAT, "stream": True}).text
    assert "jane.doe@example.com" not in streamed and "[EMAIL]" in streamed


def test_finding_8_the_output_pii_rule_is_configurable_per_domain(app_on, store_url: str) -> None:
    client = app_on(store_url, reply="Write to jane.doe@example.com.", output_pii_action={"finance": "block"},
                    default_output_pii_action="annotate")
    medical = client.post("/v1/chat/completions", json=CHAT, headers={"X-Domain": "medical"}).json()
    assert "jane.doe@example.com" in medical["choices"][0]["message"]["content"]
    assert any("PII" in note for note in medical["audit"]["annotations"])
    finance = client.post("/v1/chat/completions", json=CHAT, headers={"X-Domain": "finance"}).json()
    assert "jane.doe" not in finance["choices"][0]["message"]["content"]
    assert finance["audit"]["gate_action"] == "block"


def _key(cli, url: str, role: str, tenant: str) -> str:
    status, out, err = cli(url, "keys", "create", "--tenant", tenant, "--role", role)
    assert status == 0, err
    return re.search(r"key: (aud_\S+)", out).group(1)


def _access_log(sql, url: str) -> list:
    with sql(url).connect() as conn:
        return conn.execute(text("SELECT action, tenant, role, target, record_ids FROM access_log ORDER BY seq")).all()


def test_finding_10_refused_reads_are_logged(app_on, cli, sql, store_url: str) -> None:
    client_key = _key(cli, store_url, "client", "acme")
    auditor_key = _key(cli, store_url, "auditor", "acme")
    client = app_on(store_url)
    assert client.get("/v1/audits", headers={"Authorization": f"Bearer {client_key}"}).status_code == 403
    assert client.get("/v1/audits", params={"tenant": "other"},
                      headers={"Authorization": f"Bearer {auditor_key}"}).status_code == 403
    denied = [row for row in _access_log(sql, store_url) if row.action == "denied"]
    assert [(row.role, row.tenant) for row in denied] == [("client", "acme"), ("auditor", "acme")]
    assert "tenant=other" in denied[1].target


def test_finding_10_a_list_read_logs_which_records_it_showed(app_on, sql, store_url: str) -> None:
    client = app_on(store_url)
    ids = chat(client, 3)
    page = client.get("/v1/audits", params={"limit": 2}).json()
    listed = [row for row in _access_log(sql, store_url) if row.action == "list"]
    shown = listed[-1].record_ids if isinstance(listed[-1].record_ids, list) else json.loads(listed[-1].record_ids)
    assert shown == [record["id"] for record in page["data"]] and set(shown) <= set(ids)


def test_finding_11_a_tenants_auditor_sees_no_other_tenants_ids_or_counts(app_on, cli, sql, store_url: str) -> None:
    keys = {"a": _key(cli, store_url, "client", "bank-a"), "b": _key(cli, store_url, "client", "bank-b"),
            "a_auditor": _key(cli, store_url, "auditor", "bank-a")}
    client = app_on(store_url)
    chat(client, 2, Authorization=f"Bearer {keys['a']}")
    b_ids = chat(client, 2, Authorization=f"Bearer {keys['b']}")
    with sql(store_url).begin() as conn:
        conn.execute(text("UPDATE audit_records SET fer = 0.42 WHERE id = :id"), {"id": b_ids[0]})
    report = client.get("/v1/audits/verify", headers={"Authorization": f"Bearer {keys['a_auditor']}"}).json()
    assert report["ok"] is False
    assert report["records_checked"] is None and report["last_seq"] is None
    assert b_ids[0] not in str(report) and report["problem"]["record_id"] is None
