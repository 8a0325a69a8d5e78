"""The current-verdict view on SQLite and PostgreSQL: which verdict set is current, imports' own time, purges,
and that the view written incrementally is exactly what a rebuild from the chained rows gives."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, text

from auditor.jobs import scoring
from auditor.packs import registry
from auditor.store.database import Database
from auditor.trail import verdicts
from auditor.trail.access_log import CliOperator
from auditor.trail.ledgers import verify_trail
from auditor.trail.models import RecordVerdict
from auditor.trail.records import NewRecord, append_record
from auditor.trail.schemas import AuditFilters, RecordFilter, parse_moment
from rules import load_pack
from tests.auditor.conftest import TEST_CHAIN_KEY
from tests.auditor.scoring_doubles import MarkerEvaluator, append_output


class PackedMarker(MarkerEvaluator):
    """The marker evaluator, naming a rule-pack hash of the test's choosing (an up-to-date or a stale worker)."""

    def __init__(self, version: str, pack_hash: str) -> None:
        super().__init__(version)
        self.pack_hash = pack_hash

    def evaluate(self, **kwargs):  # type: ignore[no-untyped-def]
        scored = super().evaluate(**kwargs)
        return dataclasses.replace(scored, rule_pack_hash=self.pack_hash)


def _view(database: Database, record_id: str) -> RecordVerdict:
    with database.session() as session:
        return session.get(RecordVerdict, record_id)


def _activate_bundled_finance(database: Database) -> str:
    pack = load_pack("finance")
    with database.write_connection() as conn:
        registry.register(conn, pack, source="test", actor=CliOperator(), key=database.chain_key, activate=True)
    return pack.hash


def test_a_stale_worker_cannot_flip_verdicts_back(database: Database) -> None:
    active = _activate_bundled_finance(database)
    record = append_output(database, "[false] Rates rose in 2022.")
    current = scoring.score_record(database, PackedMarker("marker/new", active), scoring.ScoreRequest(record))
    assert _view(database, record).evaluation_id == current.evaluation_id
    # A worker still on the old pack scores the same record later (another version: a new evaluation row).
    stale = scoring.score_record(database, PackedMarker("marker/old", "old-pack-hash"), scoring.ScoreRequest(record))
    assert stale.created and _view(database, record).evaluation_id == current.evaluation_id
    # Among packs that are not the active one, the latest wins: here the active-pack evaluation stays current.
    assert _view(database, record).rule_pack_hash == active


def test_without_an_active_pack_the_latest_evaluation_is_current(database: Database) -> None:
    record = append_output(database, "Gold is a metal.", claims=[{"text": "Gold is a metal.", "verdict": "unverifiable"}])
    assert _view(database, record).source == "inline" and "gold is a metal" in _view(database, record).search_text
    first = scoring.score_record(database, PackedMarker("m/1", "p1"), scoring.ScoreRequest(record))
    second = scoring.score_record(database, PackedMarker("m/2", "p2"), scoring.ScoreRequest(record))
    assert (first.created, second.created) == (True, True)
    view = _view(database, record)
    assert (view.source, view.evaluation_id, view.n_supported) == ("evaluation", second.evaluation_id, 1)


def test_imports_are_listed_by_their_own_time_and_never_had_a_gate(database: Database) -> None:
    produced = datetime(2026, 6, 1, 9, 30, tzinfo=UTC)
    imported = append_record(database, NewRecord(
        tenant="acme", status="completed", endpoint="import", domain="finance", model_id="other",
        output="x", details={"timestamp": produced.isoformat()})).id
    live = append_output(database, "Live statement.")
    view = _view(database, imported)
    assert verdicts.aware(view.occurred_at) == produced and view.gate_action is None and view.source == "none"
    assert verdicts.aware(_view(database, live).occurred_at) == verdicts.aware(_view(database, live).recorded_at)
    with database.session() as session:
        from auditor.trail.queries import list_records

        june, _ = list_records(session, AuditFilters(since=produced - timedelta(days=1), until=produced + timedelta(days=1)),
                               tenant_scope=None)
        recent, _ = list_records(session, AuditFilters(since=parse_moment("1d")), tenant_scope=None)
    assert [s.record.id for s in june] == [imported] and [s.record.id for s in recent] == [live]


