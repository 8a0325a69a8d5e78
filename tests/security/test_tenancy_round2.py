"""Issue 43, findings 6 and 7: tenancy of alert rules, fired alerts and the per-tenant series on /metrics.

6: an admin's alert rule for tenant beta (and the alerts it fired, with beta's totals) was readable by tenant
acme's auditor key, and every reader saw the webhook URL with the token in its query.
7: acme's auditor key read `auditor_*_tokens_total{tenant="beta"}` on /metrics."""

from __future__ import annotations

import re

import httpx

from auditor.alerts.engine import run_due
from tests.security.conftest import chat

SECRET = "s3cret-hook-token-7f1c"
BETA_HOOK = f"https://hooks.example.net/services/T0/B0/{SECRET}?token={SECRET}"
GLOBAL_HOOK = f"https://ops:{SECRET}@pager.example.org/v2/enqueue?routing_key={SECRET}"


def _key(cli, url: str, role: str, tenant: str) -> str:
    status, out, err = cli(url, "keys", "create", "--tenant", tenant, "--role", role)
    assert status == 0, err
    return re.search(r"key: (aud_\S+)", out).group(1)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _failing_webhook(url: str, body: bytes, headers: dict) -> int:
    # what httpx raises on a 4xx: its message names the URL, token and all
    httpx.Response(404, request=httpx.Request("POST", url)).raise_for_status()
    return 404   # not reached: raise_for_status raised


def _alerts_world(app_on, cli, url: str):
    keys = {name: _key(cli, url, role, tenant) for name, role, tenant in [
        ("admin", "admin", "ops"), ("acme_auditor", "auditor", "acme"), ("beta_auditor", "auditor", "beta"),
        ("beta_client", "client", "beta"), ("acme_client", "client", "acme")]}
    client = app_on(url, alert_check_interval_s=3600)
    # the test runs the alert pass itself, with a fake poster: the app's own dispatcher would race it for the new
    # rules (they are due at once) and post to the hooks' hosts for real
    client.app.state.services.scoring_worker.stop()
    chat(client, 2, **_bearer(keys["beta_client"]))
    chat(client, 1, **_bearer(keys["acme_client"]))
    admin = _bearer(keys["admin"])
    beta_rule = client.post("/v1/alerts/rules", headers=admin, json={
        "name": "beta volume", "expression": "records > 0 over 1h for tenant=beta", "webhook_url": BETA_HOOK})
    assert beta_rule.status_code == 201, beta_rule.text
    global_rule = client.post("/v1/alerts/rules", headers=admin, json={
        "name": "all volume", "expression": "records > 0 over 1h", "webhook_url": GLOBAL_HOOK})
    assert global_rule.status_code == 201, global_rule.text
    counts = run_due(client.app.state.services.database, check_interval_s=3600, retry_delays_s=[],
                     post=_failing_webhook)
    assert counts["fired"] == 2 and counts["failed"] == 2, counts
    return client, keys, beta_rule.json()["id"], global_rule.json()["id"]


def test_finding_6_a_tenant_reads_only_its_own_alert_rules_and_alerts(app_on, cli, store_url: str) -> None:
    client, keys, beta_rule, global_rule = _alerts_world(app_on, cli, store_url)
    acme = _bearer(keys["acme_auditor"])
    rules = client.get("/v1/alerts/rules", headers=acme)
    assert rules.status_code == 200, rules.text
    assert rules.json()["data"] == []                       # neither beta's rule nor the all-tenant one
    alerts = client.get("/v1/alerts", headers=acme)
    assert alerts.status_code == 200 and alerts.json()["data"] == []
    assert client.get("/v1/alerts", headers=acme, params={"rule_id": beta_rule}).json()["data"] == []

    beta = _bearer(keys["beta_auditor"])
    assert [r["id"] for r in client.get("/v1/alerts/rules", headers=beta).json()["data"]] == [beta_rule]
    assert {a["rule_id"] for a in client.get("/v1/alerts", headers=beta).json()["data"]} == {beta_rule}

    admin = _bearer(keys["admin"])
    assert {r["id"] for r in client.get("/v1/alerts/rules", headers=admin).json()["data"]} == {beta_rule, global_rule}
    assert {a["rule_id"] for a in client.get("/v1/alerts", headers=admin).json()["data"]} == {beta_rule, global_rule}


