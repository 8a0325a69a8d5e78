"""Bad input answers 4xx in the OpenAI error shape; keys, roles and tenants are enforced."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from auditor.auth.keys import create_key

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hello"}]}


def _assert_openai_error(response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"} and error["message"]
    return error


@pytest.mark.parametrize("patch, param", [
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"n": 9}, "n"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools.0.function.name"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"top_logprobs": 3}, "top_logprobs"),
])
def test_bad_parameters_are_400(client: TestClient, patch: dict, param: str) -> None:
    error = _assert_openai_error(client.post("/v1/chat/completions", json={**CHAT, **patch}), 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_malformed_json_is_400(client: TestClient) -> None:
    response = client.post("/v1/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    _assert_openai_error(response, 400)


def test_bad_headers_are_400(client: TestClient) -> None:
    _assert_openai_error(client.post("/v1/chat/completions", json=CHAT, headers={"X-Intent": "DROP TABLE"}), 400)
    _assert_openai_error(client.post("/v1/chat/completions", json=CHAT, headers={"X-Domain": "astrology"}), 400)


def test_oversize_body_is_413(client: TestClient) -> None:
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 70_000}]}
    error = _assert_openai_error(client.post("/v1/chat/completions", json=big), 413)
    assert error["code"] == "request_too_large"


def test_oversize_chunked_body_is_413(client: TestClient) -> None:
    def chunks():
        yield b'{"model": "fake-model", "messages": [{"role": "user", "content": "'
        for _ in range(80):
            yield b"x" * 1000
        yield b'"}]}'
    _assert_openai_error(client.post("/v1/chat/completions", content=chunks(),
                                     headers={"Content-Type": "application/json"}), 413)


def test_engine_rejection_is_400_and_recorded(client: TestClient) -> None:
    bad_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": "not-an-object"}}
    response = client.post("/v1/chat/completions", json={**CHAT, "response_format": bad_schema})
    _assert_openai_error(response, 400)
    page = client.get("/v1/audits", params={"status": "error"}).json()
    assert len(page["data"]) == 1 and "json_schema" in page["data"][0]["error"]


@pytest.fixture
def keyed(client: TestClient) -> dict[str, str]:
    database = client.app.state.services.database
    with database.session() as session:
        keys = {
            "client": create_key(session, tenant="acme", role="client")[1],
            "auditor": create_key(session, tenant="acme", role="auditor")[1],
            "other_auditor": create_key(session, tenant="globex", role="auditor")[1],
            "admin": create_key(session, tenant="ops", role="admin")[1],
        }
    return keys


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_keys_required_once_configured(client: TestClient, keyed: dict[str, str]) -> None:
    _assert_openai_error(client.post("/v1/chat/completions", json=CHAT), 401)
    _assert_openai_error(client.post("/v1/chat/completions", json=CHAT, headers=_auth("aud_wrong")), 401)
    assert client.post("/v1/chat/completions", json=CHAT, headers=_auth(keyed["client"])).status_code == 200


def test_client_key_reading_audits_is_403(client: TestClient, keyed: dict[str, str]) -> None:
    error = _assert_openai_error(client.get("/v1/audits", headers=_auth(keyed["client"])), 403)
    assert error["type"] == "permission_error"
    _assert_openai_error(client.post("/v1/chat/completions", json=CHAT, headers=_auth(keyed["auditor"])), 403)


def test_other_tenants_record_is_404(client: TestClient, keyed: dict[str, str]) -> None:
    audit_id = client.post("/v1/chat/completions", json=CHAT, headers=_auth(keyed["client"])).json()["audit_id"]
    assert client.get(f"/v1/audits/{audit_id}", headers=_auth(keyed["auditor"])).status_code == 200
    _assert_openai_error(client.get(f"/v1/audits/{audit_id}", headers=_auth(keyed["other_auditor"])), 404)
    assert client.get(f"/v1/audits/{audit_id}", headers=_auth(keyed["admin"])).json()["tenant"] == "acme"
    listed = client.get("/v1/audits", headers=_auth(keyed["other_auditor"])).json()["data"]
    assert listed == []
    assert client.get("/v1/audits/export", headers=_auth(keyed["other_auditor"])).text == ""
    assert audit_id in client.get("/v1/audits/export", headers=_auth(keyed["auditor"])).text
    _assert_openai_error(client.get("/v1/audits", params={"tenant": "acme"}, headers=_auth(keyed["other_auditor"])), 403)


def test_revoked_key_is_401(client: TestClient, keyed: dict[str, str]) -> None:
    from auditor.auth.keys import find_active_key, revoke_key

    database = client.app.state.services.database
    with database.session() as session:
        key = find_active_key(session, keyed["client"])
        revoke_key(session, key.id)
    _assert_openai_error(client.post("/v1/chat/completions", json=CHAT, headers=_auth(keyed["client"])), 401)


def test_engine_rejection_in_a_stream_is_a_plain_400(client: TestClient) -> None:
    bad_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": "not-an-object"}}
    response = client.post("/v1/chat/completions", json={**CHAT, "stream": True, "response_format": bad_schema})
    error = _assert_openai_error(response, 400)
    assert "json_schema" in error["message"]


def test_nul_characters_are_400(client: TestClient) -> None:
    response = client.post("/v1/completions", json={"model": "fake-model", "prompt": "a\u0000b"})
    _assert_openai_error(response, 400)


def test_engine_failure_is_500_in_openai_shape_and_recorded(app_factory) -> None:
    from tests.auditor.conftest import FakeEngine

    class BrokenEngine(FakeEngine):
        async def generate(self, prompt, params, **kwargs):
            async for out in super().generate(prompt, params, **kwargs):
                yield out
                raise RuntimeError("step loop died")

    client = app_factory(engine=BrokenEngine(), raise_server_exceptions=False)
    response = client.post("/v1/chat/completions", json=CHAT)
    error = _assert_openai_error(response, 500)
    assert error["code"] == "internal_error" and "Metformin" not in response.text
    page = client.get("/v1/audits", params={"status": "error"}).json()["data"]
    assert len(page) == 1 and page[0]["error"] == "request ended before completion"
