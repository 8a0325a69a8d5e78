"""Findings 1, 4 and 11 (metrics): authentication never falls back, production keys are real keys."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import text

from tests.security.conftest import CHAT, HMAC_KEY


def _key(cli, url: str, role: str = "admin", tenant: str = "acme") -> tuple[str, str]:
    status, out, err = cli(url, "keys", "create", "--tenant", tenant, "--role", role)
    assert status == 0, err
    return re.search(r"key id: (\S+)", out).group(1), re.search(r"key: (aud_\S+)", out).group(1)


def test_finding_1_revoking_the_last_key_does_not_turn_authentication_off(app_on, cli, sqlite_store: str) -> None:
    key_id, key = _key(cli, sqlite_store)
    client = app_on(sqlite_store)
    auth = {"Authorization": f"Bearer {key}"}
    assert client.post("/v1/chat/completions", json=CHAT, headers=auth).status_code == 200
    assert cli(sqlite_store, "keys", "revoke", key_id)[0] == 0
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 401
    assert client.get("/v1/audits").status_code == 401
    assert client.post("/v1/chat/completions", json=CHAT, headers=auth).status_code == 401


def test_finding_1_a_restart_after_the_last_revocation_stays_authenticated(app_on, cli, sqlite_store: str) -> None:
    key_id, _ = _key(cli, sqlite_store)
    assert cli(sqlite_store, "keys", "revoke", key_id)[0] == 0
    client = app_on(sqlite_store)   # a fresh process: the revoked key row says a key has existed
    assert client.get("/v1/audits").status_code == 401


def test_finding_1_deleting_the_key_rows_under_a_running_server_does_not_open_it(app_on, cli, sql,
                                                                                sqlite_store: str) -> None:
    _, key = _key(cli, sqlite_store)
    client = app_on(sqlite_store)
    assert client.get("/v1/audits", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    with sql(sqlite_store).begin() as conn:
        conn.execute(text("DELETE FROM api_keys"))
    assert client.get("/v1/audits").status_code == 401


@pytest.mark.parametrize("overrides", [{"environment": "production"}, {"host": "0.0.0.0"}])
def test_finding_1_no_development_mode_in_production_or_beyond_loopback(app_on, sqlite_store: str,
                                                                       overrides: dict) -> None:
    client = app_on(sqlite_store, **overrides)
    response = client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "no_api_keys"


@pytest.mark.parametrize("weak", ["", "x", "short-key", "a" * 40])
def test_finding_4_production_refuses_a_weak_hmac_key(cli, sqlite_store: str, weak: str) -> None:
    status, out, err = cli(sqlite_store, "audits", "list", AUDITOR_ENVIRONMENT="production", AUDITOR_HMAC_KEY=weak)
    assert status == 2 and out == ""
    assert "AUDITOR_HMAC_KEY" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_finding_4_gen_hmac_prints_a_key_production_accepts(cli, sqlite_store: str) -> None:
    status, out, _ = cli(sqlite_store, "keys", "gen-hmac")
    generated = out.strip()
    assert status == 0 and len(generated.encode()) >= 32
    status, _, err = cli(sqlite_store, "audits", "list", AUDITOR_ENVIRONMENT="production", AUDITOR_HMAC_KEY=generated)
    assert status == 0, err
    assert HMAC_KEY != generated


def test_finding_11_metrics_need_a_reader_key_once_keys_exist(app_on, cli, sqlite_store: str) -> None:
    _, client_key = _key(cli, sqlite_store, role="client")
    _, auditor_key = _key(cli, sqlite_store, role="auditor")
    client = app_on(sqlite_store)
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": f"Bearer {client_key}"}).status_code == 403
    response = client.get("/metrics", headers={"Authorization": f"Bearer {auditor_key}"})
    assert response.status_code == 200 and "auditor_requests" in response.text


def test_finding_11_metrics_can_move_to_their_own_listener(app_on, sqlite_store: str) -> None:
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = app_on(sqlite_store, metrics_access="off", metrics_port=port)
    assert client.get("/metrics").status_code == 404
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert b"auditor_requests" in response.read()
