"""`auditor kg import` end to end with the public sources' formats: the file becomes the current KG version,
its coverage is stored with the overlay, and a bad file is one line naming its line and field, storing nothing."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from sqlalchemy import select

from auditor.cli import main
from auditor.kg import versions
from auditor.kg.models import KgImport
from auditor.store.database import Database
from knowledge_graphs import packaged_kg

FIXTURES = Path(__file__).parents[2] / "fixtures" / "imports"


def kg(*argv: str) -> int:
    return main(["kg", *argv])


def current_kg(database: Database, domain: str):
    with database.engine.connect() as conn:
        return versions.kg_for(conn, packaged_kg(domain), versions.current_version(conn, domain),
                               key=database.chain_key.hmac_key)


def stored_overlay(database: Database, name: str) -> dict:
    with database.engine.connect() as conn:
        blob = conn.execute(select(KgImport.overlay).where(KgImport.name == name)).scalar_one()
    return json.loads(zlib.decompress(blob))


def test_sec_tickers_import(cli_database, capsys) -> None:
    path = FIXTURES / "company_tickers_exchange.json"
    assert kg("import", "--domain", "finance", "--format", "sec-tickers", str(path), "--as-of", "2026-12-01",
              "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["rows"], summary["facts"]) == (5, 13)            # entities: 4 companies, and exchanges
    assert summary["entities"] >= 4                                 # the KG may already hold
    now = current_kg(cli_database, "finance")
    assert now.version == summary["version"]
    assert [e.id for e in now.lookup("BERKSHIRE HATHAWAY")] == ["cik:0001067983"]
    assert {f.object for f in now.facts("cik:0001067983", "listed_on_exchange")} == {"exchange:nyse"}
    [cik] = now.facts("cik:0000320193", "has_cik")
    assert cik.value == "0000320193" and cik.provenance.as_of == "2026-12-01"
    assert "company_tickers_exchange.json line 1 (data[0], CIK 0000320193, AAPL)" in cik.provenance.locator
    assert "coverage" not in stored_overlay(cli_database, "sec-tickers")      # nothing it covers completely


def test_uslm_import_stores_its_coverage(cli_database, capsys) -> None:
    path = FIXTURES / "uslm_title42_excerpt.xml"
    assert kg("import", "--domain", "legal", "--format", "uslm-xml", str(path), "--name", "usc-42", "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 6 and summary["facts"] == 6
    now = current_kg(cli_database, "legal")
    [section] = now.lookup("42 U.S.C. § 1986")                       # the packaged KG's, or the import's
    assert [f.value for f in now.facts(section.id, "has_heading")] == ["Action for neglect to prevent"]
    assert [f.value for f in now.facts("statute:42-usc-1983", "has_heading")] == ["Civil action for deprivation of rights"]
    assert stored_overlay(cli_database, "usc-42")["coverage"] == [{"index": "usc_title", "values": [42]}]


def test_a_bad_public_file_is_one_line_and_changes_nothing(cli_database, tmp_path, capsys) -> None:
    bad = tmp_path / "RXNCONSO.RRF"
    bad.write_text("6809|ENG||||||1|1|6809||RXNORM|IN|6809|metformin||N|4096|\n"
                   "x|ENG||||||2|2|x||RXNORM|IN|x|zorbicodone||N|4096|\n"
                   "6810|ENG||||||3|3|6810||RXNORM|IN|6810|||N|4096|\n")
    assert kg("import", "--domain", "medical", "--format", "rxnorm-rrf", str(bad)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["auditor kg: error: RXNCONSO.RRF: line 2, field 'RXCUI': must be a whole number, got 'x' "
                   "(and 1 more error)"]
    assert versions.list_versions(cli_database) == []
    assert kg("import", "--domain", "legal", "--format", "sec-tickers", str(bad)) == 2
    assert "imports into the finance KG, not legal" in capsys.readouterr().err
