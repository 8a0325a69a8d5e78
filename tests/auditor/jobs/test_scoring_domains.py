"""Scoring stored outputs that name no domain: detected (evaluation details say how), not applicable when the
text belongs to no domain or detection was off, merged across several domains; and the evaluations ledger
covers the new details without changing any older digest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select, text

from auditor.jobs import reaudit, scoring
from auditor.jobs.domains import prompt_text, scoring_domains
from auditor.jobs.imports import import_file
from auditor.jobs.inprocess import InProcessTaskQueue
from auditor.tenants.service import set_detection_mode
from auditor.trail.chain import canonical_json, sha256_text
from auditor.trail.domain_source import resolution_details
from auditor.trail.ledgers import EVALUATIONS, verify_trail
from auditor.trail.models import AuditRecord, Evaluation
from auditor.trail.records import NewRecord, append_record
from tests.auditor.conftest import TEST_CHAIN_KEY, make_settings
from tests.auditor.scoring_doubles import MarkerEvaluator, append_output

MEDICAL = "Lisinopril is started at 10 mg once daily for hypertension. It can be raised to 40 mg."
OFF_DOMAIN = "Roast the squash at 200 degrees for forty minutes, then blend it with stock and a little cream."


def _no_detector():
    raise AssertionError("the detector must not be loaded for this record")


def _evaluation(database, record_id: str) -> Evaluation:
    with database.session() as session:
        return session.execute(select(Evaluation).where(Evaluation.record_id == record_id)).scalar_one()


def test_a_record_without_a_domain_is_scored_under_the_detected_one(database) -> None:
    record_id = append_output(database, MEDICAL, domain=None)
    outcome = scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record_id))
    assert outcome.status == "done"
    evaluation = _evaluation(database, record_id)
    resolution = evaluation.details["domain_resolution"]
    assert resolution["source"] == "detected" and resolution["verified_under"] == ["medical"]
    assert resolution["detection"]["scores"]["medical"] >= resolution["detection"]["threshold"]
    assert {c["domain"] for c in evaluation.claims} == {"medical"}
    assert evaluation.details["versions"]["medical"]["rule_pack"] == "pack-marker/1"


def test_text_of_no_domain_is_not_applicable_not_failed(database) -> None:
    record_id = append_output(database, OFF_DOMAIN, domain=None)
    outcome = scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record_id))
    evaluation = _evaluation(database, record_id)
    assert outcome.status == evaluation.status == "not_applicable"
    assert evaluation.claims == [] and evaluation.fer is None
    assert "belongs to no domain" in evaluation.failure_reason
    assert evaluation.details["domain_resolution"]["source"] == "none"
    assert verify_trail_ok(database)


def test_detection_off_for_the_tenant_is_not_applicable_without_loading_the_detector() -> None:
    plan = scoring_domains(domain=None, details=resolution_details(source="none", mode="off"), prompt=None,
                           text=MEDICAL, load_detector=_no_detector)
    assert plan.domains == () and "off" in plan.not_applicable


def test_a_given_domain_is_used_as_is() -> None:
    plan = scoring_domains(domain="legal", details=None, prompt=None, text=MEDICAL, load_detector=_no_detector)
    assert (plan.domains, plan.details, plan.not_applicable) == (("legal",), None, None)


def test_chat_prompts_are_read_as_the_users_words() -> None:
    stored = json.dumps([{"role": "system", "content": "be brief"}, {"role": "user", "content": "max dose?"}])
    assert prompt_text(stored) == "max dose?"
    assert prompt_text("plain prompt") == "plain prompt" and prompt_text(None) == ""


def test_several_domains_merge_into_one_evaluation() -> None:
    class PerDomain(MarkerEvaluator):
        def evaluate(self, *, text: str, domain: str | None, prompt: str | None) -> scoring.Scored:
            scored = super().evaluate(text=f"{'[false] ' if domain == 'legal' else ''}{text}", domain=domain,
                                      prompt=prompt)
            return scoring.Scored(**{**{f: getattr(scored, f) for f in scored.__slots__},
                                     "rule_pack_hash": f"pack-{domain}", "citation_confidence": 0.5 if domain == "legal" else 1.0})

    class TwoDomains:
        def detect(self, prompt, output):
            from knowledge_graphs.detection.detector import Detection
            return Detection({"medical": 0.9, "legal": 0.7, "finance": 0.1}, ("medical", "legal"), 0.6, {}, "test", 1)

    scored = scoring.evaluate_stored(PerDomain(), text="One claim.", domain=None, prompt=None, details=None,
                                     load_detector=TwoDomains)
    assert [(c["domain"], c["verdict"]) for c in scored.claims] == [("medical", "supported"), ("legal", "contradicted")]
    assert scored.fer == 0.5 and scored.citation_confidence == 0.5 and scored.joint_score == 0.25
    assert scored.gate_action == "block" and scored.rule_pack_hash == "pack-medical"
    assert scored.details["versions"] == {"medical": {"kg": "kg-test", "rule_pack": "pack-medical"},
                                          "legal": {"kg": "kg-test", "rule_pack": "pack-legal"}}


def verify_trail_ok(database) -> bool:
    with database.snapshot() as conn:
        return verify_trail(conn, TEST_CHAIN_KEY.hmac_key).ok


def test_evaluation_details_are_chained_and_old_digests_do_not_change(database) -> None:
    # An entry without details digests exactly as before revision 0004 (the fixed field list alone).
    values = {name: f"v-{name}" for name in EVALUATIONS.hashed_fields}
    old_digest = sha256_text(canonical_json({name: values[name] for name in EVALUATIONS.hashed_fields}))
    assert EVALUATIONS.digest({**values, "details": None}) == old_digest
    assert EVALUATIONS.digest({**values, "details": {"x": 1}}) != old_digest

    record_id = append_output(database, OFF_DOMAIN, domain=None)
    scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record_id))
    assert verify_trail_ok(database)
    for forged in ('{"domain_resolution": {"source": "given"}}', None):   # rewritten, then dropped
        with database.engine.begin() as conn:
            conn.execute(text("UPDATE evaluations SET details = :d WHERE record_id = :r"), {"d": forged, "r": record_id})
        assert not verify_trail_ok(database)


def test_imported_lines_may_leave_out_the_domain(database, tmp_path: Path) -> None:
    settings = make_settings(database.url, default_content_mode="raw", domain_detection="detect")
    lines = [json.dumps({"prompt": "bp meds?", "output": MEDICAL, "model": "other-llm", "timestamp": "2026-10-01T12:00:00Z"}),
             json.dumps({"output": OFF_DOMAIN, "model": "other-llm", "timestamp": "2026-10-01T12:00:00Z"})]
    path = tmp_path / "outputs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = import_file(database, path, settings=settings, tenant="acme", strict=True)
    assert result.imported == 2
    queue = InProcessTaskQueue(database, lambda: MarkerEvaluator("marker/2"))
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope="acme", evaluator_version="marker/2",
                                import_id=result.import_id)
    reaudit.start_job(database, queue, job_id)
    queue.wait_idle()
    with database.session() as session:
        job = reaudit.get_job(session, job_id, tenant_scope="acme")
        assert job.summary["records"] == {"total": 2, "done": 1, "failed": 0, "not_applicable": 1, "pending": 0}
        progress = reaudit.progress_of(session, job)
        assert (progress["done"], progress["not_applicable"], progress["failed"]) == (1, 1, 0)
        records = session.execute(select(AuditRecord).order_by(AuditRecord.seq)).scalars().all()
        assert [r.domain for r in records] == [None, None]
        assert records[0].details["domain_resolution"] == resolution_details(source="none", mode="detect")["domain_resolution"]



def test_require_mode_import_rejects_every_line_without_a_domain(database, tmp_path: Path) -> None:
    from auditor.jobs.imports import ImportFailed

    settings = make_settings(database.url)
    with database.session() as session:
        set_detection_mode(session, "strict-co", "require", by="test")
    path = tmp_path / "outputs.jsonl"
    path.write_text(json.dumps({"output": MEDICAL, "model": "m", "timestamp": "2026-10-01T12:00:00Z"}) + "\n")
    with pytest.raises(ImportFailed, match="required"):
        import_file(database, path, settings=settings, tenant="strict-co")


def test_a_legacy_record_without_a_domain_is_rescored_by_detection(database) -> None:
    """Records written before detection existed (no domain, no resolution in details) are detected too."""
    record = NewRecord(tenant="acme", status="completed", endpoint="chat", domain=None, model_id="m",
                       content_mode="raw", prompt=None, output=MEDICAL, delivered_output=MEDICAL)
    record_id = append_record(database, record).id
    scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record_id, job_id="job-1"))
    assert _evaluation(database, record_id).details["domain_resolution"]["verified_under"] == ["medical"]
