"""KG versions in the store (SQLite and PostgreSQL): import, list, diff, roll back; a failed import changes
nothing; overlays are checked against their digest; racing imports both land; and the records judged under
versions older than V, or whose verdicts cite a fact a rollback withdrew, are the ones a re-audit selects."""

from __future__ import annotations

import threading
import zlib
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from auditor.jobs import reaudit, scoring
from auditor.jobs.inprocess import InProcessTaskQueue
from auditor.kg import versions
from auditor.kg.live import LiveKnowledgeGraphs
from auditor.kg.models import KgImport, KgVersion
from auditor.trail import reads
from auditor.trail.access_log import CliOperator
from auditor.trail.models import Evaluation, RecordVerdict
from auditor.trail.queries import filtered_query
from auditor.trail.records import NewRecord, append_record
from auditor.trail.schemas import AuditFilters
from knowledge_graphs import packaged_kg
from knowledge_graphs.imports import ImportFileError
from tests.auditor.scoring_doubles import append_output

FIXTURES = Path(__file__).parents[2] / "knowledge_graphs" / "imports" / "fixtures"
CASES = FIXTURES / "scdb_cases.csv"
SDN = FIXTURES / "sdn.csv"
ONE_CASE = b"caseName,usCite,dateDecision\nMiranda v. Arizona,384 U.S. 436,6/13/1966\n"


def import_cases(database, data: bytes | None = None, name: str | None = None, by: str = "key:k1 (acme)"):
    return versions.import_file(database, packaged_kg("legal"), fmt="cases", path=None if data else CASES,
                                data=data, file_name="extra.csv" if data else None, name=name, imported_by=by)


def counts(database) -> tuple[int, int]:
    with database.engine.connect() as conn:
        return (conn.execute(select(func.count()).select_from(KgImport)).scalar_one(),
                conn.execute(select(func.count()).select_from(KgVersion)).scalar_one())


def test_an_import_is_a_new_current_version_on_the_packaged_one(database) -> None:
    result = import_cases(database)
    legal = packaged_kg("legal")
    assert result.rows == 5 and result.entities == 5 and result.facts == 15
    rows = versions.list_versions(database, domain="legal")
    assert [(r.action, r.current) for r in rows] == [("packaged", False), ("import", True)]
    assert rows[0].version_hash == legal.version
    assert rows[1].version_hash == result.version.version_hash != legal.version
    assert rows[1].created_by == "key:k1 (acme)"
    with database.engine.connect() as conn:
        kg = versions.kg_for(conn, legal, versions.current_version(conn, "legal"), key=database.chain_key.hmac_key)
        stored = conn.execute(select(KgImport)).one()
    assert kg.version == result.version.version_hash
    assert kg.entity("case:scdb-2000-077").provenance.imported_by == "key:k1 (acme)"
    assert stored.file_sha256 and stored.file_name == "scdb_cases.csv" and stored.rows == 5


def test_imports_stack_and_an_import_under_the_same_name_replaces_the_earlier_one(database) -> None:
    first = import_cases(database)
    second = import_cases(database, ONE_CASE, name="extra")
    assert len(second.version.overlays) == 2
    third = import_cases(database, ONE_CASE.replace(b"384 U.S. 436", b"384 U.S. 437"), name="extra")
    assert third.replaced == ["extra"] and len(third.version.overlays) == 2
    assert third.version.overlays[0] == first.import_id
    _, _, changes = versions.diff(database, packaged_kg, second.version.version_hash, third.version.version_hash)
    assert [f.qualifiers for f in changes.facts_added if f.relation == "reported_in"] == [{"volume": 384, "page": 437}]
    assert [f.qualifiers for f in changes.facts_removed if f.relation == "reported_in"] == [{"volume": 384, "page": 436}]