def test_finding_6_webhook_secrets_are_never_shown_back(app_on, cli, store_url: str) -> None:
    client, keys, beta_rule, _ = _alerts_world(app_on, cli, store_url)
    for reader in ("admin", "beta_auditor"):
        for path in ("/v1/alerts/rules", "/v1/alerts", "/v1/alerts/rules?include_disabled=true"):
            response = client.get(path, headers=_bearer(keys[reader]))
            assert response.status_code == 200, response.text
            assert SECRET not in response.text, (reader, path)
    shown = {r["id"]: r for r in client.get("/v1/alerts/rules", headers=_bearer(keys["admin"])).json()["data"]}
    assert shown[beta_rule]["webhook_url"].startswith("https://hooks.example.net/")   # still recognisable
    assert re.fullmatch(r"[0-9a-f]{16}", shown[beta_rule]["webhook_fingerprint"])
    failed = client.get("/v1/alerts", headers=_bearer(keys["admin"])).json()["data"]
    assert all(a["last_error"] and "404" in a["last_error"] for a in failed)    # the error is kept, the token not
    disabled = client.post(f"/v1/alerts/rules/{beta_rule}/disable", headers=_bearer(keys["admin"]))
    assert disabled.status_code == 200 and SECRET not in disabled.text
    for args in (("alerts", "rules", "--all"), ("alerts", "rules", "--json"), ("alerts", "list"),
                 ("alerts", "list", "--json")):
        status, out, err = cli(store_url, *args)
        assert status == 0, err
        assert SECRET not in out, args
    status, out, _ = cli(store_url, "alerts", "add", "--name", "x", "--webhook", BETA_HOOK, "critical > 0")
    assert status == 0 and SECRET not in out


def test_finding_6_the_webhook_still_gets_the_full_url(app_on, cli, sqlite_store: str) -> None:
    keys = {"admin": _key(cli, sqlite_store, "admin", "ops"), "client": _key(cli, sqlite_store, "client", "beta")}
    client = app_on(sqlite_store, alert_check_interval_s=3600)
    client.app.state.services.scoring_worker.stop()   # as in _alerts_world
    chat(client, 1, **_bearer(keys["client"]))
    assert client.post("/v1/alerts/rules", headers=_bearer(keys["admin"]), json={
        "name": "b", "expression": "records > 0 over 1h for tenant=beta", "webhook_url": BETA_HOOK}).status_code == 201
    posted: list[str] = []
    run_due(client.app.state.services.database, check_interval_s=3600, retry_delays_s=[],
            post=lambda url, body, headers: posted.append(url) or 200)
    assert posted == [BETA_HOOK]


def test_finding_7_a_tenant_reader_sees_only_its_own_tenant_series(app_on, cli, sqlite_store: str) -> None:
    keys = {name: _key(cli, sqlite_store, role, tenant) for name, role, tenant in [
        ("acme_client", "client", "acme"), ("beta_client", "client", "beta"), ("acme_auditor", "auditor", "acme"),
        ("admin", "admin", "ops")]}
    client = app_on(sqlite_store)
    chat(client, 1, **_bearer(keys["acme_client"]))
    chat(client, 1, **_bearer(keys["beta_client"]))
    acme = _scrape(client, keys["acme_auditor"])
    assert 'tenant="acme"' in acme and "auditor_requests" in acme   # its own series and the shared ones
    assert re.findall(r'tenant="(?!acme")[^"]*"', acme) == []
    full = _scrape(client, keys["admin"])
    assert 'tenant="acme"' in full and 'tenant="beta"' in full


def test_finding_7_a_scraper_key_reads_every_series_and_nothing_else(app_on, cli, sqlite_store: str) -> None:
    keys = {name: _key(cli, sqlite_store, role, tenant) for name, role, tenant in [
        ("acme_client", "client", "acme"), ("beta_client", "client", "beta"), ("scraper", "metrics", "ops")]}
    client = app_on(sqlite_store)
    chat(client, 1, **_bearer(keys["acme_client"]))
    chat(client, 1, **_bearer(keys["beta_client"]))
    full = _scrape(client, keys["scraper"])
    assert 'tenant="acme"' in full and 'tenant="beta"' in full
    for method, path in (("GET", "/v1/audits"), ("GET", "/v1/alerts"), ("GET", "/v1/usage"),
                         ("POST", "/v1/chat/completions")):
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]} if method == "POST" else None
        response = client.request(method, path, headers=_bearer(keys["scraper"]), json=body)
        assert response.status_code == 403, (path, response.text)


def _scrape(client, key: str) -> str:
    response = client.get("/metrics", headers=_bearer(key))
    assert response.status_code == 200, response.text
    return response.text
