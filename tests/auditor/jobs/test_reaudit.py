"""Re-audit jobs through the service layer and the in-process pool: selection, fan-out, summary,
cancel/resume, crash recovery, and exactly one evaluation per record per job."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from auditor.jobs import reaudit, reaudit_chunks, scoring
from auditor.jobs.inprocess import InProcessTaskQueue
from auditor.jobs.models import ReauditItem
from auditor.jobs.reaudit_plan import plan_job
from auditor.trail.ledgers import verify_trail
from auditor.trail.models import AuditRecord, Evaluation
from tests.auditor.conftest import TEST_CHAIN_KEY
from tests.auditor.scoring_doubles import MarkerEvaluator, append_output

HMAC = TEST_CHAIN_KEY.hmac_key


def _queue(database, evaluator=None) -> InProcessTaskQueue:
    evaluator = evaluator or MarkerEvaluator("marker/2")
    return InProcessTaskQueue(database, lambda: evaluator, workers=2, retry_delays_s=(0.01, 0.01))


def _run(database, queue, **kwargs) -> str:
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope="acme", evaluator_version="marker/2", **kwargs)
    reaudit.start_job(database, queue, job_id)
    queue.wait_idle()
    return job_id


def _job(database, job_id):
    with database.session() as session:
        job = reaudit.get_job(session, job_id, tenant_scope=None)
        return job, reaudit.progress_of(session, job)


def _job_evaluations_per_record(database, job_id) -> dict[str, int]:
    with database.session() as session:
        rows = session.execute(select(Evaluation.record_id, func.count()).where(Evaluation.job_id == job_id)
                               .group_by(Evaluation.record_id)).all()
    return dict(rows)


def test_job_rescores_filtered_records_and_summarises_what_changed(database) -> None:
    inline = [{"text": "Rates rose in 2022.", "verdict": "supported", "rule_id": "fin.inline",
               "evidence": [{"kind": "kg_fact", "description": "inline KG fact", "source": "kg-2026.11"}]}]
    flipped = append_output(database, "[false] Rates rose in 2022.", claims=inline, fer=0.0)
    unchanged = append_output(database, "Gold is a metal.",
                              claims=[{"text": "Gold is a metal.", "verdict": "supported"}], fer=0.0)
    previously_scored = append_output(database, "Oil is traded. [false] Bonds are stocks.")
    append_output(database, "Some legal text.", domain="legal")        # outside the filter
    append_output(database, "Another tenant's text.", tenant="other")  # outside the caller's scope
    scoring.score_record(database, MarkerEvaluator("marker/1"), scoring.ScoreRequest(previously_scored))
    with database.session() as session:
        originals = {r.id: (r.record_hash, r.claims, r.output) for r in session.execute(select(AuditRecord)).scalars()}

    job_id = _run(database, _queue(database), filters=reaudit.ReauditFilter(domain="finance"), chunk_size=2)

    job, progress = _job(database, job_id)
    assert job.status == "done"
    assert (progress["total"], progress["done"], progress["failed"], progress["pending"]) == (3, 3, 0, 0)
    assert _job_evaluations_per_record(database, job_id) == {flipped: 1, unchanged: 1, previously_scored: 1}
    summary = job.summary
    [change] = summary["verdict_changes"]["listed"]
    assert change["record_id"] == flipped and change["claim"] == "Rates rose in 2022."
    assert change["before"] == {"verdict": "supported", "evidence": inline[0]["evidence"]}
    assert change["after"]["verdict"] == "contradicted"
    assert change["after"]["evidence"][0]["description"] == "marked false"
    assert summary["gate_action_changes"]["total"] == 2   # flipped and previously_scored now block
    assert summary["gate_action_changes"]["by_transition"] == {"allow->block": 2}
    # before: inline FER 0.0, 0.0 and the marker/1 evaluation's 0.5; after: 1.0, 0.0, 0.5
    assert summary["fer_before"]["mean"] == pytest.approx(0.1667, abs=1e-3)
    assert summary["fer_after"]["mean"] == pytest.approx(0.5)
    assert summary["fer_after"]["histogram"][9]["count"] == 1 and summary["fer_after"]["scored"] == 3
    assert summary["evaluator_versions"] == ["marker/2"]

    with database.session() as session:   # originals untouched, chain intact
        after = {r.id: (r.record_hash, r.claims, r.output) for r in session.execute(select(AuditRecord)).scalars()}
    assert after == originals
    with database.engine.connect() as conn:
        assert verify_trail(conn, HMAC).ok


def test_cancelled_job_stops_and_resume_finishes_each_record_once(database) -> None:
    records = [append_output(database, f"Statement {i}.") for i in range(6)]
    queue = _queue(database)
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="marker/2",
                                filters=reaudit.ReauditFilter(), chunk_size=2)
    plan_job(database, None, job_id)   # freeze the records now (normally a background task)
    reaudit.cancel_job(database, job_id, tenant_scope=None)
    reaudit.start_job(database, queue, job_id)   # workers pick the chunks up but must not score
    queue.wait_idle()
    job, progress = _job(database, job_id)
    assert job.status == "cancelled" and progress["pending"] == 6 and progress["rate_per_s"] == 0

    assert reaudit.resume_job(database, queue, job_id, tenant_scope=None) == 3
    queue.wait_idle()
    job, progress = _job(database, job_id)
    assert job.status == "done" and progress["done"] == 6
    assert _job_evaluations_per_record(database, job_id) == {r: 1 for r in records}
    with pytest.raises(reaudit.ReauditConflict):
        reaudit.cancel_job(database, job_id, tenant_scope=None)


class DiesAfter(MarkerEvaluator):
    """Simulates a process killed mid-chunk: BaseException escapes every handler, nothing more commits."""

    def __init__(self, survive: int) -> None:
        super().__init__("marker/2")
        self.survive = survive

    def evaluate(self, **kwargs):
        if self.calls >= self.survive:
            raise SystemExit("killed")
        return super().evaluate(**kwargs)


def test_chunk_killed_mid_run_is_requeued_and_finished_exactly_once(database) -> None:
    records = [append_output(database, f"Statement {i}.") for i in range(5)]
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="marker/2",
                                filters=reaudit.ReauditFilter(), chunk_size=10)
    plan_job(database, None, job_id)
    with pytest.raises(SystemExit):
        reaudit_chunks.run_chunk(database, DiesAfter(survive=3), job_id=job_id, chunk=0,
                                 retry=reaudit_chunks.RecordRetry(max_batch=1))   # one commit per record
    _, progress = _job(database, job_id)
    assert (progress["done"], progress["pending"]) == (3, 2)

    queue = _queue(database)
    assert reaudit.requeue_stalled(database, queue, stall_after_s=3600) == 0   # heartbeat still fresh
    assert reaudit.requeue_stalled(database, queue, stall_after_s=0) == 1
    queue.wait_idle()
    job, progress = _job(database, job_id)
    assert job.status == "done" and progress["done"] == 5
    assert _job_evaluations_per_record(database, job_id) == {r: 1 for r in records}


def test_batched_commits_lose_only_the_uncommitted_batch_when_killed(database) -> None:
    records = [append_output(database, f"Statement {i}.") for i in range(8)]
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="marker/2",
                                filters=reaudit.ReauditFilter(), chunk_size=10)
    plan_job(database, None, job_id)
    with pytest.raises(SystemExit):   # batches of 1 (first), then 4: killed inside the second batch
        reaudit_chunks.run_chunk(database, DiesAfter(survive=3), job_id=job_id, chunk=0,
                                 retry=reaudit_chunks.RecordRetry(max_batch=4, commit_every_s=10))
    _, progress = _job(database, job_id)
    assert (progress["done"], progress["pending"]) == (1, 7)
    reaudit_chunks.run_chunk(database, MarkerEvaluator("marker/2"), job_id=job_id, chunk=0)
    assert _job(database, job_id)[0].status == "done"
    assert _job_evaluations_per_record(database, job_id) == {r: 1 for r in records}


def test_record_that_keeps_failing_ends_failed_with_its_reason(database) -> None:
    good = append_output(database, "Rates rose.")
    bad = append_output(database, "This one [explode].")
    job_id = _run(database, _queue(database), filters=reaudit.ReauditFilter())
    job, progress = _job(database, job_id)
    assert job.status == "done" and (progress["done"], progress["failed"]) == (1, 1)
    with database.session() as session:
        failed = session.execute(select(Evaluation).where(Evaluation.record_id == bad)).scalar_one()
        item = session.execute(select(ReauditItem).where(ReauditItem.record_id == bad)).scalar_one()
    assert failed.status == "failed" and "RuntimeError: evaluator crashed" in failed.failure_reason
    assert item.failure_reason == failed.failure_reason
    assert job.summary["records"] == {"total": 2, "done": 1, "failed": 1, "not_applicable": 0, "pending": 0}
    assert _job_evaluations_per_record(database, job_id) == {good: 1, bad: 1}


def test_the_summary_names_why_each_item_failed_counted_by_cause(database) -> None:
    append_output(database, "Rates rose.")
    crashed = [append_output(database, f"Case {i} [explode].") for i in range(2)]
    hashed = append_output(database, None, content_mode="hash")          # nothing to re-judge: a ScoringError
    job_id = _run(database, _queue(database), filters=reaudit.ReauditFilter())
    job, progress = _job(database, job_id)
    assert job.status == "done" and (progress["done"], progress["failed"]) == (1, 3)
    failures = job.summary["failures"]
    assert failures["by_cause"] == {
        "RuntimeError: evaluator crashed on this text": 2,
        "ScoringError: the record holds no output text (hash-only content mode or purged)": 1}
    assert sorted((f["record_id"], f["error"], f["message"]) for f in failures["listed"]) == sorted(
        [(record_id, "RuntimeError", "evaluator crashed on this text") for record_id in crashed]
        + [(hashed, "ScoringError", "the record holds no output text (hash-only content mode or purged)")])


def test_filter_rejects_unknown_fields_and_empty_selection_finishes_at_once(database) -> None:
    with pytest.raises(ValueError, match="colour"):
        reaudit.ReauditFilter.model_validate({"colour": "red"})
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="marker/2",
                                filters=reaudit.ReauditFilter(domain="medical"))
    plan_job(database, None, job_id)
    job, progress = _job(database, job_id)
    assert job.status == "done" and progress["total"] == 0 and job.summary["fer_after"]["scored"] == 0
    with pytest.raises(reaudit.ReauditError):
        reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="v")
    with pytest.raises(reaudit.ReauditNotFound):
        reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="v", import_id="nope")
