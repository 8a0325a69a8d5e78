"""`auditor kg import|list|diff|rollback|reaudit`: what an operator sees, one-line errors, and who imported."""

from __future__ import annotations

import json
from pathlib import Path

from auditor.auth.keys import create_key
from auditor.cli import main
from auditor.kg import versions
from knowledge_graphs import packaged_kg
from tests.auditor.scoring_doubles import append_output

FIXTURES = Path(__file__).parents[2] / "knowledge_graphs" / "imports" / "fixtures"


def kg(*argv: str) -> int:
    return main(["kg", *argv])


def test_import_list_diff_rollback(cli_database, capsys) -> None:
    assert kg("import", "--domain", "legal", "--format", "cases", str(FIXTURES / "scdb_cases.csv"), "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 5 and summary["imported_by"].startswith("cli:")
    assert kg("list", "--domain", "legal") == 0
    listing = capsys.readouterr().out
    assert "packaged" in listing and summary["version"] in listing and "cases (5 rows)" in listing
    packaged = packaged_kg("legal").version
    assert kg("diff", packaged[:8], summary["version"][:8]) == 0
    out = capsys.readouterr().out
    assert "entities added: 5" in out and "facts removed: 0" in out and "scdb_cases.csv line 2" in out
    assert kg("rollback", packaged) == 0
    assert f"now version {packaged} again" in capsys.readouterr().out
    assert kg("list", "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["action"], r["current"]) for r in rows] == [("packaged", False), ("import", False), ("rollback", True)]


def test_a_bad_file_is_one_line_and_changes_nothing(cli_database, tmp_path, capsys) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("caseName,usCite,dateDecision\nA v. B,1 U.S. 1,31/31/1999\nC v. D,2 Foo. 3,1/1/1990\n")
    assert kg("import", "--domain", "legal", "--format", "cases", str(bad)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["auditor kg: error: bad.csv: line 2, field 'dateDecision': must be a date YYYY-MM-DD or M/D/YYYY, "
                   "got '31/31/1999' (and 1 more error)"]
    assert kg("import", "--domain", "legal", "--format", "cases", str(bad), "--errors") == 2
    listed = capsys.readouterr().out.strip().splitlines()
    assert listed == ["bad.csv: line 2, field 'dateDecision': must be a date YYYY-MM-DD or M/D/YYYY, got '31/31/1999'",
                      "bad.csv: line 3, field 'usCite': reporter 'Foo.' is not in reporters-db"]
    assert versions.list_versions(cli_database) == []
    for argv, message in (
        (["import", "--domain", "finance", "--format", "cases", str(bad)], "imports into the legal KG, not finance"),
        (["import", "--domain", "legal", "--format", "cases", str(tmp_path / "none.csv")], "no such file"),
        (["import", "--domain", "legal", "--format", "cases", str(bad), "--as-of", "yesterday"], "--as-of"),
        (["rollback", "abcdef123456"], "no KG version"),
        (["diff", "abcdef", "legal@1"], "no KG version"),
    ):
        assert kg(*argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_once_keys_exist_an_admin_key_must_name_the_importer(cli_database, capsys, monkeypatch) -> None:
    with cli_database.session() as session:
        admin, admin_plain = create_key(session, tenant="acme", role="admin")
        _, client_plain = create_key(session, tenant="acme", role="client")
        admin_id = admin.id
    args = ["import", "--domain", "finance", "--format", "ofac-sdn", str(FIXTURES / "sdn.csv")]
    assert kg(*args) == 2
    assert "name an admin key" in capsys.readouterr().err
    assert kg(*args, "--key", client_plain) == 2
    assert "need an admin key; this one is client" in capsys.readouterr().err
    assert kg(*args, "--key", "aud_not-a-key") == 2
    assert "unknown or revoked" in capsys.readouterr().err
    monkeypatch.setenv("AUDITOR_API_KEY", admin_plain)
    assert kg(*args, "--as-of", "2026-12-01") == 0
    with cli_database.engine.connect() as conn:
        current = versions.current_version(conn, "finance")
        kg_now = versions.kg_for(conn, packaged_kg("finance"), current, key=cli_database.chain_key.hmac_key)
    provenance = kg_now.entity("sdn:9001").provenance
    assert provenance.imported_by == f"key:{admin_id} (acme)" and current.created_by == provenance.imported_by
    assert provenance.row == 1 and provenance.as_of == "2026-12-01"
    assert admin_plain not in json.dumps(versions.list_versions(cli_database)[-1].__repr__())


def test_kg_reaudit_rescores_records_judged_under_older_versions(cli_database, capsys, monkeypatch) -> None:
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "rules")
    packaged = packaged_kg("legal").version
    stale = [append_output(cli_database, "Kyllo v. United States, 533 U.S. 27 (1999).", domain="legal")
             for _ in range(2)]
    from sqlalchemy import update

    from auditor.trail.models import AuditRecord, RecordVerdict

    with cli_database.engine.begin() as conn:   # judged by the gate under the packaged KG (record and its view row)
        conn.execute(update(AuditRecord).values(kg_version=packaged))
        conn.execute(update(RecordVerdict).values(kg_version=packaged))
    assert kg("import", "--domain", "legal", "--format", "cases", str(FIXTURES / "scdb_cases.csv"), "--json") == 0
    new_version = json.loads(capsys.readouterr().out)["version"]
    assert kg("reaudit", "--older-than", new_version[:10]) == 0
    out = capsys.readouterr().out
    assert f"older than {new_version}" in out
    from sqlalchemy import select

    from auditor.trail.models import Evaluation

    with cli_database.engine.connect() as conn:
        rows = conn.execute(select(Evaluation.record_id, Evaluation.kg_version, Evaluation.claims)
                            .where(Evaluation.job_id.is_not(None))).all()
    assert sorted(r.record_id for r in rows) == sorted(stale)
    assert {r.kg_version for r in rows} == {new_version}       # the job ran here, with the imported KG
    assert all(any(c["verdict"] == "contradicted" for c in r.claims) for r in rows)   # the year claim


def test_kg_reaudit_withdrawn_rejudges_the_verdicts_a_rollback_left_citing_withdrawn_facts(cli_database, capsys,
                                                                                          monkeypatch) -> None:
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "rules")
    packaged = packaged_kg("legal").version
    assert kg("import", "--domain", "legal", "--format", "cases", str(FIXTURES / "scdb_cases.csv"), "--json") == 0
    imported = json.loads(capsys.readouterr().out)["version"]
    with cli_database.engine.connect() as conn:
        row = versions.kg_for(conn, packaged_kg("legal"), versions.current_version(conn, "legal"),
                              key=cli_database.chain_key.hmac_key).entity(
            "case:scdb-2000-077").provenance
    claim = {"text": "Kyllo v. United States, 533 U.S. 27 (1999)", "kind": "case_year", "verdict": "contradicted",
             "evidence": [{"kind": "kg_fact", "description": "decided in 2001", "source": row.source,
                           "locator": row.locator, "as_of": row.as_of}]}
    cited = append_output(cli_database, "Kyllo v. United States, 533 U.S. 27 (1999).", domain="legal",
                          claims=[claim], fer=1.0)
    append_output(cli_database, "Miranda v. Arizona, 384 U.S. 436 (1966).", domain="legal", claims=[])
    from sqlalchemy import select, update

    from auditor.trail.models import AuditRecord, Evaluation, RecordVerdict

    with cli_database.engine.begin() as conn:   # both judged by the gate under the imported version
        conn.execute(update(AuditRecord).values(kg_version=imported))
        conn.execute(update(RecordVerdict).values(kg_version=imported))
    assert kg("rollback", packaged) == 0
    assert "auditor kg reaudit --withdrawn --domain legal" in capsys.readouterr().out
    assert kg("reaudit", "--domain", "legal", "--older-than", imported) == 2          # --domain goes with --withdrawn
    assert "--domain goes with --withdrawn" in capsys.readouterr().err
    assert kg("reaudit", "--withdrawn", "--domain", "legal") == 0
    assert "cite imported facts the current KG versions no longer hold" in capsys.readouterr().out
    with cli_database.engine.connect() as conn:
        rows = conn.execute(select(Evaluation.record_id, Evaluation.kg_version).where(Evaluation.job_id.is_not(None))).all()
    assert [(r.record_id, r.kg_version) for r in rows] == [(cited, packaged)]      # only the record citing the row
