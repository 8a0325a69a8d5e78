"""Issue 43, finding 13: logging out of the console ended nothing on the server. A copy of the cookie taken
before logout (and the CSRF token of its pages) kept working for the rest of its 8 hours, in every process."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from auditor.console.session import SESSION_COOKIE

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
HOLD = {"matter_id": "M-after-logout", "reason": "replayed", "tenant": "acme"}


def _key(cli, url: str, role: str = "admin", tenant: str = "acme") -> str:
    status, out, err = cli(url, "keys", "create", "--tenant", tenant, "--role", role)
    assert status == 0, err
    return re.search(r"key: (aud_\S+)", out).group(1)


def _log_in(client: TestClient, key: str) -> tuple[str, str]:
    """Log in through the form; the session cookie and a CSRF token of a page of that session."""
    form = client.get("/console/login")
    token = CSRF.search(form.text).group(1)
    response = client.post("/console/login", data={"api_key": key, "csrf_token": token, "next": "/console/holds"},
                           follow_redirects=False)
    assert response.status_code == 303, response.text
    cookie = client.cookies.get(SESSION_COOKIE)
    page = client.get("/console/holds", follow_redirects=False)
    assert page.status_code == 200
    return cookie, CSRF.search(page.text).group(1)


def _log_out(client: TestClient, csrf: str) -> None:
    response = client.post("/console/logout", data={"csrf_token": csrf}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/console/login"


def _replay(client: TestClient, cookie: str, csrf: str) -> tuple[int, int]:
    """The copied cookie (and token) sent again: (GET status, POST-a-hold status)."""
    client.cookies.clear()
    client.cookies.set(SESSION_COOKIE, cookie, path="/console")
    shown = client.get("/console/holds", follow_redirects=False).status_code
    posted = client.post("/console/holds", data={**HOLD, "csrf_token": csrf}, follow_redirects=False).status_code
    client.cookies.clear()
    return shown, posted


def _holds(cli, url: str) -> str:
    status, out, err = cli(url, "holds", "list", "--all")
    assert status == 0, err
    return out


def test_finding_13_a_cookie_copied_before_logout_is_dead_after_it(app_on, cli, store_url: str) -> None:
    key = _key(cli, store_url)
    client = app_on(store_url)
    cookie, csrf = _log_in(client, key)
    _log_out(client, csrf)
    shown, posted = _replay(client, cookie, csrf)
    assert shown == 303, "the page was shown to a logged-out cookie"
    assert posted in (303, 403) and "M-after-logout" not in _holds(cli, store_url)


def test_finding_13_logout_holds_in_every_process_on_the_store(app_on, cli, store_url: str) -> None:
    key = _key(cli, store_url)
    first, second = app_on(store_url), app_on(store_url)   # two API processes behind one load balancer
    cookie, csrf = _log_in(first, key)
    assert _replay(second, cookie, "not-needed")[0] == 200  # the cookie is good in both before logout
    _log_out(first, csrf)
    assert _replay(second, cookie, csrf)[0] == 303
    assert "M-after-logout" not in _holds(cli, store_url)


def test_finding_13_logout_ends_only_that_session(app_on, cli, store_url: str) -> None:
    key = _key(cli, store_url)
    client, other = app_on(store_url), app_on(store_url)
    kept_cookie, kept_csrf = _log_in(other, key)               # the same key, signed in elsewhere
    cookie, csrf = _log_in(client, key)
    _log_out(client, csrf)
    assert _replay(client, cookie, csrf)[0] == 303
    assert _replay(client, kept_cookie, kept_csrf) == (200, 303)   # still signed in, and its form works
    assert "M-after-logout" in _holds(cli, store_url)
    again, _ = _log_in(client, key)                           # and logging in again works
    assert again != cookie
