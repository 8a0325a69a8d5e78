"""The bulk seeder of the scale benchmark: a topped-up trail keeps growing forward in time, so seq order stays
time order (the benchmark's lists, windows and the incremental verify's "new records" depend on it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from auditor.store.database import Database
from auditor.trail.models import AuditRecord
from auditor.trail.verification import verify_store
from benchmarks.trail_seed import Answer, topup_seeder
from tests.auditor.conftest import TEST_CHAIN_KEY

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _answer(domain: str, text: str, verdict: str) -> Answer:
    claims = [{"text": text, "kind": "fact", "verdict": verdict, "confidence": 0.9}]
    return Answer(domain, f"Tell me about {domain}.", text, claims, 1.0 if verdict == "contradicted" else 0.0,
                  0.8, 0.7, "allow", [], "kg-test", "sha256:pack", "rules-test/1")


POOL = [_answer("medical", "Ibuprofen is an NSAID.", "supported"),
        _answer("legal", "A contract needs an offer and an acceptance.", "supported"),
        _answer("finance", "A bond pays coupons.", "contradicted")]


def _stamps(database: Database) -> list[datetime]:
    with database.engine.connect() as conn:
        rows = conn.execute(select(AuditRecord.created_at).order_by(AuditRecord.seq)).scalars().all()
    return [r.replace(tzinfo=UTC) if r.tzinfo is None else r for r in rows]


def test_a_top_up_follows_the_newest_record_and_ends_about_now(database: Database) -> None:
    topup_seeder(database, POOL, 30, seed=1, batch=7, now=NOW).seed(30)
    history = _stamps(database)
    assert len(history) == 30
    assert NOW - timedelta(days=91) < history[0] and history[-1] < NOW + timedelta(days=45)   # 90 days, jittered

    later = history[-1] + timedelta(hours=2)
    topup_seeder(database, POOL, 20, seed=2, batch=7, now=later).seed(20)
    grown = _stamps(database)
    new = grown[30:]
    assert len(new) == 20
    assert min(new) > history[-1]   # not back at the start of the 90 days
    assert max(new) < history[-1] + timedelta(hours=3)   # two hours of growth, jittered
    assert grown == sorted(grown)   # seq order is time order
    assert verify_store(database, hmac_key=TEST_CHAIN_KEY.hmac_key, mode="full").ok   # through the real chain


def test_the_export_measurement_times_the_first_record_line_not_just_the_header(database: Database) -> None:
    from benchmarks.trail_scale import measure_export

    topup_seeder(database, POOL, 12, seed=3, batch=5, now=NOW).seed(12)
    result = measure_export(database, lines=1000)
    assert result["lines"] == 12   # every record line, the header not counted
    assert 0 < result["first_byte_s"] <= result["first_record_s"]
