"""Scoring service function, called directly: one evaluation per (record, evaluator version, job)."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from auditor.jobs import scoring
from auditor.trail.models import Evaluation
from auditor.trail.queries import evaluations_for
from tests.auditor.conftest import TEST_CHAIN_KEY
from tests.auditor.scoring_doubles import MarkerEvaluator, append_output


def _evaluations(database, record_id: str) -> list[Evaluation]:
    with database.session() as session:
        return list(evaluations_for(session, record_id))


def test_scoring_writes_one_evaluation_with_claims_scores_and_versions(database) -> None:
    record_id = append_output(database, "Rates rose in 2022. The euro was abolished [false].")
    outcome = scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record_id))
    assert outcome.created and outcome.status == "done"
    [evaluation] = _evaluations(database, record_id)
    assert evaluation.fer == pytest.approx(0.5)
    assert [c["verdict"] for c in evaluation.claims] == ["supported", "contradicted"]
    assert evaluation.claims[1]["evidence"][0]["description"] == "marked false"
    assert (evaluation.evaluator_version, evaluation.rule_pack_hash, evaluation.job_id) == ("marker/1", "pack-marker/1", None)


def test_scoring_twice_is_a_no_op_the_second_time(database) -> None:
    record_id = append_output(database, "Rates rose in 2022.")
    evaluator = MarkerEvaluator()
    first = scoring.score_record(database, evaluator, scoring.ScoreRequest(record_id))
    second = scoring.score_record(database, evaluator, scoring.ScoreRequest(record_id))
    assert (second.created, second.evaluation_id) == (False, first.evaluation_id)
    assert evaluator.calls == 1   # the second delivery found the row before evaluating again
    assert len(_evaluations(database, record_id)) == 1


def test_a_new_evaluator_version_or_job_adds_a_row_and_keeps_the_old(database) -> None:
    record_id = append_output(database, "Rates rose in 2022.")
    scoring.score_record(database, MarkerEvaluator("marker/1"), scoring.ScoreRequest(record_id))
    scoring.score_record(database, MarkerEvaluator("marker/2"), scoring.ScoreRequest(record_id))
    scoring.score_record(database, MarkerEvaluator("marker/2"), scoring.ScoreRequest(record_id, job_id="job-1"))
    versions = sorted((e.evaluator_version, e.job_id or "") for e in _evaluations(database, record_id))
    assert versions == [("marker/1", ""), ("marker/2", ""), ("marker/2", "job-1")]


def test_live_evaluations_are_unique_per_record_and_version_even_without_a_job(database) -> None:
    # The table's UNIQUE(record, version, job_id) treats NULL job ids as distinct; the migration's
    # partial index must catch the duplicate.
    record_id = append_output(database, "Rates rose in 2022.")
    with pytest.raises(IntegrityError):
        with database.session() as session:
            for _ in range(2):
                session.add(Evaluation(record_id=record_id, job_id=None, evaluator_version="v", status="done"))
                session.flush()


def test_concurrent_deliveries_of_one_record_leave_exactly_one_evaluation(database) -> None:
    record_id = append_output(database, "Rates rose in 2022. Gold is a liquid [false].")
    evaluator = MarkerEvaluator(delay_s=0.05)   # both deliveries evaluate before either inserts
    outcomes: list[scoring.Outcome] = []
    threads = [threading.Thread(target=lambda: outcomes.append(
        scoring.score_record(database, evaluator, scoring.ScoreRequest(record_id)))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({o.evaluation_id for o in outcomes}) == 1
    assert sum(o.created for o in outcomes) == 1
    assert len(_evaluations(database, record_id)) == 1


def test_record_without_text_ends_failed_with_its_reason(database) -> None:
    record_id = append_output(database, "Secret output.", content_mode="hash")
    outcome = scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record_id))
    assert outcome.status == "failed"
    [evaluation] = _evaluations(database, record_id)
    assert evaluation.status == "failed" and "no output text" in evaluation.failure_reason


def test_permanent_evaluator_error_fails_but_transient_error_propagates_for_retry(database) -> None:
    no_text = append_output(database, None, content_mode="hash")   # nothing to score, however often retried
    assert scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(no_text)).status == "failed"
    crashing = append_output(database, "This one [explode].")
    with pytest.raises(RuntimeError):
        scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(crashing))
    assert _evaluations(database, crashing) == []   # nothing written: a retry can still succeed
    scoring.record_failure(database, scoring.ScoreRequest(crashing), evaluator_version="marker/1", reason="gave up")
    assert [e.failure_reason for e in _evaluations(database, crashing)] == ["gave up"]


def test_commit_hooks_run_in_the_evaluation_transaction(database) -> None:
    record_id = append_output(database, "Rates rose.")
    seen: list[tuple[str, bool]] = []

    def hook(session, evaluation, scored) -> None:
        count = session.execute(select(func.count()).select_from(Evaluation)
                                .where(Evaluation.record_id == record_id)).scalar_one()
        seen.append((evaluation.status, scored is not None and count == 1))

    def failing_hook(session, evaluation, scored) -> None:
        raise RuntimeError("bookkeeping failed")

    with pytest.raises(RuntimeError):
        scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record_id, on_commit=[failing_hook]))
    assert _evaluations(database, record_id) == []   # the hook's failure rolled the evaluation back
    scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record_id, on_commit=[hook]))
    assert seen == [("done", True)]


def test_rules_evaluator_scores_a_finance_output_with_real_validators(sqlite_url) -> None:
    from auditor.store.database import Database

    try:
        evaluator = scoring.RulesEvaluator()
    except scoring.EvaluatorUnavailable as exc:
        pytest.skip(f"rules.verify not available yet: {exc}")
    database = Database(sqlite_url, chain_key=TEST_CHAIN_KEY)
    database.upgrade()
    valid = append_output(database, "Apple's ISIN is US0378331005.")
    invalid = append_output(database, "Apple's ISIN is US0378331006.")
    for record_id in (valid, invalid):
        assert scoring.score_record(database, evaluator, scoring.ScoreRequest(record_id)).status == "done"
    [good], [bad] = _evaluations(database, valid), _evaluations(database, invalid)
    assert good.evaluator_version == evaluator.version and good.rule_pack_hash
    assert good.fer == 0.0 and bad.fer == 1.0
    assert bad.claims[0]["verdict"] == "contradicted" and bad.claims[0]["evidence"]
    database.dispose()
