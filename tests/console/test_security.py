"""The console's security properties over plain HTTP: no session -> the login page; CSRF on every form;
client keys, revoked keys and forged or expired cookies refused; cookie flags; no open redirect."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from auditor.app import create_app
from auditor.auth.keys import create_key, revoke_key
from auditor.console.session import SESSION_COOKIE, SessionSigner
from auditor.trail.access_log import read_log
from auditor.trail.schemas import AccessLogFilters
from tests.auditor.conftest import TEST_HMAC_KEY, FakeEngine, make_settings

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], Any]]:
    client = TestClient(create_app(make_settings(f"sqlite:///{tmp_path / 'audit.db'}"), engine=FakeEngine()),
                        follow_redirects=False)
    with client:
        database = client.app.state.services.database
        keys = {}
        with database.session() as session:
            for role in ("client", "reviewer", "auditor", "admin"):
                keys[role] = create_key(session, tenant="acme", role=role)[1]
        yield client, keys, database


def log_in(client: TestClient, key: str) -> Any:
    form = client.get("/console/login")
    token = CSRF.search(form.text).group(1)
    return client.post("/console/login", data={"api_key": key, "csrf_token": token, "next": "/console/records"})


def csrf_of(client: TestClient, path: str) -> str:
    return CSRF.search(client.get(path).text).group(1)


@pytest.mark.parametrize("path", ["/console", "/console/records", "/console/reviews", "/console/holds",
                                  "/console/records/some-id", "/console/trends", "/console/bundle"])
def test_no_cookie_redirects_to_login(app_client: Any, path: str) -> None:
    client, _, _ = app_client
    response = client.get(path)
    assert response.status_code == 303
    assert response.headers["location"].startswith("/console/login?next=")


def test_login_sets_a_strict_httponly_cookie_scoped_to_the_console(app_client: Any) -> None:
    client, keys, _ = app_client
    response = log_in(client, keys["auditor"])
    assert response.status_code == 303 and response.headers["location"] == "/console/records"
    cookie = next(v for k, v in response.headers.multi_items() if k == "set-cookie" and v.startswith(SESSION_COOKIE))
    flags = {part.strip().split("=")[0].lower(): part for part in cookie.split(";")}
    assert "httponly" in flags and flags["samesite"].strip().lower() == "samesite=strict"
    assert flags["path"].strip() == "Path=/console" and "max-age" in flags
    assert keys["auditor"] not in cookie                     # the key itself never travels in the cookie
    page = client.get("/console/records")
    assert page.status_code == 200 and "Trail search" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"


def test_client_keys_and_unknown_keys_are_refused(app_client: Any) -> None:
    client, keys, database = app_client
    refused = log_in(client, keys["client"])
    assert refused.status_code == 403 and "may not use the console" in refused.text
    assert f"{SESSION_COOKIE}=" not in refused.headers.get("set-cookie", "")
    assert log_in(client, "aud_not-a-key").status_code == 401
    log = read_log(database, _Operator(), AccessLogFilters(action="denied"))[0]
    assert any(entry.target == "/console/login" and entry.role == "client" for entry in log)


def test_login_form_needs_its_csrf_token(app_client: Any) -> None:
    client, keys, _ = app_client
    client.get("/console/login")
    response = client.post("/console/login", data={"api_key": keys["admin"], "csrf_token": "forged"})
    assert response.status_code == 403 and f"{SESSION_COOKIE}=" not in response.headers.get("set-cookie", "")


@pytest.mark.parametrize("path,data", [
    ("/console/holds", {"matter_id": "M-1", "reason": "r", "tenant": "acme"}),
    ("/console/keys", {"tenant": "acme", "role": "admin"}),
    ("/console/chain/verify", {"mode": "full"}),
    ("/console/reaudits", {"domain": "medical"}),
    ("/console/logout", {}),
])
def test_every_form_refuses_a_missing_or_foreign_csrf_token(app_client: Any, path: str, data: dict[str, str]) -> None:
    client, keys, database = app_client
    other = TestClient(client.app, follow_redirects=False)
    log_in(other, keys["admin"])
    foreign = csrf_of(other, "/console/holds")               # a valid token, of another session
    log_in(client, keys["admin"])
    for token in (None, "x", foreign):
        response = client.post(path, data={**data, **({"csrf_token": token} if token else {})})
        assert response.status_code == 403, (path, token, response.status_code)
        assert "CSRF" in response.text
    with database.session() as session:                      # and nothing was done
        from auditor.auth.keys import list_keys
        from auditor.trail.holds import list_holds
        assert len(list_keys(session)) == 4
    assert list_holds(database, include_released=True) == []


def test_a_valid_token_does_the_work(app_client: Any) -> None:
    client, keys, _ = app_client
    log_in(client, keys["admin"])
    response = client.post("/console/holds", data={"matter_id": "M-1", "reason": "litigation", "tenant": "acme",
                                                   "csrf_token": csrf_of(client, "/console/holds")})
    assert response.status_code == 303
    assert "M-1" in client.get("/console/holds").text


def test_roles_limit_the_pages(app_client: Any) -> None:
    client, keys, _ = app_client
    log_in(client, keys["reviewer"])
    assert client.get("/console").headers["location"] == "/console/reviews"
    assert client.get("/console/reviews").status_code == 200
    assert client.get("/console/records").status_code == 403  # listing the trail is the auditors'
    log_in(client, keys["auditor"])
    assert client.get("/console/holds").status_code == 403    # holds and keys are the admins'
    assert client.get("/console/keys").status_code == 403


def test_revoking_the_key_ends_its_session(app_client: Any) -> None:
    client, keys, database = app_client
    log_in(client, keys["auditor"])
    assert client.get("/console/records").status_code == 200
    with database.session() as session:
        from auditor.auth.keys import find_active_key
        revoke_key(session, find_active_key(session, keys["auditor"]).id)
    assert client.get("/console/records").status_code == 303


def test_forged_and_expired_cookies_are_refused(app_client: Any) -> None:
    client, keys, database = app_client
    with database.session() as session:
        from auditor.auth.keys import find_active_key
        key_id = find_active_key(session, keys["admin"]).id
    signer = SessionSigner(TEST_HMAC_KEY.encode())
    forged = SessionSigner(b"another-secret").issue(key_id)
    expired = signer.issue(key_id, ttl_s=-1)
    for cookie in (forged, expired, signer.issue(key_id)[:-2] + "xx", "garbage"):
        client.cookies.set(SESSION_COOKIE, cookie, path="/console")
        assert client.get("/console/records").status_code == 303
    client.cookies.set(SESSION_COOKIE, signer.issue(key_id), path="/console")
    assert client.get("/console/records").status_code == 200


def test_logout_clears_the_cookie(app_client: Any) -> None:
    client, keys, _ = app_client
    log_in(client, keys["auditor"])
    response = client.post("/console/logout", data={"csrf_token": csrf_of(client, "/console/records")})
    assert response.status_code == 303 and response.headers["location"] == "/console/login"
    assert client.get("/console/records").status_code == 303


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "/v1/keys", "/console\\@evil"])
def test_login_never_redirects_off_the_console(app_client: Any, target: str) -> None:
    client, keys, _ = app_client
    form = client.get("/console/login", params={"next": target})
    token = CSRF.search(form.text).group(1)
    response = client.post("/console/login", data={"api_key": keys["auditor"], "csrf_token": token, "next": target})
    assert response.headers["location"] == "/console"


def test_bad_filters_are_a_message_not_an_error(app_client: Any) -> None:
    client, keys, _ = app_client
    log_in(client, keys["auditor"])
    response = client.get("/console/records", params={"fer_min": "2", "since": "yesterday-ish", "cursor": "zz"})
    assert response.status_code == 200 and "Problem:" in response.text
    assert client.get("/console/records/no-such-record").status_code == 404


class _Operator:
    key_id = None
    tenant = "ops"
    role = "admin"
    tenant_scope = None


def test_every_console_response_carries_the_security_headers_and_the_api_does_not(app_client: Any) -> None:
    client, keys, _ = app_client
    redirect = client.get("/console/records", follow_redirects=False)   # not logged in: a redirect
    refused = log_in(client, keys["client"])                            # a 403 page
    static = client.get("/console/static/console.css")
    for response in (redirect, refused, static):
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"], response.url
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"
    assert redirect.headers["cache-control"] == "no-store" and refused.headers["cache-control"] == "no-store"
    assert static.status_code == 200 and static.headers.get("cache-control") != "no-store"   # may be cached
    api = client.get("/health")
    assert "content-security-policy" not in api.headers and "referrer-policy" not in api.headers