def test_a_bad_file_changes_nothing(database) -> None:
    import_cases(database)
    before = counts(database)
    with pytest.raises(ImportFileError, match="line 3, field 'dateDecision'"):
        import_cases(database, ONE_CASE + b"Bad v. Date,1 U.S. 1,31/31/1999\n", name="extra")
    with pytest.raises(versions.KgVersionError, match="no rows"):
        import_cases(database, b"caseName,usCite,dateDecision\n", name="extra")
    assert counts(database) == before
    assert versions.list_versions(database, domain="legal")[-1].current


def test_rollback_restores_an_earlier_version_as_a_new_row(database) -> None:
    packaged = packaged_kg("legal").version
    imported = import_cases(database).version.version_hash
    row = versions.rollback(database, packaged_kg, packaged[:8], by="key:k2 (acme)")
    assert (row.version_hash, row.action, row.rollback_to, row.current) == (packaged, "rollback", 1, True)
    with pytest.raises(versions.KgVersionError, match="already at"):
        versions.rollback(database, packaged_kg, packaged, by="x")
    again = versions.rollback(database, packaged_kg, imported, by="x")
    assert again.version_hash == imported and again.overlays == versions.list_versions(database)[1].overlays
    assert [r.action for r in versions.list_versions(database)] == ["packaged", "import", "rollback", "rollback"]


def test_versions_are_named_by_hash_prefix_or_domain_and_seq(database) -> None:
    result = import_cases(database)
    with database.engine.connect() as conn:
        assert versions.resolve(conn, result.version.version_hash[:6]).seq == result.version.seq
        assert versions.resolve(conn, f"legal@{result.version.seq}").version_hash == result.version.version_hash
        for bad, message in (("zzzzzz", "not a KG version hash"), ("abc", "not a KG version hash"),
                             ("ffffffffff", "no KG version"), ("legal@99", "no KG version")):
            with pytest.raises(versions.KgVersionError, match=message):
                versions.resolve(conn, bad)


def test_an_overlay_altered_in_the_store_is_refused(database) -> None:
    result = import_cases(database)
    versions._overlay_cache.items.clear()
    with database.engine.begin() as conn:
        conn.execute(update(KgImport).values(overlay=zlib.compress(b'{"domain": "legal"}')))
    with database.engine.connect() as conn, pytest.raises(versions.KgIntegrityError, match="altered"):
        versions.load_overlays(conn, [result.import_id], key=database.chain_key.hmac_key)


def test_racing_imports_both_land(database) -> None:
    errors: list[Exception] = []

    def run(name: str, data: bytes) -> None:
        try:
            import_cases(database, data, name=name)
        except Exception as exc:   # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"batch{i}", ONE_CASE.replace(b"Miranda", f"Case{i}".encode())))
               for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    current = versions.list_versions(database, domain="legal")[-1]
    imports = versions.imports_by_id(database, current.overlays)
    assert sorted(i.name for i in imports.values()) == ["batch0", "batch1", "batch2"]


def test_records_judged_under_older_versions_are_selected(database) -> None:
    old = packaged_kg("legal").version
    new = import_cases(database).version.version_hash
    finance_v1 = versions.import_file(database, packaged_kg("finance"), fmt="ofac-sdn", path=SDN,
                                      imported_by="x").version.version_hash

    def record(kg_version: str | None, domain: str = "legal") -> str:
        return append_record(database, NewRecord(tenant="acme", status="completed", domain=domain,
                                                 kg_version=kg_version, output="x", content_mode="raw")).id

    stale, fresh, other_domain, no_kg = record(old), record(new), record(finance_v1, "finance"), record(None)
    unknown_older = record("0123456789abcdef")      # a version from before any was recorded
    rescored = record(old)                          # its latest evaluation was made under the new version
    scoring.score_record(database, ScoredUnder(new), scoring.ScoreRequest(rescored))
    selected = _select(database, new)
    assert selected == {stale, unknown_older}
    assert fresh not in selected and other_domain not in selected and no_kg not in selected
    assert _select(database, old) == {unknown_older}  # only a version the store never recorded is older
    assert _select(database, "fedcba9876543210") == set()   # an unknown version selects nothing


