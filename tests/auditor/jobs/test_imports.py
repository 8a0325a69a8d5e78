"""JSONL import of external outputs: malformed lines reported by number and skipped, or (--strict)
the whole file rejected with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from auditor.cli import main
from auditor.jobs import reaudit
from auditor.jobs.imports import ImportFailed, ImportRejected, import_file
from auditor.jobs.inprocess import InProcessTaskQueue
from auditor.jobs.models import ImportBatch, ImportedOutput
from auditor.trail.ledgers import verify_trail
from auditor.trail.models import AuditRecord, OutboxMessage
from tests.auditor.conftest import make_settings
from tests.auditor.scoring_doubles import MarkerEvaluator


def _line(**overrides) -> str:
    values = {"prompt": "Max daily dose?", "output": "Metformin max is 2550 mg per day.", "domain": "medical",
              "model": "other-llm-7b", "timestamp": "2026-10-01T12:00:00Z"}
    values.update(overrides)
    return json.dumps({k: v for k, v in values.items() if v is not None})


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "outputs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


BAD_LINES = [
    _line(),                                          # 1 ok
    "{not json",                                      # 2
    _line(domain="astrology"),                        # 3 unknown domain
    "",                                               # 4 blank: ignored
    _line(output=None),                               # 5 missing output
    _line(timestamp="2026-10-01T12:00:00"),           # 6 no timezone
    "[1, 2]",                                         # 7 not an object
    _line(colour="red"),                              # 8 unknown field
    _line(output="[false] Aspirin cures diabetes.", domain="medical"),   # 9 ok
]


def _counts(database) -> tuple[int, int, int, int]:
    with database.session() as session:
        return tuple(session.execute(select(func.count()).select_from(table)).scalar_one()
                     for table in (AuditRecord, OutboxMessage, ImportBatch, ImportedOutput))


def test_malformed_lines_are_reported_by_number_and_skipped(database, tmp_path) -> None:
    settings = make_settings(database.url, default_content_mode="raw")
    result = import_file(database, _write(tmp_path, BAD_LINES), settings=settings, tenant="acme")
    assert [e.line for e in result.errors] == [2, 3, 5, 6, 7, 8]
    messages = {e.line: e.message for e in result.errors}
    assert "not valid JSON" in messages[2] and "astrology" in messages[3] and "'output'" in messages[5]
    assert "timezone" in messages[6] and "JSON object" in messages[7] and "'colour'" in messages[8]
    assert (result.imported, result.skipped, result.lines) == (2, 6, 9)
    assert _counts(database) == (2, 2, 1, 2)   # each imported output is a record with its scoring outbox row
    with database.session() as session:
        batch = session.get(ImportBatch, result.import_id)
        records = session.execute(select(AuditRecord).join(ImportedOutput, ImportedOutput.record_id == AuditRecord.id)
                                  .order_by(ImportedOutput.line)).scalars().all()
    assert batch.status == "complete" and [e["line"] for e in batch.errors] == [2, 3, 5, 6, 7, 8]
    assert [(r.model_id, r.endpoint, r.details["line"]) for r in records] == [("other-llm-7b", "import", 1),
                                                                             ("other-llm-7b", "import", 9)]
    assert records[0].details["timestamp"] == "2026-10-01T12:00:00+00:00"


def test_strict_import_with_a_bad_line_writes_nothing(database, tmp_path) -> None:
    settings = make_settings(database.url)
    with pytest.raises(ImportRejected, match="line 2") as caught:
        import_file(database, _write(tmp_path, BAD_LINES), settings=settings, tenant="acme", strict=True)
    assert [e.line for e in caught.value.errors] == [2, 3, 5, 6, 7, 8]
    assert _counts(database) == (0, 0, 0, 0)


def test_imported_outputs_can_be_reaudited_by_import_id(database, tmp_path) -> None:
    settings = make_settings(database.url, default_content_mode="raw")
    lines = [_line(output="Metformin lowers glucose."), _line(output="[false] Aspirin cures diabetes.")]
    result = import_file(database, _write(tmp_path, lines), settings=settings, tenant="acme", strict=True)
    queue = InProcessTaskQueue(database, lambda: MarkerEvaluator("marker/2"))
    job_id = reaudit.create_job(database, tenant="acme", tenant_scope="acme", evaluator_version="marker/2",
                                import_id=result.import_id)
    reaudit.start_job(database, queue, job_id)
    queue.wait_idle()
    with database.session() as session:
        job = reaudit.get_job(session, job_id, tenant_scope="acme")
        assert (job.status, job.total, job.source) == ("done", 2, "import")
        assert job.summary["fer_after"]["mean"] == 0.5
        # Imported outputs never passed the gate: no phantom "allow->block", they are counted apart.
        gates = job.summary["gate_action_changes"]
        assert (gates["total"], gates["by_transition"], gates["no_gate"]) == (0, {}, 2)
    with pytest.raises(reaudit.ReauditNotFound):   # another tenant cannot see the import
        reaudit.create_job(database, tenant="other", tenant_scope="other", evaluator_version="v",
                           import_id=result.import_id)


def test_unreadable_or_empty_file_is_a_clear_error(database, tmp_path) -> None:
    settings = make_settings(database.url)
    with pytest.raises(ImportFailed, match="cannot read"):
        import_file(database, tmp_path / "missing.jsonl", settings=settings, tenant="acme")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"output": "caf\xe9"}\n')
    with pytest.raises(ImportFailed, match="not UTF-8"):
        import_file(database, tmp_path / "latin1.jsonl", settings=settings, tenant="acme")
    with pytest.raises(ImportFailed, match="no valid line.*line 1"):
        import_file(database, _write(tmp_path, ["{oops"]), settings=settings, tenant="acme")


def test_cli_import_reports_lines_and_strict_fails_in_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    from auditor.settings import get_settings

    get_settings.cache_clear()
    try:
        path = _write(tmp_path, BAD_LINES)
        assert main(["import", str(path), "--strict"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[0] == "line 2: not valid JSON (Expecting property name enclosed in double quotes at column 2)"
        assert err[-1] == f"auditor import: error: {path}: 6 malformed line(s); --strict: nothing imported"
        assert main(["import", str(path)]) == 0
        captured = capsys.readouterr()
        assert "2 record(s) imported, 6 line(s) skipped" in captured.out
        assert "line 8: field 'colour'" in captured.err
    finally:
        get_settings.cache_clear()


def test_import_in_several_transactions_keeps_the_chain_and_links_whole(database, tmp_path, monkeypatch) -> None:
    from auditor.jobs import imports

    monkeypatch.setattr(imports, "APPEND_BATCH", 2)
    settings = make_settings(database.url)
    lines = [_line(output=f"Statement {i}.", id=f"ext-{i}") for i in range(5)]
    result = import_file(database, _write(tmp_path, lines), settings=settings, tenant="acme", strict=True)
    assert (result.imported, result.skipped) == (5, 0)
    with database.session() as session:
        batch = session.get(ImportBatch, result.import_id)
        assert (batch.status, batch.imported) == ("complete", 5)
        linked = session.execute(select(ImportedOutput.line).order_by(ImportedOutput.line)).scalars().all()
    assert linked == [1, 2, 3, 4, 5]
    with database.engine.connect() as conn:
        assert verify_trail(conn, settings.hmac_key.get_secret_value().encode()).ok
