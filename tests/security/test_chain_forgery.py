"""Finding 2 (and 10, 16): forging the trail directly in the store, as someone with database access.

Records are made through the API; the attacks are plain SQL; the verdict is `auditor audit verify-chain`'s
exit status. The attacker knows the digest algorithm (the code is open): `_rehash` reimplements it."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, create_engine, text

from tests.security.conftest import HMAC_KEY, chat

pytestmark = pytest.mark.timeout(120)

# The records ledger's digest covers these fields, sensitive text replaced by its SHA-256 (docs/security.md).
HASHED = ("id", "kind", "created_at", "tenant", "key_id", "request_id", "endpoint", "intent", "domain",
          "model_id", "checkpoint_hash", "sampling_params", "kg_version", "rule_pack_hash", "content_mode",
          "prompt_sha256", "output_sha256", "delivered_sha256", "claims_sha256", "prompt_tokens",
          "completion_tokens", "timings", "logprob_summary", "kg_events", "gate_decisions", "gate_action",
          "rule_ids", "n_supported", "n_contradicted", "n_unverifiable", "fer", "finish_reason", "status",
          "error", "details")
JSON_FIELDS = ("sampling_params", "timings", "logprob_summary", "kg_events", "gate_decisions", "details", "claims")


def _canonical(value: object) -> str:
    def default(v: object) -> str:
        assert isinstance(v, datetime)
        if v.tzinfo is not None:
            v = v.astimezone(UTC).replace(tzinfo=None)
        return v.isoformat(timespec="microseconds") + "Z"
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=default)


def _sha(text_: str) -> str:
    return hashlib.sha256(text_.encode()).hexdigest()


def _rows(engine: Engine) -> list[dict]:
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(text("SELECT * FROM audit_records ORDER BY seq")).mappings()]
    for row in rows:
        for name in JSON_FIELDS:
            if isinstance(row.get(name), str):
                row[name] = json.loads(row[name])
        if isinstance(row["created_at"], str):
            row["created_at"] = datetime.fromisoformat(row["created_at"])
    return rows


def _rehash(engine: Engine, rows: list[dict], from_seq: int) -> str:
    """Recompute prev_hash, content_digest and record_hash from `from_seq` on; returns the last hash."""
    prev = "0" * 64 if from_seq == 1 else next(r["record_hash"] for r in rows if r["seq"] == from_seq - 1)
    with engine.begin() as conn:
        for row in rows:
            if row["seq"] < from_seq:
                continue
            digest = _sha(_canonical({name: row.get(name) for name in HASHED}))
            record_hash = _sha(f"{row['seq']}:{prev}:{digest}")
            conn.execute(text("UPDATE audit_records SET prev_hash = :p, content_digest = :d, record_hash = :h, "
                              "fer = :fer WHERE id = :id"),
                         {"p": prev, "d": digest, "h": record_hash, "fer": row["fer"], "id": row["id"]})
            prev = record_hash
    return prev


def _store_with_records(app_on, store_url: str, n: int = 8) -> list[str]:
    """n records, each scored once by the embedded worker (waited for, so no scoring races the attack)."""
    client = app_on(store_url)
    ids = chat(client, n)
    engine = create_engine(store_url)
    try:
        _wait_for_evaluations(engine, n)
    finally:
        engine.dispose()
    return ids


def _delete_records(conn: Connection, where: str) -> None:
    """Delete records the way an attacker must: their outbox rows and evaluations first (foreign keys)."""
    ids = f"SELECT id FROM audit_records WHERE {where}"
    conn.execute(text(f"DELETE FROM outbox_inflight WHERE outbox_id IN (SELECT id FROM outbox WHERE record_id IN ({ids}))"))
    conn.execute(text(f"DELETE FROM outbox WHERE record_id IN ({ids})"))
    conn.execute(text(f"DELETE FROM evaluations WHERE record_id IN ({ids})"))
    conn.execute(text(f"DELETE FROM audit_records WHERE {where}"))


def _verify(cli, store_url: str, *extra: str) -> tuple[int, str]:
    status, out, err = cli(store_url, "audit", "verify-chain", *extra)
    return status, out + err


def _records_ledger_broken(cli, store_url: str) -> bool:
    """verify-chain exits 1 and the problem it names is in the records ledger (not a side effect elsewhere)."""
    status, out, _ = cli(store_url, "audit", "verify-chain", "--json")
    problem = json.loads(out)["problem"]
    return status == 1 and problem is not None and problem["ledger"] == "records"


def test_intact_trail_verifies(app_on, cli, store_url: str) -> None:
    _store_with_records(app_on, store_url)
    status, output = _verify(cli, store_url)
    assert status == 0, output


def test_deleting_the_newest_records_and_the_head_row_is_caught(app_on, cli, sql, store_url: str) -> None:
    _store_with_records(app_on, store_url)
    engine = sql(store_url)
    with engine.begin() as conn:
        _delete_records(conn, "seq > 6")
        conn.execute(text("DELETE FROM chain_head WHERE id = 1"))
    assert _records_ledger_broken(cli, store_url)


def test_truncation_with_an_unsigned_rewound_head_is_caught(app_on, cli, sql, store_url: str) -> None:
    _store_with_records(app_on, store_url)
    engine = sql(store_url)
    rows = _rows(engine)
    with engine.begin() as conn:
        _delete_records(conn, "seq > 6")
        conn.execute(text("UPDATE chain_head SET seq = 6, record_hash = :h, signature = NULL WHERE id = 1"),
                     {"h": rows[5]["record_hash"]})
    assert _records_ledger_broken(cli, store_url)


def test_truncation_that_also_deletes_the_checkpoints_is_caught(app_on, cli, sql, store_url: str) -> None:
    _store_with_records(app_on, store_url)
    engine = sql(store_url)
    rows = _rows(engine)
    with engine.begin() as conn:
        _delete_records(conn, "seq > 6")
        conn.execute(text("DELETE FROM checkpoints"))
        conn.execute(text("UPDATE chain_head SET seq = 6, record_hash = :h, signature = NULL WHERE id = 1"),
                     {"h": rows[5]["record_hash"]})
    assert _records_ledger_broken(cli, store_url)


def test_rewriting_after_the_last_checkpoint_and_rehashing_is_caught(app_on, cli, sql, store_url: str) -> None:
    _store_with_records(app_on, store_url)   # checkpoints at seq 3 and 6; the attack edits seq 7
    engine = sql(store_url)
    rows = _rows(engine)
    rows[6]["fer"] = 0.0 if rows[6]["fer"] else 1.0
    last_hash = _rehash(engine, rows, 7)
    with engine.begin() as conn:
        conn.execute(text("UPDATE chain_head SET record_hash = :h, signature = NULL WHERE id = 1"), {"h": last_hash})
    assert _records_ledger_broken(cli, store_url)


def test_deleting_a_record_and_renumbering_is_caught(app_on, cli, sql, store_url: str) -> None:
    _store_with_records(app_on, store_url)
    engine = sql(store_url)
    with engine.begin() as conn:
        _delete_records(conn, "seq = 4")
        for seq in range(5, 9):
            conn.execute(text("UPDATE audit_records SET seq = :new WHERE seq = :old"), {"new": seq - 1, "old": seq})
        conn.execute(text("DELETE FROM checkpoints"))
    rows = _rows(engine)
    last_hash = _rehash(engine, rows, 4)
    with engine.begin() as conn:
        conn.execute(text("UPDATE chain_head SET seq = 7, record_hash = :h, signature = NULL WHERE id = 1"),
                     {"h": last_hash})
    assert _records_ledger_broken(cli, store_url)


def _wait_for_evaluations(engine: Engine, count: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(text("SELECT count(*) FROM evaluations")).scalar() >= count:
                return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} evaluations after {timeout_s}s")


def test_finding_16_an_altered_evaluation_is_named(app_on, cli, sql, store_url: str) -> None:
    _store_with_records(app_on, store_url, n=2)
    engine = sql(store_url)
    _wait_for_evaluations(engine, 2)
    assert _verify(cli, store_url)[0] == 0
    with engine.begin() as conn:
        conn.execute(text("UPDATE evaluations SET fer = 0.0, claims = '[]'"))
    status, output = _verify(cli, store_url)
    assert status == 1 and "evaluation" in output, output


def test_finding_10_deleting_access_log_entries_is_caught(app_on, cli, sql, store_url: str) -> None:
    client = app_on(store_url)
    chat(client, 2)
    for _ in range(3):
        assert client.get("/v1/audits").status_code == 200
    engine = sql(store_url)
    assert _verify(cli, store_url)[0] == 0
    with engine.begin() as conn:
        first = conn.execute(text("SELECT min(id) FROM access_log")).scalar()
        conn.execute(text("DELETE FROM access_log WHERE id = :id"), {"id": first})
    status, output = _verify(cli, store_url)
    assert status == 1 and "access" in output, output


def _rechain(engine: Engine, ledger_name: str) -> None:
    """The key holder's move, with the project's own code: renumber a ledger's entries, recompute every hash,
    drop the checkpoints that no longer fit, re-sign the rest and the head. The store alone then verifies."""
    from sqlalchemy import select, update

    from auditor.trail.chain import GENESIS_HASH, record_hash, sign_checkpoint, sign_head
    from auditor.trail.ledgers import LEDGERS
    from auditor.trail.models import ChainHead, Checkpoint

    ledger = next(lg for lg in LEDGERS if lg.name == ledger_name)
    table, key = ledger.table, HMAC_KEY.encode()
    with engine.begin() as conn:
        rows = [dict(r) for r in conn.execute(select(table).order_by(table.c.seq)).mappings()]
        conn.execute(update(table).values(seq=-table.c.seq))   # free the unique seqs before renumbering
        prev, last_checkpoint = GENESIS_HASH, None
        conn.execute(Checkpoint.__table__.delete().where(Checkpoint.ledger == ledger.number))
        for seq, row in enumerate(rows, start=1):
            digest = ledger.digest(row)
            hash_ = record_hash(seq, prev, digest)
            conn.execute(update(table).where(table.c.id == row["id"]).values(
                seq=seq, prev_hash=prev, content_digest=digest, record_hash=hash_))
            if seq % 3 == 0:
                conn.execute(Checkpoint.__table__.insert().values(
                    ledger=ledger.number, seq=seq, record_hash=hash_, prev_seq=last_checkpoint or 0,
                    signature=sign_checkpoint(key, ledger.number, seq, hash_, last_checkpoint), created_at=datetime.now(UTC)))
                last_checkpoint = seq
            prev = hash_
        conn.execute(update(ChainHead).where(ChainHead.id == ledger.number).values(
            seq=len(rows), record_hash=prev, last_checkpoint_seq=last_checkpoint,
            signature=sign_head(key, ledger.number, len(rows), prev, last_checkpoint)))


def test_a_key_holder_rewriting_history_is_caught_by_the_witness(app_on, cli, sql, store_url: str,
                                                                 tmp_path: Path) -> None:
    witness = f"file:{tmp_path / 'witness' / 'auditor.jsonl'}"
    _store_with_records(app_on, store_url)
    assert cli(store_url, "audit", "witness", witness)[0] == 0
    engine = sql(store_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE audit_records SET fer = 0.0, n_contradicted = 0 WHERE seq = 2"))
    _rechain(engine, "records")
    assert _verify(cli, store_url)[0] == 0   # on the store alone, a re-signed rewrite verifies: the key's limit
    status, output = _verify(cli, store_url, "--witness", witness)
    assert status == 1 and "witness" in output, output


def test_a_key_holder_truncating_the_trail_is_caught_by_the_witness(app_on, cli, sql, store_url: str,
                                                                    tmp_path: Path) -> None:
    witness = f"file:{tmp_path / 'witness.jsonl'}"
    _store_with_records(app_on, store_url)
    assert cli(store_url, "audit", "witness", witness)[0] == 0
    engine = sql(store_url)
    with engine.begin() as conn:
        _delete_records(conn, "seq = 8")
    _rechain(engine, "records")
    _rechain(engine, "evaluations")
    assert _verify(cli, store_url)[0] == 0
    status, output = _verify(cli, store_url, "--witness", witness)
    assert status == 1 and "ends at seq 7" in output, output


def test_the_service_publishes_to_the_witness_by_itself(app_on, cli, store_url: str, tmp_path: Path) -> None:
    path = tmp_path / "witness.jsonl"
    client = app_on(store_url, chain_witness=f"file:{path}", witness_interval_s=0.05)
    chat(client, 4)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and '"seq": 4' not in (path.read_text() if path.exists() else ""):
        time.sleep(0.05)
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert any(e["ledger"] == "records" and e["kind"] == "head" and e["seq"] == 4 for e in entries)
    assert any(e["kind"] == "checkpoint" and e["seq"] == 3 for e in entries)
    status, output = _verify(cli, store_url, "--witness", f"file:{path}")
    assert status == 0, output