class ScoredUnder:
    """An evaluator double that scores every record under one KG version."""

    version = "scored-under/1"

    def __init__(self, kg_version: str) -> None:
        self.kg_version = kg_version

    def evaluate(self, *, text: str, domain: str | None, prompt: str | None) -> scoring.Scored:
        return scoring.Scored([], None, None, None, "allow", kg_version=self.kg_version)


def _select(database, version: str) -> set[str]:
    query = filtered_query(AuditFilters(kind="record", kg_older_than=version), tenant_scope=None)
    with database.session() as session:
        return set(session.execute(query.with_only_columns(RecordVerdict.record_id)).scalars())


def test_after_a_rollback_verdicts_citing_withdrawn_facts_are_stale_selected_and_rejudged(database) -> None:
    """An answer judged contradicted by an imported SDN row; the import is rolled back. The record is marked stale
    (its verdicts cite a withdrawn fact), `kg reaudit` selects it by the facts it cites whichever version it
    names, and the new evaluation no longer cites the withdrawn row."""
    packaged = packaged_kg("finance").version
    imported = versions.import_file(database, packaged_kg("finance"), fmt="ofac-sdn", path=SDN,
                                    imported_by="key:k1 (acme)").version.version_hash
    live = LiveKnowledgeGraphs(database, ["finance"], refresh_s=0)
    try:
        live.refresh()                                        # this process judges with the imported list
        evaluator = scoring.load_evaluator("rules")
        answer = append_output(database, "Teodor Zavoransky is not sanctioned.", domain="finance")
        unrelated = append_output(database, "The euro is the currency of France.", domain="finance")
        for record_id in (answer, unrelated):
            scoring.score_record(database, evaluator, scoring.ScoreRequest(record_id))
        (claim,) = [c for c in _shown(database, answer).current.claims if c["verdict"] == "contradicted"]
        assert any("sdn.csv line 1 " in e["locator"] for e in claim["evidence"])
        assert not _shown(database, answer).current.kg_stale

        versions.rollback(database, packaged_kg, packaged, by="key:k1 (acme)")
        live.refresh()
        current = _shown(database, answer).current
        assert current.kg_stale and current.kg_stale_reason.startswith(
            f"cites a fact withdrawn by rollback to {packaged}")
        assert not _shown(database, unrelated).current.kg_stale
        assert _select(database, imported) == {answer}         # `kg reaudit --older-than <the rolled-back version>`
        assert _select_withdrawn(database) == {answer}         # `kg reaudit --withdrawn`
        assert _select(database, packaged) == {answer, unrelated}   # judged under a version other than the current

        queue = InProcessTaskQueue(database, lambda: evaluator, workers=1)
        job_id = reaudit.create_job(database, tenant="cli", tenant_scope=None, evaluator_version=evaluator.version,
                                    filters=reaudit.ReauditFilter(kg_older_than=imported))
        reaudit.start_job(database, queue, job_id)
        queue.wait_idle()
    finally:
        live.stop()
    with database.session() as session:
        job = reaudit.get_job(session, job_id, tenant_scope=None)
        rejudged = session.execute(select(Evaluation).where(Evaluation.job_id == job_id)).scalars().all()
    assert job.status == "done" and job.total == 1 and [e.record_id for e in rejudged] == [answer]
    assert rejudged[0].kg_version == packaged
    assert not any("sdn.csv" in (e.get("locator") or "") for c in rejudged[0].claims for e in c["evidence"])
    assert not _shown(database, answer).current.kg_stale
    assert _select_withdrawn(database) == set()


def _shown(database, record_id: str):
    return reads.show_record(database, CliOperator(), record_id)


def _select_withdrawn(database) -> set[str]:
    query = filtered_query(AuditFilters(kind="record", kg_withdrawn=True), tenant_scope=None)
    with database.session() as session:
        return set(session.execute(query.with_only_columns(RecordVerdict.record_id)).scalars())
