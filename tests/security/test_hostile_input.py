"""Findings 5, 6, 7 and 9: formulas in exports, re-audit summaries across tenants, invalid Unicode and NUL,
huge cursors. Each answer is a clear 4xx in the OpenAI error shape, never a 500, a 503 or an empty 200."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import time

import pytest

from tests.security.conftest import CHAT, chat

FORMULAS = ["=HYPERLINK(\"http://evil.example\",\"click\")", "@SUM(1+1)*cmd|' /C calc'!A0", "+1+2", "-2+3",
            "\tTAB", "\rCR"]


@pytest.mark.parametrize("formula", FORMULAS)
def test_finding_5_csv_export_neutralises_formulas(app_on, store_url: str, formula: str) -> None:
    client = app_on(store_url, content_mode={"": "raw"}, default_content_mode="raw")
    request_id = formula if formula.isprintable() and formula.isascii() and " " not in formula else "@SUM(A1:A9)"
    body = {**CHAT, "messages": [{"role": "user", "content": formula}]}
    assert client.post("/v1/chat/completions", json=body, headers={"X-Request-Id": request_id}).status_code == 200
    export = client.get("/v1/audits/export", params={"format": "csv"})
    assert export.status_code == 200
    cells = [cell for row in csv.reader(io.StringIO(export.text)) for cell in row]
    dangerous = [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r") or (c[:1] == "-" and not _number(c))]
    assert dangerous == []
    assert any(formula in c or json.dumps(formula)[1:-1] in c for c in cells)   # still there, as text


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _key(cli, url: str, role: str, tenant: str) -> str:
    status, out, err = cli(url, "keys", "create", "--tenant", tenant, "--role", role)
    assert status == 0, err
    return re.search(r"key: (aud_\S+)", out).group(1)


def test_finding_6_a_job_over_other_tenants_is_not_readable_by_the_creators_auditors(app_on, cli,
                                                                                    store_url: str) -> None:
    keys = {name: _key(cli, store_url, role, tenant) for name, role, tenant in [
        ("b_client", "client", "bank-b"), ("a_admin", "admin", "bank-a"), ("a_auditor", "auditor", "bank-a"),
        ("b_auditor", "auditor", "bank-b")]}
    client = app_on(store_url)
    chat(client, 2, Authorization=f"Bearer {keys['b_client']}")
    admin = {"Authorization": f"Bearer {keys['a_admin']}"}
    job = client.post("/v1/reaudits", json={"filter": {"tenant": "bank-b"}}, headers=admin).json()
    deadline = time.monotonic() + 20
    while client.get(f"/v1/reaudits/{job['id']}", headers=admin).json()["status"] != "done":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for reader in ("a_auditor", "b_auditor"):
        response = client.get(f"/v1/reaudits/{job['id']}", headers={"Authorization": f"Bearer {keys[reader]}"})
        assert response.status_code == 404, (reader, response.text)
        assert "summary" not in response.json()
    assert client.get(f"/v1/reaudits/{job['id']}", headers=admin).json()["summary"] is not None


@pytest.mark.parametrize("content", ["hi \ud800 x", "hi \udfff", "nul \x00 byte"])
def test_finding_7_invalid_text_is_a_400_on_chat_and_completions(app_on, store_url: str, content: str) -> None:
    client = app_on(store_url)
    for path, body in (("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": content}]}),
                       ("/v1/completions", {"model": "fake-model", "prompt": content}),
                       ("/v1/chat/completions", {**CHAT, "stop": [content]})):
        # json.dumps escapes the surrogate as \\ud800, as any client that sends it does
        response = client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"]["type"] == "invalid_request_error"


def test_finding_7_a_raw_lone_surrogate_in_the_json_body_is_a_400(app_on, store_url: str) -> None:
    client = app_on(store_url)
    raw = b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi \\ud800 x"}]}'
    response = client.post("/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["param"] is not None


def _cursor(number: str) -> str:
    return base64.urlsafe_b64encode(f"seq:{number}".encode()).decode().rstrip("=")


@pytest.mark.parametrize("number", [str(2**64), "9" * 80, "-5", "0"])
def test_finding_9_huge_or_bad_cursors_are_400_on_list_and_export(app_on, store_url: str, number: str) -> None:
    client = app_on(store_url)
    chat(client, 2)
    for path in ("/v1/audits", "/v1/audits/export"):
        response = client.get(path, params={"cursor": _cursor(number)})
        assert response.status_code == 400, (path, response.status_code, response.text)
        assert response.json()["error"]["code"] == "invalid_cursor"


def test_finding_9_nul_in_filters_and_ids_is_not_a_503(app_on, store_url: str) -> None:
    client = app_on(store_url)
    chat(client, 1)
    for params in ({"domain": "med\x00ical"}, {"q": "a\x00b"}, {"tenant": "x\x00"}, {"rule_id": "r\x00"}):
        response = client.get("/v1/audits", params=params)
        assert response.status_code == 400, (params, response.text)
    assert client.get("/v1/audits/abc%00def").status_code == 404
    assert client.get("/v1/reaudits/abc%00def").status_code == 404
    response = client.post("/v1/reaudits", json={"filter": {"domain": "a\x00"}})
    assert response.status_code == 422 and response.json()["error"]["type"] == "invalid_request_error"
    response = client.post("/v1/reaudits", json={"import_id": "a\x00"})
    assert response.status_code in (404, 422), response.text
