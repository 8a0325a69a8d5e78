"""Group commit on SQLite and PostgreSQL: writes ready together share one transaction, each caller hears
only after its commit, the chain stays whole and in order, one bad write does not sink its group, and a
store that is down fails every waiting write at once instead of one timeout after another."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.exc import IntegrityError, OperationalError

from auditor.store.database import Database
from auditor.trail.group_commit import GroupCommitter
from auditor.trail.ledgers import verify_trail
from auditor.trail.models import AuditRecord
from auditor.trail.records import NewRecord, append_in_transaction
from tests.auditor.conftest import TEST_CHAIN_KEY


def _record(i: int) -> NewRecord:
    return NewRecord(tenant="acme", status="completed", prompt=f"question {i}", output=f"answer {i}")


def _append(database: Database, record: NewRecord):
    return lambda conn: append_in_transaction(conn, record, key=database.chain_key)


def _slow_commits(database: Database, seconds: float) -> None:
    """Each commit takes a while (as an fsync under load does), so writes pile up behind it."""
    @event.listens_for(database.engine, "commit")
    def slow(_conn) -> None:
        time.sleep(seconds)


def test_concurrent_writes_share_commits_and_the_chain_verifies(database: Database) -> None:
    _slow_commits(database, 0.05)
    committer = GroupCommitter(database, timeout_s=10)

    async def main():
        return await asyncio.gather(*(committer.write(_append(database, _record(i))) for i in range(24)))

    appended = asyncio.run(main())
    committer.stop()
    assert sorted(a.seq for a in appended) == list(range(1, 25))
    assert committer.writes == 24 and committer.commits < 24   # grouped
    with database.engine.connect() as conn:
        assert verify_trail(conn, TEST_CHAIN_KEY.hmac_key).ok
        stored = conn.execute(select(AuditRecord.id, AuditRecord.seq)).all()
    assert {row.id: row.seq for row in stored} == {a.id: a.seq for a in appended}


def test_one_bad_write_fails_alone(database: Database) -> None:
    _slow_commits(database, 0.05)
    committer = GroupCommitter(database, timeout_s=10)

    def bad(conn):
        raise IntegrityError("INSERT", {}, Exception("a write that cannot succeed"))

    async def main():
        writes = [committer.write(_append(database, _record(i))) for i in range(1, 6)]
        writes.insert(2, committer.write(bad))
        return await asyncio.gather(*writes, return_exceptions=True)

    results = asyncio.run(main())
    committer.stop()
    assert isinstance(results[2], IntegrityError)
    assert sum(1 for r in results if not isinstance(r, BaseException)) == 5
    with database.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM audit_records")).scalar() == 5
        assert verify_trail(conn, TEST_CHAIN_KEY.hmac_key).ok


def test_a_store_that_is_down_fails_the_whole_group_at_once(database: Database) -> None:
    committer = GroupCommitter(database, timeout_s=2)
    calls = []

    def fail(conn, cursor, statement, parameters, context, executemany):
        calls.append(statement)
        if statement.lstrip().upper().startswith("INSERT INTO AUDIT_RECORDS"):
            time.sleep(0.3)
            raise OperationalError(statement, parameters, Exception("database is unavailable"))

    event.listen(database.engine, "before_cursor_execute", fail)

    async def main():
        started = time.monotonic()
        results = await asyncio.gather(*(committer.write(_append(database, _record(i))) for i in range(8)),
                                       return_exceptions=True)
        return results, time.monotonic() - started

    results, seconds = asyncio.run(main())
    event.remove(database.engine, "before_cursor_execute", fail)
    committer.stop()
    assert all(isinstance(r, OperationalError | TimeoutError) for r in results)
    assert seconds < 2 * 2 + 1   # not one store timeout per write
    with database.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM audit_records")).scalar() == 0


def test_a_cancelled_caller_does_not_withdraw_its_write(database: Database) -> None:
    _slow_commits(database, 0.2)
    committer = GroupCommitter(database, timeout_s=10)

    async def main():
        task = asyncio.create_task(committer.write(_append(database, _record(1))))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await committer.write(_append(database, _record(2)))   # queued behind it: it has committed by now

    asyncio.run(main())
    committer.stop()
    with database.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM audit_records")).scalar() == 2


def test_record_appends_ready_together_share_one_head_update_and_keep_their_order(database: Database) -> None:
    from auditor.trail.models import StreamSegment
    from auditor.trail.segments import ChainedRecordWrite, StreamOpening, insert_opening, insert_segment

    _slow_commits(database, 0.05)
    committer = GroupCommitter(database, timeout_s=10)
    records = [_record(i) for i in range(12)]
    head_updates = []

    @event.listens_for(database.engine, "before_cursor_execute")
    def count(_conn, _cursor, statement, *_args) -> None:
        if statement.lstrip().upper().startswith("UPDATE CHAIN_HEAD "):
            head_updates.append(statement)

    async def main():
        for record in records:   # each request's stream had segments before its record
            opening = StreamOpening(record.id, "acme", "raw", {})
            await committer.write(lambda conn, o=opening: (insert_opening(conn, o), insert_segment(conn, o, 1, "x")))
        head_updates.clear()
        return await asyncio.gather(*(committer.write(ChainedRecordWrite(r, database.chain_key)) for r in records))

    appended = asyncio.run(main())
    committer.stop()
    assert [a.id for a in appended] == [r.id for r in records]          # each caller gets its own record back
    assert sorted(a.seq for a in appended) == [a.seq for a in appended]  # chained in arrival order
    assert 0 < len(head_updates) < len(records)                           # grouped appends share a head update
    with database.engine.connect() as conn:
        assert verify_trail(conn, TEST_CHAIN_KEY.hmac_key).ok
        assert conn.execute(select(StreamSegment.audit_id)).first() is None   # the records cover the segments


def test_a_combined_write_mixed_with_plain_ones_answers_each_in_place(database: Database) -> None:
    from auditor.trail.group_commit import _run_writes

    calls = []

    class Batchable:
        def __init__(self, n):
            self.n = n

        def __call__(self, conn):
            raise AssertionError("run together, not alone")

        @staticmethod
        def combine(conn, writes):
            calls.append([w.n for w in writes])
            return [w.n * 10 for w in writes]

    with database.write_connection() as conn:
        results = _run_writes(conn, [Batchable(1), lambda c: "a", Batchable(2), lambda c: "b", Batchable(3)])
    assert results == [10, "a", 20, "b", 30] and calls == [[1, 2, 3]]
