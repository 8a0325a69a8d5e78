"""Incremental verify-chain: from the last verified signed checkpoint, so a daily check stays seconds at millions
of records; what it leaves to the full verify, and why a forged starting point does not help an attacker."""

from __future__ import annotations

from sqlalchemy import text

from auditor.store.database import Database
from auditor.trail.verification import verify_store
from tests.auditor.conftest import TEST_CHAIN_KEY
from tests.auditor.scoring_doubles import append_output

KEY = TEST_CHAIN_KEY.hmac_key   # checkpoint every 5 entries


def _append(database: Database, n: int) -> list[str]:
    return [append_output(database, f"Statement {i}.") for i in range(n)]


def test_incremental_walks_only_what_came_after_the_last_verified_checkpoint(database: Database) -> None:
    _append(database, 12)
    first = verify_store(database, hmac_key=KEY, mode="incremental")
    assert first.ok and first.extra["full_walk_because"]["records"] == "never verified before"
    assert first.ledgers["records"]["entries_checked"] == 12
    _append(database, 4)
    second = verify_store(database, hmac_key=KEY, mode="incremental")
    assert second.ok and second.extra["started_after"]["records"] == 10   # the last checkpoint the walk passed
    assert second.ledgers["records"]["entries_checked"] == 6


def test_a_tampered_new_record_is_caught_and_an_old_one_is_left_to_the_full_verify(database: Database) -> None:
    ids = _append(database, 12)
    assert verify_store(database, hmac_key=KEY, mode="full").ok
    new = _append(database, 3)
    with database.engine.begin() as conn:
        conn.execute(text("UPDATE audit_records SET tenant = 'evil' WHERE id = :i"), {"i": new[1]})
    report = verify_store(database, hmac_key=KEY, mode="incremental")
    assert not report.ok and report.problem.record_id == new[1]
    with database.engine.begin() as conn:   # undo; now tamper before the remembered checkpoint instead
        conn.execute(text("UPDATE audit_records SET tenant = 'acme' WHERE id = :i"), {"i": new[1]})
        conn.execute(text("UPDATE audit_records SET tenant = 'evil' WHERE id = :i"), {"i": ids[2]})
    assert verify_store(database, hmac_key=KEY, mode="incremental").ok    # documented: incremental skips it
    full = verify_store(database, hmac_key=KEY, mode="full")
    assert not full.ok and full.problem.record_id == ids[2]


def test_a_forged_starting_point_makes_it_walk_from_genesis(database: Database) -> None:
    _append(database, 12)
    assert verify_store(database, hmac_key=KEY, mode="full").ok      # remembers the checkpoint at seq 10
    new = _append(database, 6)                                       # seqs 13-18, a checkpoint at 15
    with database.engine.begin() as conn:
        conn.execute(text("UPDATE audit_records SET tenant = 'evil' WHERE id = :i"), {"i": new[0]})
        # Move the remembered point past the forgery, without the key: its signature no longer verifies.
        conn.execute(text("UPDATE chain_verifications SET seq = 15, record_hash = "
                          "(SELECT record_hash FROM audit_records WHERE seq = 15) WHERE ledger = 1"))
    report = verify_store(database, hmac_key=KEY, mode="incremental")
    assert report.extra["full_walk_because"]["records"] == "the remembered verification is not signed by this key"
    assert not report.ok and report.problem.record_id == new[0]
