"""`auditor demo`: the real service on the embedded defaults, requests through HTTP, records in the store.

The slow test runs the finance part of the quick script and the four scenes (on the finance and medical KGs)
against the bundled model, then checks what it printed against the records, evaluations and re-audit jobs it
left in the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from auditor.cli import main
from auditor.demo import SCRIPT, scripted_requests
from auditor.jobs.models import ReauditItem, ReauditJob
from auditor.store.database import Database
from auditor.trail.models import AuditRecord, Evaluation

BUNDLED = Path(__file__).resolve().parent.parent / "auditor" / "bundled_model"


def test_quick_script_has_one_request_per_domain() -> None:
    quick = scripted_requests(quick=True)
    assert sorted(r.domain for r in quick) == ["finance", "legal", "medical"]
    assert len(scripted_requests(quick=False)) == len(SCRIPT) > len(quick)
    assert {r.domain for r in scripted_requests(quick=False, domains=["legal"])} == {"legal"}
    assert all(r.intent for r in SCRIPT)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_demo_shows_what_the_product_catches_and_the_trail_holds_it(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """One run of the demo (the finance part of the quick script; the scenes load finance and medical). What it
    printed is checked against the records it left: a constraint-prevented entity, a blocked answer, a re-audit
    that changed verdicts and a tampered copy that verification rejects, each found in the store, not in the text."""
    if not (BUNDLED / "model.safetensors").is_file():
        pytest.skip("the bundled demo model has not been trained yet (python -m scripts.train_demo_model)")
    assert main(["demo", "--quick", "--domains", "finance", "--dir", str(tmp_path), "--max-tokens", "96"]) == 0
    out = capsys.readouterr().out
    database = Database(f"sqlite:///{(tmp_path / 'audit.db').resolve()}")
    try:
        with database.session() as session:
            records = session.scalars(select(AuditRecord).order_by(AuditRecord.seq)).all()
            _assert_constraint_prevented_an_entity(records, out)
            blocked = _assert_an_answer_was_blocked(records, out)
            _assert_a_reaudit_changed_verdicts(session, out)
        _assert_the_tampered_copy_is_caught(tmp_path, blocked, database, out)
    finally:
        database.dispose()

    env = {**os.environ, "AUDITOR_DATABASE_URL": f"sqlite:///{(tmp_path / 'audit.db').resolve()}"}
    shown = subprocess.run([sys.executable, "-m", "auditor.cli", "audits", "show", blocked.id],
                           capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert blocked.id in shown.stdout
    assert "/console" in out and "auditor serve" in out


def _assert_constraint_prevented_an_entity(records: list[AuditRecord], out: str) -> None:
    """A chat record whose KG events say the constraint blocked an entity outside the prompt's allowed set,
    the entity is absent from what the model then said, and the demo printed that record."""
    from auditor.serving.runtime import KgKnowledge
    from knowledge_graphs import load_kg
    from knowledge_graphs.linking import get_linker

    found = []
    for record in records:
        blocked = [e for e in record.kg_events or [] if e.get("kind") == "blocked"]
        if record.endpoint != "chat" or not blocked:
            continue
        kg = load_kg(record.domain)
        linker = get_linker(kg)
        question = json.loads(record.prompt)[-1]["content"]
        allowed = set(KgKnowledge({record.domain: kg}).constraint_for(record.domain, question).allowed_entity_ids)
        named = {i for m in linker.link(record.output or "") for i in m.candidate_ids}
        prevented = {i for e in blocked for i in e["data"]["blocked_entity_ids"]} - allowed - named
        if prevented:
            found.append((record, prevented))
    assert found, "no record shows the KG constraint blocking an entity outside the allowed set"
    record, prevented = found[0]
    assert record.id in out and any(entity_id in out for entity_id in prevented)


def _assert_an_answer_was_blocked(records: list[AuditRecord], out: str) -> AuditRecord:
    blocked = [r for r in records if r.gate_action == "block" and r.n_contradicted > 0
               and any(d.get("stage") == "output" and d.get("action") == "block" for d in r.gate_decisions or [])]
    assert blocked, "no record of an answer the output gate blocked for a contradicted claim"
    record = next((r for r in blocked if r.id in out), None)
    assert record is not None, "the demo did not print the blocked record"
    assert record.delivered_output != record.output     # the client did not get the wrong answer
    return record


def _assert_a_reaudit_changed_verdicts(session: Any, out: str) -> None:
    """A finished re-audit job of imported records whose evaluation after differs from the one before (the
    contradicted count), under a different KG version."""
    jobs = session.scalars(select(ReauditJob).where(ReauditJob.import_id.is_not(None))).all()
    assert jobs and all(job.finished_at is not None for job in jobs)
    changed = []
    for job in jobs:
        for item in session.scalars(select(ReauditItem).where(ReauditItem.job_id == job.id)):
            before = session.get(Evaluation, item.before_evaluation_id)
            after = session.get(Evaluation, item.evaluation_id)
            assert before is not None and after is not None     # the import was scored before the re-audit
            contradicted = [sum(c.get("verdict") == "contradicted" for c in e.claims or []) for e in (before, after)]
            if contradicted[0] != contradicted[1]:
                assert before.kg_version != after.kg_version
                changed.append(item.record_id)
    assert changed, "the re-audit changed no imported record's verdicts"
    assert jobs[0].id in out


def _assert_the_tampered_copy_is_caught(tmp_path: Path, blocked: AuditRecord, database: Database, out: str) -> None:
    from auditor.settings import DEVELOPMENT_HMAC_KEY
    from auditor.trail.verification import verify_store

    copy = Database(f"sqlite:///{(tmp_path / 'audit-tampered.db').resolve()}")
    try:
        report = verify_store(copy, hmac_key=DEVELOPMENT_HMAC_KEY.encode())
    finally:
        copy.dispose()
    assert not report.ok and report.problem is not None
    assert report.problem.kind == "altered" and report.problem.record_id == blocked.id
    assert verify_store(database, hmac_key=DEVELOPMENT_HMAC_KEY.encode()).ok   # the real trail is intact
    assert report.problem.line() in out


def test_a_store_the_demo_did_not_make_is_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "audit.db"
    store.write_bytes(b"someone's audit store")
    assert main(["demo", "--quick", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("auditor demo: error:") and str(store) in err and "\n" not in err
    assert store.read_bytes() == b"someone's audit store"


def test_the_demo_folder_is_made_afresh(tmp_path: Path) -> None:
    from auditor.demo import prepare_workdir

    prepare_workdir(tmp_path, demo_default=False)
    (tmp_path / "audit.db").write_bytes(b"the last run")
    (tmp_path / "audit-tampered.db").write_bytes(b"the last run's copy")
    prepare_workdir(tmp_path, demo_default=False)                  # the folder is marked as the demo's
    assert not (tmp_path / "audit.db").exists() and not (tmp_path / "audit-tampered.db").exists()


def test_missing_model_folder_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--quick", "--model", str(tmp_path / "nowhere"), "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("auditor demo: error:") and "nowhere" in err and "\n" not in err


def test_serve_makes_an_admin_key_the_console_accepts(tmp_path: Path) -> None:
    from auditor.auth.keys import find_active_key
    from auditor.demo import console_key, demo_settings
    from auditor.store.database import Database

    settings = demo_settings(tmp_path, model_path=None, domains=["finance"], port=1)
    database = Database.from_settings(settings)
    database.upgrade()
    key = console_key(settings)
    with database.session() as session:
        found = find_active_key(session, key)
        assert found is not None and found.role == "admin" and found.tenant == "default"
    database.dispose()
