"""Retention purges on SQLite and PostgreSQL: content goes, tombstones stay verifiable, holds exempt."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail import chain
from auditor.trail.access_log import CliOperator
from auditor.trail.holds import HoldIn, place_hold, release_hold
from auditor.trail.ledgers import verify_trail
from auditor.trail.records import NewRecord, append_record
from auditor.trail.retention import purge_expired
from tests.auditor.conftest import TEST_HMAC_KEY, make_settings

KEY = TEST_HMAC_KEY.encode()


def _add(database: Database, domain: str, tenant: str = "acme") -> str:
    record = NewRecord(tenant=tenant, status="completed", domain=domain, prompt=f"{domain} question",
                       output=f"{domain} answer", delivered_output=f"{domain} answer",
                       claims=[{"text": "c", "verdict": "supported"}])
    return append_record(database, record).id


def _verify(database: Database) -> chain.ChainReport:
    with database.engine.connect() as conn:
        return verify_trail(conn, KEY)


def test_purge_keeps_tombstones_verifiable_and_honours_holds(database: Database, database_url: str) -> None:
    settings = make_settings(database_url, retention_days={"medical": 30}, default_retention_days=None)
    medical, finance, held = _add(database, "medical"), _add(database, "finance"), _add(database, "medical", "hold-co")
    hold = place_hold(database, CliOperator(), HoldIn(matter_id="M-2026-17", reason="litigation 2026-17",
                                                      scope={"tenant": "hold-co"}))

    assert purge_expired(database, settings).purged_ids == []          # nothing is 30 days old yet
    later = utcnow() + timedelta(days=31)
    result = purge_expired(database, settings, now=later)
    assert result.purged_ids == [medical] and result.held_ids == [held] and result.holds == {held: [hold.id]}

    with database.engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(text("SELECT id, prompt, output, claims, prompt_sha256, purged_at "
                                                   "FROM audit_records"))}
        marker = conn.execute(text("SELECT kind, details FROM audit_records WHERE id = :i"),
                              {"i": result.purge_record_id}).one()
        purges = conn.execute(text("SELECT records_purged, records_held FROM purges")).one()
    assert rows[medical].prompt is None and rows[medical].claims is None and rows[medical].purged_at is not None
    assert rows[medical].prompt_sha256 == chain.sha256_text("medical question")   # tombstone keeps the digest
    assert rows[finance].prompt == "finance question" and rows[held].prompt == "medical question"
    assert marker.kind == "purge" and tuple(purges) == (1, 1)
    report = _verify(database)
    assert report.ok, report.problem

    release_hold(database, CliOperator(), hold.id, reason="matter closed")
    assert purge_expired(database, settings, now=later).purged_ids == [held]
    assert _verify(database).ok


def test_content_removed_outside_a_purge_is_named(database: Database) -> None:
    record_id = _add(database, "medical")
    with database.engine.begin() as conn:
        conn.execute(text("UPDATE audit_records SET prompt = NULL, output = NULL, purged_at = created_at"))
    report = _verify(database)
    assert (report.problem.kind, report.problem.record_id) == ("unauthorised_purge", record_id)
