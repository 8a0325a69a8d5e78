"""Upgrading a store written before revision 0005 (the compliance workflow): its records get their current-verdict rows (inline verdicts,
then their evaluations), its access-log entries their read-index rows, and the trail still verifies although
its JSON was stored in the old, non-canonical form (verification falls back to parsing it)."""

from __future__ import annotations

import json

from sqlalchemy import create_engine, insert, select, text

from auditor.store.base import new_id, utcnow
from auditor.store.database import Database
from auditor.trail.chain import chain_entries
from auditor.trail.ledgers import ACCESS, EVALUATIONS, RECORDS, verify_trail
from auditor.trail.models import AccessLogEntry, AuditRecord, Evaluation, RecordVerdict
from tests.auditor.conftest import TEST_CHAIN_KEY


def _old_store(database: Database) -> tuple[list[str], str]:
    """Records, an evaluation and an access-log entry as 0.3 wrote them (JSON with spaces, keys unsorted)."""
    database.upgrade("0003", hmac_key=TEST_CHAIN_KEY.hmac_key)
    engine = create_engine(database.url, json_serializer=lambda value: json.dumps(value, ensure_ascii=False))
    key = TEST_CHAIN_KEY
    ids = []
    with engine.begin() as conn:
        for i in range(3):
            values = {"id": new_id(), "kind": "record", "created_at": utcnow(), "tenant": "acme", "status": "completed",
                      "domain": "finance", "endpoint": "import" if i == 2 else "chat", "content_mode": "raw",
                      "output": f"Statement {i}.", "claims": [{"verdict": "supported", "text": f"Statement {i}."}] + (
                          # a claim citing a reference no index held: revision 0008 counts it as a fabrication
                          [{"verdict": "unverifiable", "text": "Doe v. Roe, 999 U.S. 1",
                            "evidence": [{"kind": "possible_fabrication", "description": "possible fabrication"}]}]
                          if i == 1 else []),
                      "gate_decisions": [{"stage": "output", "rule_id": "r", "action": "allow", "reason": "ok"}],
                      "n_supported": 1, "n_contradicted": 0, "n_unverifiable": 0, "fer": 0.0, "gate_action": "allow",
                      "details": {"timestamp": "2026-06-01T09:00:00+00:00"} if i == 2 else None}
            RECORDS.fill_sensitive_digests(values)
            chain_entries(conn, RECORDS, [values], hmac_key=key.hmac_key, checkpoint_interval=key.checkpoint_interval)
            conn.execute(insert(AuditRecord), values)
            ids.append(values["id"])
        evaluation = {"id": new_id(), "record_id": ids[0], "job_id": None, "evaluator_version": "v1",
                      "status": "done", "claims": [{"verdict": "contradicted", "text": "Statement 0."}], "fer": 1.0,
                      "created_at": utcnow()}
        chain_entries(conn, EVALUATIONS, [evaluation], hmac_key=key.hmac_key, checkpoint_interval=key.checkpoint_interval)
        conn.execute(insert(Evaluation), evaluation)
        entry = {"at": utcnow(), "key_id": "k", "tenant": "acme", "role": "auditor", "action": "list",
                 "filters": {"domain": "finance", "b": 1}, "result_count": 3, "record_ids": ids}
        chain_entries(conn, ACCESS, [entry], hmac_key=key.hmac_key, checkpoint_interval=key.checkpoint_interval)
        conn.execute(insert(AccessLogEntry), entry)
        assert conn.execute(text("SELECT filters FROM access_log")).scalar() in ('{"domain": "finance", "b": 1}',
                                                                                 {"domain": "finance", "b": 1})
    engine.dispose()
    return ids, evaluation["id"]


def test_upgrade_derives_the_view_and_the_read_index(database_url: str) -> None:
    database = Database(database_url, chain_key=TEST_CHAIN_KEY)
    ids, evaluation_id = _old_store(database)
    database.upgrade(hmac_key=TEST_CHAIN_KEY.hmac_key)
    with database.engine.connect() as conn:
        views = {row.record_id: row for row in conn.execute(select(RecordVerdict.__table__))}
        reads = conn.execute(text("SELECT record_id FROM access_reads ORDER BY record_id")).scalars().all()
        report = verify_trail(conn, TEST_CHAIN_KEY.hmac_key)
    assert set(views) == set(ids)
    assert (views[ids[0]].source, views[ids[0]].evaluation_id, views[ids[0]].n_contradicted) == ("evaluation", evaluation_id, 1)
    assert (views[ids[1]].source, views[ids[1]].n_supported, views[ids[1]].gate_action) == ("inline", 1, "allow")
    assert views[ids[2]].source == "none" and views[ids[2]].occurred_at.isoformat().startswith("2026-06-01")
    assert [views[i].n_fabrication for i in ids] == [0, 1, 0]   # filled by 0008 from the current claims
    assert sorted(reads) == sorted(ids)
    assert report.ok, report.problem   # old, non-canonical JSON text verifies through the parsing fallback
    database.dispose()
