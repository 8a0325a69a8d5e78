"""The console in a real browser (Playwright driving Debian's Chromium) over the daily-task world: a live
service with imported answers of another model (a 5000 mg Metformin dose, Brown dated 1955, ...)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import login, screenshot

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra has it)").expect
VERIFY_BUNDLE = Path(__file__).resolve().parents[2] / "auditor" / "trail" / "verify_bundle.py"


def test_login_then_search_with_filters_and_paging(page: Any, live_world: Any) -> None:
    page.goto("/console/records")
    expect(page).to_have_url(re.compile(r"/console/login\?next="))   # no session: the login page first
    login(page, live_world.keys["auditor"])
    expect(page).to_have_url(re.compile(r"/console/records$"))
    expect(page.get_by_role("heading", name="Trail search")).to_be_visible()
    all_rows = page.locator("table.records tbody tr").count()
    # The walkthrough's search: contradicted medical answers of the last day.
    page.get_by_label("Domain", exact=True).select_option("medical")
    page.get_by_label("Has a contradicted claim").select_option("true")
    page.get_by_label("Produced since").fill("1d")
    page.get_by_role("button", name="Search").click()
    expect(page).to_have_url(re.compile(r"domain=medical"))
    rows = page.locator("table.records tbody tr")
    texts = rows.all_inner_texts()
    assert 0 < len(texts) < all_rows, texts
    assert all("medical" in text and "0 contradicted" not in text for text in texts), texts
    screenshot(page, "search")
    # Cursor paging: one per page, then the next page shows another record.
    page.get_by_label("Per page").fill("1")
    page.get_by_role("button", name="Search").click()
    first = rows.first.inner_text()
    page.get_by_role("link", name="Next page").click()
    expect(page).to_have_url(re.compile(r"cursor="))
    assert rows.count() == 1 and rows.first.inner_text() != first


def test_record_page_highlights_claims_by_verdict(page: Any, live_world: Any) -> None:
    login(page, live_world.keys["auditor"])
    page.goto(f"/console/records/{live_world.imported['metformin']}")
    contradicted = page.locator("#output mark.v-contradicted")
    expect(contradicted.first).to_be_visible()
    assert "5000 mg" in contradicted.first.inner_text()
    # The verdict is written beside the colour, and links to the claim's evidence row.
    label = page.locator("#output a.tag.v-contradicted").first
    expect(label).to_have_text(re.compile(r"\[\d+: contradicted\]"))
    label.click()
    row = page.locator("tr:target")
    expect(row).to_contain_text("contradicted")
    expect(row.locator("code").first).to_have_text(re.compile(r"^med\.dose\."))   # the rule id
    expect(page.get_by_role("heading", name="Who read this record")).to_be_visible()
    expect(page.locator("section", has=page.get_by_role("heading", name="Who read this record"))).to_contain_text(
        live_world.key_ids["auditor"])
    screenshot(page, "record")


def test_reviewer_disputes_a_verdict_from_the_queue(page: Any, live_world: Any) -> None:
    login(page, live_world.keys["reviewer"])
    expect(page).to_have_url(re.compile(r"/console/reviews$"))   # a reviewer's home is the queue
    screenshot(page, "review-queue")
    record_id = live_world.imported["lisinopril"]
    page.get_by_role("link", name=re.compile(record_id[:13])).click()
    decision = page.locator("select[name^=decision_]").first
    decision.select_option(index=2)   # the dispute option of the first claim
    page.locator("input[name^=note_]").first.fill("label allows this dose for resistant cases")
    page.get_by_role("button", name="Submit review").click()
    expect(page.get_by_role("status")).to_contain_text("review was recorded")
    history = page.locator("#reviews")
    expect(history).to_contain_text("disputed")
    expect(history).to_contain_text("label allows this dose")
    screenshot(page, "reviewed")
    response = live_world.client.get(f"/v1/audits/{record_id}", headers=live_world.headers("auditor"))
    assert response.json()["current"]["reviewed"] is True


def test_start_a_reaudit_and_watch_it_finish(page: Any, live_world: Any) -> None:
    login(page, live_world.keys["auditor"])
    page.goto("/console/reaudits")
    form = page.get_by_role("form", name="Start a re-audit")
    form.get_by_label("Domain", exact=True).select_option("legal")
    page.get_by_role("button", name="Start re-audit").click()
    expect(page).to_have_url(re.compile(r"/console/reaudits/[0-9a-f-]+$"))
    expect(page.locator("#job-status")).to_have_text("done", timeout=120_000)   # console.js polls, then reloads
    expect(page.get_by_role("heading", name="Before and after")).to_be_visible()
    screenshot(page, "reaudit")


def test_admin_places_and_releases_a_hold(page: Any, live_world: Any) -> None:
    login(page, live_world.keys["admin"])
    page.goto("/console/holds")
    form = page.get_by_role("form", name="Place a hold")
    form.get_by_label("Matter id").fill("MATTER-2026-7")
    form.get_by_label("Reason", exact=True).fill("litigation: dosing complaints")
    form.get_by_label("Record ids").fill(live_world.imported["metformin"])
    page.get_by_role("button", name="Place hold").click()
    expect(page.get_by_role("status")).to_contain_text("placed")
    row = page.locator("tr", has_text="MATTER-2026-7")
    expect(row).to_contain_text("active")
    screenshot(page, "holds")
    page.goto(f"/console/records/{live_world.imported['metformin']}")
    expect(page.locator("dl.facts").first).to_contain_text("MATTER-2026-7")
    page.goto("/console/holds")
    row.get_by_label("Reason").fill("matter closed")
    row.get_by_role("button", name=re.compile("Release hold")).click()
    expect(page.get_by_role("status")).to_contain_text("released")
    expect(row).to_contain_text("released")


def test_export_bundle_verifies_offline(page: Any, live_world: Any, tmp_path: Path) -> None:
    login(page, live_world.keys["auditor"])
    page.goto("/console/records?domain=medical")
    with page.expect_download() as download_info:
        page.get_by_role("link", name=re.compile("regulator bundle")).click()
    archive = tmp_path / "bundle.zip"
    download_info.value.save_as(archive)
    with zipfile.ZipFile(archive) as bundle:
        bundle.extractall(tmp_path / "bundle")
    folder = next(p.parent for p in (tmp_path / "bundle").rglob("manifest.json"))
    # The regulator's key comes from the service apart from the bundle (`auditor audits bundle-keys`).
    status, keys, err = live_world.cli("audits", "bundle-keys", "--json")
    assert status == 0, err
    check = [sys.executable, str(VERIFY_BUNDLE), str(folder), "--public-key", json.loads(keys)["ed25519_public_key"]]
    checked = subprocess.run(check, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # ...and a changed byte in it is caught.
    records = next(folder.rglob("records.jsonl"))
    records.write_text(records.read_text().replace("5000 mg", "500 mg", 1))
    tampered = subprocess.run(check, capture_output=True, text=True)
    assert tampered.returncode == 1


def test_chain_trends_and_keys_pages(page: Any, live_world: Any) -> None:
    login(page, live_world.keys["admin"])
    page.goto("/console/chain")
    page.get_by_role("button", name="Verify now").click()
    expect(page.locator(".result.ok")).to_contain_text("the trail verifies")
    records_ledger = page.locator("table").first.locator("tbody tr", has_text="records")
    expect(records_ledger).to_contain_text(re.compile(r"seq \d+"))           # its last signed checkpoint
    expect(records_ledger).to_contain_text("(full, up to seq")                 # ...and the verification just run
    screenshot(page, "chain")
    page.goto("/console/trends?bucket=hour&since=4d")
    expect(page.locator("figure.chart svg polyline").first).to_be_attached()
    expect(page.locator("figure.chart svg title").first).to_contain_text("per hour")
    screenshot(page, "trends")
    page.goto("/console/keys")
    form = page.get_by_role("form", name="Create a key")
    form.get_by_label("Tenant").fill("acme")
    form.get_by_label("Role").select_option("reviewer")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_label("New key")).to_have_value(re.compile(r"^aud_"))
    screenshot(page, "keys")


def test_keyboard_reaches_the_search(page: Any, live_world: Any) -> None:
    login(page, live_world.keys["auditor"])
    page.goto("/console/records")
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Claim text contains")).to_be_focused()