def test_the_incremental_view_equals_a_rebuild_from_the_chain(database: Database) -> None:
    active = _activate_bundled_finance(database)
    records = [append_output(database, f"Statement {i}." + (" [false] Wrong." if i % 2 else ""),
                             claims=[{"text": f"Statement {i}.", "verdict": "supported", "confidence": 0.3}])
               for i in range(6)]
    for index, record in enumerate(records[:4]):
        scoring.score_record(database, PackedMarker("m/1", active if index % 2 else "other"), scoring.ScoreRequest(record))
    scoring.score_record(database, PackedMarker("m/0", "older"), scoring.ScoreRequest(records[1]))
    with database.write_connection() as conn:
        verdicts.mark_reviewed(conn, records[0], reviewed_ref="inline", disputed=1)
    columns = list(RecordVerdict.__table__.columns)

    def snapshot() -> dict[str, tuple]:
        with database.engine.connect() as conn:
            return {row[0]: tuple(row) for row in conn.execute(select(*columns))}

    before = snapshot()
    with database.write_connection() as conn:
        assert verdicts.rebuild(conn, active_packs=registry.active_hashes(conn), batch=4) == 6
    assert snapshot() == before


def test_purge_drops_the_views_claim_text_and_review_notes(database: Database, database_url: str) -> None:
    from auditor.trail.retention import purge_expired
    from auditor.trail.reviews import ClaimReview, ReviewIn, submit_review
    from tests.auditor.conftest import make_settings

    record = append_output(database, "[false] Rates rose in 2022.", domain="medical")
    scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record))
    submit_review(database, CliOperator(), record, ReviewIn(claims=[ClaimReview(
        claim_index=0, decision="false_positive", note="the patient's own numbers")]))
    assert "rates rose" in _view(database, record).search_text
    result = purge_expired(database, make_settings(database_url, retention_days={"medical": 0}),
                           now=datetime.now(UTC) + timedelta(days=1))
    assert result.purged_ids == [record]
    assert _view(database, record).search_text is None
    with database.engine.connect() as conn:
        note = conn.execute(text("SELECT note, note_sha256, purged_at FROM trail_events WHERE kind = 'review'")).one()
        assert note.note is None and note.note_sha256 and note.purged_at is not None
        assert verify_trail(conn, TEST_CHAIN_KEY.hmac_key).ok
    # A note removed without a purge is named.
    other = append_output(database, "[false] Another.", domain="finance")
    scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(other))
    submit_review(database, CliOperator(), other, ReviewIn(claims=[ClaimReview(claim_index=0, decision="confirm", note="n")]))
    with database.engine.begin() as conn:
        conn.execute(text("UPDATE trail_events SET note = NULL WHERE record_id = :r"), {"r": other})
    with database.engine.connect() as conn:
        report = verify_trail(conn, TEST_CHAIN_KEY.hmac_key)
    assert (report.problem.kind, report.problem.ledger) == ("altered", "events")


def test_relative_times_are_spans_back_from_now() -> None:
    now = datetime.now(UTC)
    for span, delta in (("1d", timedelta(days=1)), ("12h", timedelta(hours=12)), ("30m", timedelta(minutes=30)),
                        ("2w", timedelta(weeks=2)), (" 45s ", timedelta(seconds=45))):
        moment = RecordFilter(since=span).since
        assert abs((now - delta) - moment) < timedelta(seconds=5), span
    assert RecordFilter(since="2026-11-01").since == datetime(2026, 11, 1, tzinfo=UTC)
    for bad in ("1y", "-1d", "d", "1.5h"):
        try:
            RecordFilter(since=bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
