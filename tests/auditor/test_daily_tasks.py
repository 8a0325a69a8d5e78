"""Issue 17: a compliance officer's daily tasks (a)-(g), each end to end through the HTTP API and through the
CLI, on live answers and on imported answers of another model, with the real validators and rule packs.

(a) contradicted medical answers of the last day, with evidence      (e) who read which records
(b) the legal answers exported for a regulator, checked offline       (f) FER trends per domain and model, alerts
(c) reviewing verdicts, and the disputes as feedback                  (g) re-audit after a rule-pack update
(d) a legal hold by matter
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text

from auditor.trail.models import TrailEvent
from tests.auditor.conftest import TEST_HMAC_KEY
from tests.auditor.daily_world import World, open_world, webhook_server

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    yield from open_world(tmp_path, monkeypatch)


# -- (a) ---------------------------------------------------------------------------------------------------


def test_a_contradicted_medical_answers_of_the_last_day_with_evidence(world: World) -> None:
    expected = {world.imported["metformin"], world.imported["lisinopril"], *world.live}
    page = world.get("/v1/audits", domain="medical", has_contradicted=True, since="1d")
    assert {r["id"] for r in page["data"]} == expected   # imports included; the 3-day-old one is not
    by_id = {r["id"]: r for r in page["data"]}
    imported = by_id[world.imported["metformin"]]
    assert imported["endpoint"] == "import" and imported["claims"] is None    # the record itself holds no verdicts...
    current = imported["current"]                                             # ...its current verdicts do
    assert current["source"] == "evaluation" and current["n_contradicted"] == 1 and current["fer"] == 1.0
    assert current["had_gate"] is False and current["verdict_action"] == "block"
    assert current["rule_pack"]["version"] and current["rule_pack"]["active"] is True
    [claim] = current["claims"]
    assert claim["verdict"] == "contradicted" and "2550" in json.dumps(claim["evidence"])
    assert world.get("/v1/audits", domain="medical", fer_min=0.5, since="1d")["data"]   # FER filter sees imports
    # occurred_at is the output's own time: the old import is there when the window reaches back far enough
    old = world.imported["old_metformin"]
    assert old in {r["id"] for r in world.get("/v1/audits", domain="medical", has_contradicted=True, since="4d")["data"]}
    rows = list(csv.DictReader(io.StringIO(world.client.get(
        "/v1/audits/export", params={"domain": "medical", "has_contradicted": True, "since": "1d", "format": "csv"},
        headers=world.headers("auditor")).text)))
    assert {r["id"] for r in rows} == expected and all(r["current_n_contradicted"] == "1" for r in rows)

    status, out, _ = world.cli("audits", "list", "--domain", "medical", "--has-contradicted", "--since", "1d", "--json")
    assert status == 0 and {json.loads(line)["id"] for line in out.splitlines()} == expected
    status, out, _ = world.cli("audits", "list", "--domain", "medical", "--has-contradicted", "--since", "1d")
    assert status == 0 and out.splitlines()[0].split()[:3] == ["SEQ", "ID", "OCCURRED"]
    assert world.imported["metformin"] in out and old not in out and "(no gate)" in out
    status, out, _ = world.cli("audits", "show", world.imported["lisinopril"])
    assert status == 0 and "contradicted" in out and "dose" in out and "evaluations:" in out
    status, out, _ = world.cli("audits", "list", "--domain", "finance", "--has-contradicted", "--since", "1d")
    assert status == 0 and out.strip() == "no audit records match these filters"


# -- (b) ---------------------------------------------------------------------------------------------------


def _verify_bundle(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    # The bundle's own copy of the checker, run as a regulator would: a plain python3, no project on the path.
    return subprocess.run([sys.executable, "-I", str(folder / "verify_bundle.py"), str(folder), *extra],
                          capture_output=True, text=True, timeout=120, cwd=folder)


def test_b_legal_answers_exported_for_a_regulator(world: World, tmp_path: Path) -> None:
    response = world.client.get("/v1/audits/bundle", params={"domain": "legal"}, headers=world.headers("auditor"))
    assert response.status_code == 200 and response.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        archive.extractall(tmp_path / "api")
    folder = tmp_path / "api" / "bundle"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["filter"] == {"domain": "legal"} and manifest["created_by"]["key_id"] == world.key_ids["auditor"]
    # Brown's citation (right) and its year (1955: wrong) are two claims, Varghese's fabricated citation one
    assert manifest["counts"]["records"] == 2 and manifest["counts"]["claims"] == 3
    assert set(manifest["files"]) >= {"records.csv", "claims.jsonl", "evidence.csv", "evaluations.jsonl",
                                      "columns.csv", "chain/links.jsonl", "chain/checkpoints.jsonl", "verify_bundle.py"}
    records = list(csv.DictReader((folder / "records.csv").open(encoding="utf-8")))
    assert {r["id"] for r in records} == {world.imported["brown"], world.imported["varghese"]}
    assert all(r["current_rule_pack_version"] and r["current_rule_pack_hash"] for r in records)   # imports too
    claims = list(csv.DictReader((folder / "claims.csv").open(encoding="utf-8")))
    assert {c["verdict"] for c in claims} == {"contradicted", "supported"}
    assert any("1955" in c["text"] and c["verdict"] == "contradicted" for c in claims)
    key_file = tmp_path / "key"
    key_file.write_text(TEST_HMAC_KEY)
    checked = _verify_bundle(folder, "--hmac-key-file", str(key_file))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "bundle verified" in checked.stdout and "signatures verify" in checked.stdout

    status, out, err = world.cli("audits", "export", "--domain", "legal", "--bundle", str(tmp_path / "cli"))
    assert status == 0, err
    # The regulator checks with the public key the service publishes apart from the bundle.
    status, keys, err = world.cli("audits", "bundle-keys", "--json")
    assert status == 0, err
    public_key = json.loads(keys)["ed25519_public_key"]
    assert public_key in out
    checked = _verify_bundle(tmp_path / "cli", "--public-key", public_key)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert _verify_bundle(folder, "--public-key", public_key).returncode == 0   # the API's bundle: the same key
    # One altered cell: the year of Brown in the per-claim CSV.
    path = tmp_path / "cli" / "claims.csv"
    path.write_text(path.read_text(encoding="utf-8").replace("1955", "1954"), encoding="utf-8")
    altered = _verify_bundle(tmp_path / "cli")
    assert altered.returncode == 1 and "claims.csv row" in altered.stdout and "bundle NOT verified" in altered.stdout


# -- (c) ---------------------------------------------------------------------------------------------------


def test_c_review_queue_per_claim_reviews_and_feedback(world: World) -> None:
    queue = world.get("/v1/reviews/queue", role="reviewer", domain="medical")
    queued = {r["id"] for r in queue["data"]}
    assert {world.imported["metformin"], world.imported["lisinopril"]} <= queued
    assert world.imported["diabetes"] not in queued                   # supported, confident: no review needed
    target = world.imported["lisinopril"]
    record = world.get(f"/v1/audits/{target}", role="reviewer")
    dispute = world.client.post(f"/v1/audits/{target}/reviews", headers=world.headers("reviewer"), json={
        "evaluation_id": record["current"]["evaluation_id"],
        "claims": [{"claim_index": 0, "decision": "false_positive", "note": "400 mg is the total weekly amount"}],
        "note": "checked against the label"})
    assert dispute.status_code == 201, dispute.text
    assert dispute.json()["disputed"] == 1 and dispute.json()["verdict_ref"] == record["current"]["evaluation_id"]
    bad = world.client.post(f"/v1/audits/{target}/reviews", headers=world.headers("reviewer"),
                            json={"claims": [{"claim_index": 5, "decision": "confirm"}]})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_review"
    assert target not in {r["id"] for r in world.get("/v1/reviews/queue", role="reviewer", domain="medical")["data"]}
    [line] = [json.loads(x) for x in world.client.get("/v1/reviews/feedback", headers=world.headers("auditor")).text.splitlines()]
    assert line["record_id"] == target and line["decision"] == "false_positive"
    assert line["claim"]["verdict"] == "contradicted" and "400 mg" in line["claim"]["text"]   # the dose it states
    assert line["rule_pack"]["version"] and line["note"] == "400 mg is the total weekly amount"
    assert world.get(f"/v1/audits/{target}")["reviews"][0]["items"][0]["decision"] == "false_positive"
    assert world.client.get("/v1/reviews/feedback", headers=world.headers("reviewer")).status_code == 403

    status, out, _ = world.cli("review", "queue", "--domain", "medical")
    assert status == 0 and out.splitlines()[0].startswith("SEQ") and world.imported["metformin"] in out
    status, out, err = world.cli("review", "submit", world.imported["metformin"], "--confirm", "0",
                                 "--note", "0", "matches the label")
    assert status == 0, err
    assert "1 confirmed, 0 disputed" in out
    status, out, _ = world.cli("review", "queue", "--domain", "medical", "--json")
    assert world.imported["metformin"] not in out
    status, out, _ = world.cli("review", "feedback")
    assert status == 0 and [json.loads(x)["record_id"] for x in out.splitlines()] == [target]
    status, _, err = world.cli("review", "submit", world.imported["metformin"], "--false-positive", "9")
    assert status == 2 and "out of range" in err
    with world.database.engine.connect() as conn:   # reviews are chained events, and the trail still verifies
        kinds = [row[0] for row in conn.execute(select(TrailEvent.kind).where(TrailEvent.kind == "review"))]
    assert kinds == ["review", "review"]
    assert world.cli("audit", "verify-chain")[0] == 0


# -- (d) ---------------------------------------------------------------------------------------------------


def test_d_legal_hold_by_matter(world: World) -> None:
    a, b = world.imported["metformin"], world.imported["lisinopril"]
    placed = world.client.post("/v1/holds", headers=world.headers("admin"), json={
        "matter_id": "SEC-2026-114", "reason": "subpoena of 3 Dec", "scope": {"records": [a, b]}})
    assert placed.status_code == 201, placed.text
    hold = placed.json()
    assert hold["scope"] == {"records": [a, b]} and hold["placed_by"]["key_id"] == world.key_ids["admin"]
    missing = world.client.post("/v1/holds", headers=world.headers("admin"), json={
        "matter_id": "SEC-2026-114", "reason": "x", "scope": {"records": [a, "no-such-record"]}})
    assert missing.status_code == 404 and "no-such-record" in missing.json()["error"]["message"]
    assert world.client.post("/v1/holds", headers=world.headers("auditor"), json={
        "matter_id": "M", "reason": "x", "scope": {"tenant": "acme"}}).status_code == 403
    listed = world.get("/v1/holds", role="admin", matter_id="SEC-2026-114")["data"]
    assert [h["id"] for h in listed] == [hold["id"]]
    assert world.get(f"/v1/audits/{a}")["holds"] == [{"hold_id": hold["id"], "matter_id": "SEC-2026-114",
                                                      "reason": "subpoena of 3 Dec"}]

    status, out, _ = world.cli("holds", "place", "--matter", "M-77", "--reason", "litigation hold",
                               "--record", world.imported["brown"], "--record", world.imported["varghese"])
    assert status == 0 and "legal hold 2 placed for matter M-77: 2 record(s)" in out   # both records, not the last
    status, _, err = world.cli("holds", "place", "--matter", "M-77", "--reason", "x", "--record", "nope")
    assert status == 2 and "no audit record nope" in err
    status, out, _ = world.cli("holds", "list")
    assert "SEC-2026-114" in out and "M-77" in out and out.splitlines()[0].startswith("ID")
    world.cli_env["AUDITOR_DEFAULT_RETENTION_DAYS"] = "0"   # everything has expired: the dry run shows what stays
    status, out, _ = world.cli("audit", "purge", "--dry-run")
    outcomes = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:]}
    assert status == 0 and outcomes[a] == ["held", str(hold["id"])] and outcomes[world.imported["brown"]] == ["held", "2"]
    assert outcomes[world.imported["isin"]] == ["purge", "-"]
    released = world.client.post(f"/v1/holds/{hold['id']}/release", headers=world.headers("admin"),
                                 json={"reason": "matter closed"})
    assert released.status_code == 200 and released.json()["release_reason"] == "matter closed"
    again = world.client.post(f"/v1/holds/{hold['id']}/release", headers=world.headers("admin"), json={"reason": "x"})
    assert again.status_code == 409
    status, out, _ = world.cli("holds", "release", "2", "--reason", "settled")
    assert status == 0 and "released: settled" in out
    status, out, _ = world.cli("holds", "list")
    assert out.strip().startswith("no legal holds active")
    with world.database.engine.connect() as conn:
        events = [tuple(r) for r in conn.execute(select(TrailEvent.kind, TrailEvent.subject)
                                                 .where(TrailEvent.kind.like("hold_%")).order_by(TrailEvent.seq))]
    assert events == [("hold_placed", f"hold:{hold['id']}"), ("hold_placed", "hold:2"),
                      ("hold_released", f"hold:{hold['id']}"), ("hold_released", "hold:2")]
    assert world.cli("audit", "verify-chain")[0] == 0


# -- (e) ---------------------------------------------------------------------------------------------------


def test_e_who_read_which_records(world: World) -> None:
    target = world.imported["brown"]
    world.get("/v1/audits", domain="legal")                       # a list that shows it
    world.get(f"/v1/audits/{target}", role="reviewer")            # a reviewer opens it
    world.client.get("/v1/audits/export", params={"domain": "legal"}, headers=world.headers("auditor"))
    readers = world.get("/v1/access-log", record_id=target)["data"]
    assert [(e["action"], e["key_id"]) for e in readers] == [
        ("export", world.key_ids["auditor"]), ("show", world.key_ids["reviewer"]), ("list", world.key_ids["auditor"])]
    assert all(target in e["record_ids"] for e in readers)
    what = world.get("/v1/access-log", key_id=world.key_ids["reviewer"], action="show")["data"]
    assert [e["record_ids"] for e in what] == [[target]]
    assert world.client.get("/v1/access-log", params={"tenant": "other"},
                            headers=world.headers("auditor")).status_code == 403
    assert world.client.get("/v1/access-log", headers=world.headers("reviewer")).status_code == 403

    status, out, _ = world.cli("access-log", "--record", target)
    assert status == 0 and out.splitlines()[0].startswith("ID") and world.key_ids["reviewer"] in out
    status, out, _ = world.cli("access-log", "--key", world.key_ids["reviewer"], "--json")
    # what the reviewer's key read: the record, and the refused try at the access log (refusals are logged)
    assert [e["action"] for e in json.loads(out)["data"]] == ["denied", "show"]
    status, out, _ = world.cli("access-log", "--record", "never-read")
    assert status == 0 and out.strip() == "no access-log entries match"


# -- (f) ---------------------------------------------------------------------------------------------------


def test_f_fer_trends_per_domain_and_model_and_alerts(world: World) -> None:
    trend = world.get("/v1/trends", group_by="domain,model", bucket="day", since="7d")
    medical_imports = [p for p in trend["series"] if p["domain"] == "medical" and p["model"] == "other-llm-7b"]
    # four medical imports (one three days back): three contradicted doses, one supported indication
    assert sum(p["records"] for p in medical_imports) == 4
    assert sum(p["claims"]["contradicted"] for p in medical_imports) == 3
    assert any(p["bucket_start"] < trend["series"][-1]["bucket_start"] for p in medical_imports)   # by occurred_at
    legal = [p for p in trend["series"] if p["domain"] == "legal"]
    # both legal answers are blocked: Brown's wrong year (its citation is right) and Varghese's fabricated case
    assert legal and all(p["block_rate"] == 1.0 for p in legal)
    assert sum(p["claims"]["contradicted"] for p in legal) == 2 and sum(p["claims"]["supported"] for p in legal) == 1
    hourly = world.get("/v1/trends", group_by="domain", bucket="hour", since="6h", domain="finance")
    # Apple's ISIN: valid, and the curated issuer register names Apple as its issuer: one supported claim, FER 0
    assert [(p["domain"], p["records"], p["fer"]) for p in hourly["series"]] == [("finance", 1, 0.0)]
    assert world.client.get("/v1/trends", params={"bucket": "hour", "since": "3000d"},
                            headers=world.headers("auditor")).status_code == 400

    status, out, _ = world.cli("trends", "--by", "domain", "--since", "7d")
    assert status == 0 and out.splitlines()[0].startswith("BUCKET") and "medical" in out and "legal" in out
    metrics = world.client.get("/metrics", headers=world.headers("auditor")).text   # the last hour, per domain/model
    assert 'auditor_current_fer{domain="medical",model="fake-model",window="1h"} 1.0' in metrics
    assert 'auditor_current_block_rate{domain="medical",model="fake-model",window="1h"} 1.0' in metrics
    assert 'auditor_current_claims{domain="medical",model="fake-model",verdict="contradicted",window="1h"} 2.0' in metrics

    url, bodies, stop = webhook_server()
    try:
        rule = world.client.post("/v1/alerts/rules", headers=world.headers("admin"), json={
            "name": "medical FER", "expression": "fer > 0.2 over 1d for domain=medical", "webhook_url": url})
        assert rule.status_code == 201, rule.text
        status, out, _ = world.cli("alerts", "add", "any critical verdict", "--name", "critical", "--webhook", url)
        assert status == 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            alerts = world.get("/v1/alerts", "admin")["data"]   # rules over every tenant: admins' alone
            if len(alerts) == 2 and all(a["delivery"] == "delivered" for a in alerts):
                break
            time.sleep(0.2)
        assert sorted(a["details"]["metric"] for a in alerts) == ["critical", "fer"]
        assert all(a["delivery"] == "delivered" for a in alerts) and sum(a["attempts"] for a in alerts) == 3
        assert len(bodies) == 3 and {b["rule"]["name"] for b in bodies} == {"medical FER", "critical"}
        fer = next(a for a in alerts if a["details"]["metric"] == "fer")
        assert fer["value"] > 0.2 and fer["details"]["filters"] == {"domain": "medical"}
    finally:
        stop()
    with world.database.engine.connect() as conn:   # each alert fired is recorded, chained
        assert conn.execute(text("SELECT count(*) FROM trail_events WHERE kind = 'alert'")).scalar() == 2
    status, out, _ = world.cli("alerts", "list")
    assert status == 0 and out.count("delivered") == 2
    assert world.client.post("/v1/alerts/rules", headers=world.headers("admin"), json={
        "name": "x", "expression": "fer >> 2", "webhook_url": url}).status_code == 400


# -- (g) ---------------------------------------------------------------------------------------------------


def _drop_dose_rule(pack_dir: Path) -> None:
    """A rule-pack update: the medical pack without its dose rule, version bumped."""
    import yaml

    path = pack_dir / "medical.yaml"
    pack = yaml.safe_load(path.read_text())
    pack["version"] = "2026.12.99"
    pack["rules"] = [rule for rule in pack["rules"] if rule["id"] != "med.dose.max_daily"]
    path.write_text(yaml.safe_dump(pack, sort_keys=False))


def _wait(world: World, job_id: str) -> dict:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = world.get(f"/v1/reaudits/{job_id}")
        if job["status"] == "done":
            return job
        time.sleep(0.3)
    raise AssertionError(f"re-audit {job_id} did not finish: {job}")


def test_g_reaudit_after_a_rule_pack_update(world: World) -> None:
    before = world.get("/v1/rules")["active"]["medical"]
    _drop_dose_rule(world.pack_dir)
    deadline = time.monotonic() + 30   # the running server picks the edit up by itself (file watch)
    while world.get("/v1/rules")["active"]["medical"]["version"] != "2026.12.99":
        assert time.monotonic() < deadline, "the server kept the old pack"
        time.sleep(0.2)
    active = world.get("/v1/rules")["active"]["medical"]
    assert active["hash"] != before["hash"]
    stale = world.get("/v1/audits", domain="medical", stale=True)["data"]
    assert world.imported["metformin"] in {r["id"] for r in stale}   # judged under the old pack, until re-audited

    created = world.client.post("/v1/reaudits", headers=world.headers("auditor"),
                                json={"filter": {"domain": "medical", "endpoint": "import"}})
    assert created.status_code == 202, created.text
    job = created.json()
    assert job["rule_packs"]["medical"] == {"version": "2026.12.99", "hash": active["hash"]}   # named before it runs
    done = _wait(world, job["id"])
    summary = done["summary"]
    assert summary["rule_packs"]["medical"]["version"] == "2026.12.99"
    assert summary["evaluation_rule_packs"] == {active["hash"]: "2026.12.99"}
    assert summary["gate_action_changes"]["total"] == 0 and summary["gate_action_changes"]["no_gate"] == 4
    assert summary["fer_before"]["mean"] == 0.75 and summary["fer_after"]["mean"] in (0.0, None)
    current = world.get(f"/v1/audits/{world.imported['metformin']}")["current"]
    assert current["rule_pack"] == {"version": "2026.12.99", "hash": active["hash"], "active": True}
    assert current["n_contradicted"] == 0
    imported_contradicted = {r["id"] for r in world.get("/v1/audits", domain="medical", has_contradicted=True,
                                                        endpoint="import")["data"]}
    assert imported_contradicted == set()          # the dose rule is gone: no wrong dose is flagged any more
    assert [j["id"] for j in world.get("/v1/reaudits")["data"]] == [job["id"]]

    status, out, _ = world.cli("rules", "list", "--domain", "medical")
    assert status == 0 and "2026.12.99" in out and before["version"] in out and out.count("*") == 1
    status, out, err = world.cli("reaudit", "start", "--domain", "legal", "--json")
    assert status == 0, err
    finished = json.loads(out)                      # stdout is the JSON and nothing else
    assert finished["status"] == "done" and finished["summary"]["rule_packs"]["legal"]["hash"]
    assert finished["progress"]["rate_per_s"] > 0   # a finished job reports its run's rate, not 0.0
    assert "judging with" in err and "legal" in err
    status, out, _ = world.cli("reaudit", "list")
    assert status == 0 and out.splitlines()[0].startswith("ID") and finished["id"] in out and job["id"] in out
    # Rolling back is an activation like any other; the medical records judged under 2026.12.99 are stale again.
    status, out, _ = world.cli("rules", "activate", "medical", before["version"], "--reason", "roll back")
    assert status == 0 and before["version"] in out
    assert world.imported["metformin"] in {r["id"] for r in world.get("/v1/audits", domain="medical", stale=True)["data"]}
    assert world.cli("audit", "verify-chain")[0] == 0
