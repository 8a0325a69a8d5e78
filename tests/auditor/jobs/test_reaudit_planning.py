"""Re-audit jobs are created without collecting record ids (one small commit), frozen in the background in
seq ranges whose chunks start as soon as they exist, resumable after a crash, and judged with the rule packs
the job pinned whatever pack a worker has active."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import event, func, select

from auditor.jobs import reaudit
from auditor.jobs.inprocess import InProcessTaskQueue
from auditor.jobs.models import ReauditItem
from auditor.jobs.reaudit_plan import plan_job
from auditor.store.database import Database
from tests.auditor.scoring_doubles import MarkerEvaluator, append_output


class RecordingQueue:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def enqueue_score(self, outbox_id: int, record_id: str) -> None:
        raise AssertionError("not used")

    def enqueue_chunk(self, job_id: str, chunk: int) -> None:
        self.sent.append((job_id, chunk))


def test_creating_a_job_reads_no_record(database: Database) -> None:
    for i in range(30):
        append_output(database, f"Statement {i}.")
    statements: list[str] = []
    listen = lambda _conn, _cursor, statement, *_: statements.append(statement)  # noqa: E731
    event.listen(database.engine, "before_cursor_execute", listen)
    try:
        started = time.perf_counter()
        job_id = reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="m/1",
                                    filters=reaudit.ReauditFilter(domain="finance"), chunk_size=4)
        elapsed = time.perf_counter() - started
    finally:
        event.remove(database.engine, "before_cursor_execute", listen)
    assert not any("audit_records" in s or "record_verdicts" in s for s in statements), statements
    assert elapsed < 1.0
    with database.session() as session:
        job, progress = reaudit.get_job(session, job_id, tenant_scope=None), None
        progress = reaudit.progress_of(session, job)
    assert (job.max_seq, job.total, progress["planning"]) == (30, 0, True)


def test_planning_freezes_ranges_and_starts_their_chunks_at_once(database: Database) -> None:
    records = [append_output(database, f"Statement {i}.", domain="finance" if i % 3 else "legal") for i in range(20)]
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="m/1",
                                filters=reaudit.ReauditFilter(domain="finance"), chunk_size=3)
    append_output(database, "Appended after the job was created.")   # beyond max_seq: not covered
    queue = RecordingQueue()
    assert plan_job(database, queue, job_id, range_seqs=7) == len([r for i, r in enumerate(records) if i % 3])
    with database.session() as session:
        job = reaudit.get_job(session, job_id, tenant_scope=None)
        frozen = set(session.execute(select(ReauditItem.record_id).where(ReauditItem.job_id == job_id)).scalars())
    assert frozen == {r for i, r in enumerate(records) if i % 3} and job.planned_at is not None
    assert [chunk for _, chunk in queue.sent] == list(range(len(queue.sent)))   # enqueued range by range
    assert job.total == 13 and job.tenants_covered == ["acme"]


def test_planning_interrupted_resumes_without_duplicates(database: Database) -> None:
    for i in range(12):
        append_output(database, f"Statement {i}.")
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="m/1",
                                filters=reaudit.ReauditFilter(), chunk_size=2)

    class DiesAfterOneRange(RecordingQueue):
        def enqueue_chunk(self, job_id: str, chunk: int) -> None:
            raise SystemExit("worker killed after its first range committed")

    with pytest.raises(SystemExit):
        plan_job(database, DiesAfterOneRange(), job_id, range_seqs=5)
    queue = InProcessTaskQueue(database, lambda: MarkerEvaluator("m/1"), workers=2, retry_delays_s=(0.01,))
    reaudit.start_job(database, queue, job_id)   # planning resumes (chunk -1), chunks get scored
    queue.wait_idle()
    reaudit.requeue_stalled(database, queue, stall_after_s=0, queued_after_s=0)   # the chunks the kill never sent
    queue.wait_idle()
    with database.session() as session:
        job = reaudit.get_job(session, job_id, tenant_scope=None)
        per_record = session.execute(select(ReauditItem.record_id, func.count()).where(ReauditItem.job_id == job_id)
                                     .group_by(ReauditItem.record_id)).all()
    assert job.status == "done" and job.total == 12 and {n for _, n in per_record} == {1} and len(per_record) == 12


def test_a_job_judges_with_its_pinned_pack_whatever_the_worker_has_active(database: Database, tmp_path) -> None:
    import shutil

    import yaml

    from auditor.jobs.scoring import RulesEvaluator
    from auditor.packs import registry
    from auditor.packs.source import StorePacks, pins_now
    from auditor.trail.access_log import CliOperator
    from rules.packs import PACK_DIR

    folder = tmp_path / "packs"
    shutil.copytree(PACK_DIR, folder)
    packs = StorePacks(database, directory=folder, refresh_s=0)
    record = append_output(database, "The maximum daily dose of Metformin for adults is 5000 mg.", domain="medical")
    pins = pins_now(packs, "rules")                      # the job pins the pack with the dose rule
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope=None, evaluator_version="rules-validators/1.0.0",
                                filters=reaudit.ReauditFilter(domain="medical"), rule_packs=pins)
    pack = yaml.safe_load((folder / "medical.yaml").read_text())
    pack["version"], pack["rules"] = "no-dose", [r for r in pack["rules"] if r["id"] != "med.dose.max_daily"]
    (folder / "medical.yaml").write_text(yaml.safe_dump(pack))
    registry.sync_from_dir(database, folder, actor=CliOperator(), force=True)   # the worker now has another pack
    assert packs.refs()["medical"].version == "no-dose"
    queue = InProcessTaskQueue(database, lambda: RulesEvaluator(packs), workers=1)
    reaudit.start_job(database, queue, job_id)
    queue.wait_idle(timeout_s=300)
    with database.session() as session:
        job = reaudit.get_job(session, job_id, tenant_scope=None)
    assert job.status == "done"
    assert job.summary["evaluation_rule_packs"] == {pins["medical"]["hash"]: pins["medical"]["version"]}
    assert job.summary["fer_after"]["mean"] == 1.0 and record
