"""The hash-chained audit log on SQLite and PostgreSQL: appends, gap-free seqs, and tamper detection.

Each tamper is made directly in SQL, the way someone with database access would."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select, text

from auditor.store.database import ChainKey, Database
from auditor.trail import chain
from auditor.trail.ledgers import RECORDS, verify_trail
from auditor.trail.models import AuditRecord
from auditor.trail.records import NewRecord, append_record
from tests.auditor.conftest import TEST_CHAIN_KEY

KEY = TEST_CHAIN_KEY.hmac_key


def _with_interval(database: Database, interval: int) -> Database:
    """The same store, signing a checkpoint every `interval` records."""
    database._chain_key = ChainKey(KEY, interval)
    return database


def _append(database: Database, n: int, *, interval: int = 4, **fields: object) -> list[str]:
    ids = []
    for i in range(n):
        record = NewRecord(tenant="acme", status="completed", prompt=f"question {i}", output=f"answer {i}",
                           claims=[{"text": f"claim {i}", "verdict": "supported"}], fer=0.0,
                           timings={"e2e_s": 0.25 + i}, **fields)  # type: ignore[arg-type]
        ids.append(append_record(_with_interval(database, interval), record).id)
    return ids


def _verify(database: Database) -> chain.ChainReport:
    with database.engine.connect() as conn:
        return verify_trail(conn, KEY)


def test_intact_chain_verifies_with_checkpoints(database: Database) -> None:
    _append(database, 9)
    report = _verify(database)
    assert report.ok, report.problem
    assert (report.records_checked, report.checkpoints_checked, report.last_seq) == (9, 2, 9)


def test_appends_are_gap_free_and_outboxed_in_the_same_commit(database: Database) -> None:
    ids = _append(database, 3)
    with database.engine.connect() as conn:
        seqs = conn.execute(text("SELECT seq FROM audit_records ORDER BY seq")).scalars().all()
        outboxed = set(conn.execute(text("SELECT record_id FROM outbox")).scalars())
    assert seqs == [1, 2, 3]
    assert outboxed == set(ids)


def test_concurrent_writers_get_consecutive_seqs(database: Database) -> None:
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(lambda _: _append(database, 4), range(6)))
    with database.engine.connect() as conn:
        seqs = conn.execute(text("SELECT seq FROM audit_records ORDER BY seq")).scalars().all()
    assert seqs == list(range(1, 25))
    assert _verify(database).ok


def test_update_of_a_stored_field_is_named(database: Database) -> None:
    ids = _append(database, 6)
    with database.engine.begin() as conn:
        conn.execute(text("UPDATE audit_records SET fer = 0.5 WHERE seq = 3"))
    report = _verify(database)
    assert not report.ok
    assert (report.problem.kind, report.problem.seq, report.problem.record_id) == ("altered", 3, ids[2])


def test_edit_of_stored_text_is_named(database: Database) -> None:
    ids = _append(database, 3)
    with database.engine.begin() as conn:
        conn.execute(text("UPDATE audit_records SET output = 'a different answer' WHERE seq = 2"))
    report = _verify(database)
    assert (report.problem.kind, report.problem.record_id) == ("altered", ids[1])
    assert "output" in report.problem.detail


def test_deleted_row_is_named(database: Database) -> None:
    ids = _append(database, 6)
    with database.engine.begin() as conn:
        conn.execute(text("DELETE FROM outbox WHERE record_id = :id"), {"id": ids[3]})
        conn.execute(text("DELETE FROM audit_records WHERE seq = 4"))
    report = _verify(database)
    assert (report.problem.kind, report.problem.seq) == ("deleted", 4)
    assert ids[4] in report.problem.detail  # names the record after the gap


def test_deleted_last_row_is_named(database: Database) -> None:
    ids = _append(database, 3)
    with database.engine.begin() as conn:
        conn.execute(text("DELETE FROM outbox WHERE record_id = :id"), {"id": ids[2]})
        conn.execute(text("DELETE FROM audit_records WHERE seq = 3"))
    report = _verify(database)
    assert (report.problem.kind, report.problem.seq) == ("deleted", 3)


def test_two_rows_swapped_are_named(database: Database) -> None:
    ids = _append(database, 6)
    with database.engine.begin() as conn:  # swap seqs 2 and 3 through a free value (seq is unique)
        conn.execute(text("UPDATE audit_records SET seq = -1 WHERE seq = 2"))
        conn.execute(text("UPDATE audit_records SET seq = 2 WHERE seq = 3"))
        conn.execute(text("UPDATE audit_records SET seq = 3 WHERE seq = -1"))
    report = _verify(database)
    assert (report.problem.kind, report.problem.seq, report.problem.record_id) == ("reordered", 2, ids[2])


def test_rewritten_chain_is_caught_by_the_signed_checkpoint(database: Database) -> None:
    """Someone who recomputes every hash after an edit still cannot forge the HMAC checkpoint."""
    ids = _append(database, 4, interval=4)
    with database.engine.begin() as conn:
        rows = conn.execute(select(AuditRecord.__table__).order_by(AuditRecord.seq)).mappings().all()
        prev = chain.GENESIS_HASH
        for row in rows:
            values = dict(row)
            if values["seq"] == 2:
                values["fer"] = 0.9
            digest = RECORDS.digest(values)
            new_hash = chain.record_hash(values["seq"], prev, digest)
            conn.execute(text("UPDATE audit_records SET fer = :fer, prev_hash = :p, content_digest = :d, "
                              "record_hash = :h WHERE seq = :s"),
                         {"fer": values["fer"], "p": prev, "d": digest, "h": new_hash, "s": values["seq"]})
            prev = new_hash
        conn.execute(text("UPDATE chain_head SET record_hash = :h WHERE id = 1"), {"h": prev})
    report = _verify(database)
    assert (report.problem.kind, report.problem.seq, report.problem.record_id) == ("altered", 4, ids[3])
    assert "checkpoint" in report.problem.detail


def test_forged_checkpoint_signature_is_named(database: Database) -> None:
    _append(database, 4, interval=2)
    with database.engine.begin() as conn:
        conn.execute(text("UPDATE checkpoints SET signature = :s WHERE seq = 2"), {"s": "0" * 64})
    report = _verify(database)
    assert (report.problem.kind, report.problem.seq) == ("bad_checkpoint", 2)


def test_hash_only_mode_keeps_digests_but_no_text(database: Database) -> None:
    record = NewRecord(tenant="acme", status="completed", content_mode="hash", prompt="my secret", output="x")
    appended = append_record(database, record)
    with database.engine.connect() as conn:
        row = conn.execute(text("SELECT prompt, prompt_sha256 FROM audit_records WHERE id = :id"),
                           {"id": appended.id}).one()
    assert row.prompt is None and row.prompt_sha256 == chain.sha256_text("my secret")
    assert _verify(database).ok


@pytest.mark.parametrize("interval", [1, 3])
def test_checkpoint_interval(database: Database, interval: int) -> None:
    _append(database, 6, interval=interval)
    with database.engine.connect() as conn:
        seqs = conn.execute(text("SELECT seq FROM checkpoints ORDER BY seq")).scalars().all()
    assert seqs == list(range(interval, 7, interval))


def test_truncation_with_a_rewound_head_is_named(database: Database) -> None:
    """Deleting the newest records and rewinding the head to match still fails: the head is signed."""
    ids = _append(database, 3, interval=100)
    with database.engine.begin() as conn:
        prev_hash = conn.execute(text("SELECT record_hash FROM audit_records WHERE seq = 2")).scalar()
        conn.execute(text("DELETE FROM outbox WHERE record_id = :id"), {"id": ids[2]})
        conn.execute(text("DELETE FROM audit_records WHERE seq = 3"))
        conn.execute(text("UPDATE chain_head SET seq = 2, record_hash = :h WHERE id = 1"), {"h": prev_hash})
    report = _verify(database)
    assert (report.problem.kind, report.problem.seq) == ("bad_checkpoint", 2)
    assert "head" in report.problem.detail
