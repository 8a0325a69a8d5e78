"""Outbox dispatcher: every committed record's scoring work is published, re-published until
acknowledged, and never published twice in one pass by concurrent dispatchers."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

from auditor.jobs import outbox, scoring
from auditor.jobs.models import OutboxInflight
from auditor.trail.models import OutboxMessage
from tests.auditor.scoring_doubles import MarkerEvaluator, append_output


class Recorder:
    def __init__(self, fail_after: int | None = None) -> None:
        self.sent: list[tuple[int, str]] = []
        self.fail_after = fail_after
        self.lock = threading.Lock()

    def __call__(self, outbox_id: int, record_id: str) -> None:
        with self.lock:
            if self.fail_after is not None and len(self.sent) >= self.fail_after:
                raise ConnectionError("broker unreachable")
            self.sent.append((outbox_id, record_id))


def _inflight(database) -> int:
    with database.session() as session:
        return session.execute(select(func.count()).select_from(OutboxInflight)).scalar_one()


def test_new_rows_are_published_once_and_stay_in_flight_until_scored(database) -> None:
    records = [append_output(database, f"Statement {i}.") for i in range(5)]
    publish = Recorder()
    assert outbox.dispatch_once(database, publish).published == 5
    assert sorted(r for _, r in publish.sent) == sorted(records)
    assert outbox.dispatch_once(database, publish).published == 0   # already dispatched
    assert _inflight(database) == 5
    with database.session() as session:
        assert session.execute(select(func.count()).select_from(OutboxMessage)
                               .where(OutboxMessage.dispatched_at.is_(None))).scalar_one() == 0

    for outbox_id, record_id in publish.sent[:3]:
        request = scoring.ScoreRequest(record_id, on_commit=[outbox.acknowledge_hook(outbox_id)])
        scoring.score_record(database, MarkerEvaluator(), request)
    assert _inflight(database) == 2


def test_unacknowledged_rows_are_published_again_after_the_redelivery_delay(database) -> None:
    for i in range(4):
        append_output(database, f"Statement {i}.")
    first = Recorder()
    outbox.dispatch_once(database, first)
    # The broker lost everything (e.g. Redis restarted); one message had been scored before that.
    outbox_id, record_id = first.sent[0]
    scoring.score_record(database, MarkerEvaluator(),
                         scoring.ScoreRequest(record_id, on_commit=[outbox.acknowledge_hook(outbox_id)]))
    assert outbox.dispatch_once(database, Recorder(), redeliver_after_s=3600).redelivered == 0
    again = Recorder()
    result = outbox.dispatch_once(database, again, redeliver_after_s=0)
    assert result.redelivered == 3
    assert sorted(again.sent) == sorted(first.sent[1:])
    with database.session() as session:
        attempts = session.execute(select(OutboxMessage.attempts).where(OutboxMessage.id == again.sent[0][0])).scalar()
    assert attempts == 2


def test_broker_failure_keeps_unpublished_rows_for_the_next_pass(database) -> None:
    records = [append_output(database, f"Statement {i}.") for i in range(5)]
    flaky = Recorder(fail_after=2)
    result = outbox.dispatch_once(database, flaky)
    assert (result.published, result.failed) == (2, True)
    healthy = Recorder()
    assert outbox.dispatch_once(database, healthy).published == 3
    assert sorted(r for _, r in flaky.sent + healthy.sent) == sorted(records)


def test_concurrent_dispatchers_publish_each_row_exactly_once(database) -> None:
    records = [append_output(database, f"Statement {i}.") for i in range(60)]
    publish = Recorder()
    threads = [threading.Thread(target=outbox.dispatch_once, args=(database, publish), kwargs={"batch_size": 7})
               for _ in range(4)]
    for _ in range(3):   # several rounds of four racing dispatchers
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        threads = [threading.Thread(target=outbox.dispatch_once, args=(database, publish), kwargs={"batch_size": 7})
                   for _ in range(4)]
    while outbox.dispatch_once(database, publish).published:
        pass
    published = [r for _, r in publish.sent]
    assert len(published) == len(set(published)) == len(records)


def test_embedded_worker_scores_new_records_without_a_broker(database) -> None:
    import time

    from auditor.jobs.inprocess import EmbeddedWorker

    embedded = EmbeddedWorker(database, lambda: MarkerEvaluator(), interval_s=0.05).start()
    try:
        records = [append_output(database, f"Statement {i}. Wrong [false].") for i in range(6)]
        deadline = time.monotonic() + 20
        while _inflight(database) or _count_live(database) < 6:
            assert time.monotonic() < deadline, "embedded scoring did not finish"
            time.sleep(0.05)
    finally:
        embedded.stop()
    with database.session() as session:
        rows = session.execute(select(scoring.Evaluation.record_id, scoring.Evaluation.fer)).all()
    assert sorted(rows) == sorted((r, 0.5) for r in records)


def _count_live(database) -> int:
    from auditor.trail.models import Evaluation

    with database.session() as session:
        return session.execute(select(func.count()).select_from(Evaluation)
                               .where(Evaluation.job_id.is_(None))).scalar_one()


def test_embedded_worker_holds_scoring_back_while_requests_run_then_catches_up(database) -> None:
    # it shares the API's CPU and GIL: live requests go first, the outbox keeps the work meanwhile
    from auditor.jobs.inprocess import EmbeddedWorker

    busy = [True]
    embedded = EmbeddedWorker(database, lambda: MarkerEvaluator(), busy=lambda: busy[0], max_lag_s=3600)
    records = [append_output(database, f"Statement {i}.") for i in range(3)]
    try:
        embedded.run_once()
        assert _undispatched(database) == 3 and _inflight(database) == 0
        busy[0] = False
        embedded.run_once()
        assert _undispatched(database) == 0
        embedded.queue.wait_idle()
        assert _count_live(database) == len(records)
    finally:
        embedded.stop()


def test_embedded_worker_lag_is_bounded_under_unbroken_traffic(database) -> None:
    from auditor.jobs.inprocess import EmbeddedWorker

    # A lag of a minute, with the clock moved on by hand: a short real lag made the first pass dispatch
    # whenever a loaded CI machine took longer than the lag to append the record.
    embedded = EmbeddedWorker(database, lambda: MarkerEvaluator(), busy=lambda: True, max_lag_s=60)
    append_output(database, "Statement.")
    try:
        embedded.run_once()
        assert _undispatched(database) == 1
        embedded._last_dispatch -= 61
        embedded.run_once()   # traffic never paused, but the oldest work has waited max_lag_s
        assert _undispatched(database) == 0
    finally:
        embedded.stop()


def _undispatched(database) -> int:
    with database.session() as session:
        return outbox.backlog(session)["undispatched"]


class _BurningEvaluator(MarkerEvaluator):
    """Spends real CPU per record, as the rules evaluator does."""

    def __init__(self, cpu_s: float) -> None:
        super().__init__()
        self.cpu_s = cpu_s
        self.cpu_used = 0.0
        self.lock = threading.Lock()

    def evaluate(self, **kwargs):
        import time

        started = time.thread_time()
        while time.thread_time() - started < self.cpu_s:
            pass
        with self.lock:
            self.cpu_used += time.thread_time() - started
        return super().evaluate(**kwargs)


def test_embedded_scoring_takes_at_most_its_share_of_a_cpu_while_requests_run(database) -> None:
    # a dispatch lands many records at once: paced, they cannot take the GIL from live requests as one burst
    import time

    from auditor.jobs.inprocess import EmbeddedWorker

    evaluator = _BurningEvaluator(cpu_s=0.03)
    embedded = EmbeddedWorker(database, lambda: evaluator, busy=lambda: True, max_lag_s=60, busy_share=0.25)
    for i in range(6):
        append_output(database, f"Statement {i}.")
    embedded._last_dispatch -= 120   # the oldest work has waited past max_lag_s: this pass dispatches
    try:
        started = time.monotonic()
        embedded.run_once(maintenance=False)
        embedded.queue.wait_idle(timeout_s=60)
        wall = time.monotonic() - started
        assert _count_live(database) == 6
        # two workers, each asleep 7x the CPU a task took (2 / 0.25 - 1): scoring had at most ~a quarter
        assert evaluator.cpu_used >= 6 * 0.03
        assert evaluator.cpu_used / wall <= 0.3, (evaluator.cpu_used, wall)
    finally:
        embedded.stop()


def test_embedded_scoring_runs_flat_out_when_idle_or_behind(database) -> None:
    from auditor.jobs.inprocess import EmbeddedWorker

    busy = [True]
    embedded = EmbeddedWorker(database, lambda: MarkerEvaluator(), busy=lambda: busy[0], max_lag_s=10, busy_share=0.25)
    sleeps: list[float] = []
    embedded._stop.wait = lambda seconds: sleeps.append(seconds)   # what the worker would sleep, not the sleep
    try:
        embedded._pace(0.02, waited_s=1.0)
        assert sleeps == [pytest.approx(0.02 * 7)]        # busy and not behind: held back
        embedded._pace(10.0, waited_s=1.0)
        assert sleeps[-1] == 5.0                          # one long task parks a worker 5 s at most
        embedded._pace(0.02, waited_s=10.0)                # waited max_lag_s in the queue: behind, no sleep
        busy[0] = False
        embedded._pace(0.02, waited_s=0.0)                 # no live requests: no sleep
        assert len(sleeps) == 2
    finally:
        embedded._stop = threading.Event()
        embedded.stop()


def test_embedded_busy_share_outside_zero_to_one_is_refused(database) -> None:
    from auditor.jobs.inprocess import EmbeddedWorker

    for share in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="busy_share"):
            EmbeddedWorker(database, lambda: MarkerEvaluator(), busy_share=share)
