"""A record whose verdicts cite an imported fact that a rollback withdrew is shown stale, with the reason, on
its console page and in the API's record JSON, until it is re-judged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from auditor.app import create_app
from auditor.auth.keys import create_key
from auditor.kg import versions
from knowledge_graphs import packaged_kg
from tests.auditor.conftest import FakeEngine, make_settings
from tests.auditor.scoring_doubles import append_output
from tests.console.test_security import log_in

FIXTURES = Path(__file__).parents[1] / "knowledge_graphs" / "imports" / "fixtures"


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, str, Any]]:
    # live scoring would replace the record's inline verdicts at a moment the test does not control
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:Unscored")
    settings = make_settings(f"sqlite:///{tmp_path / 'audit.db'}", kg_refresh_s=0)
    client = TestClient(create_app(settings, engine=FakeEngine()), follow_redirects=False)
    with client:
        database = client.app.state.services.database
        with database.session() as session:
            key = create_key(session, tenant="acme", role="auditor")[1]
        yield client, key, database


def test_a_verdict_citing_a_rolled_back_import_is_marked_stale(console: Any) -> None:
    client, key, database = console
    packaged = packaged_kg("legal").version
    imported = versions.import_file(database, packaged_kg("legal"), fmt="cases", path=FIXTURES / "scdb_cases.csv",
                                    imported_by="key:k1 (acme)")
    with database.engine.connect() as conn:
        row = versions.kg_for(conn, packaged_kg("legal"), versions.current_version(conn, "legal"),
                              key=database.chain_key.hmac_key).entity(
            "case:scdb-2000-077").provenance
    claim = {"text": "Kyllo v. United States, 533 U.S. 27 (1999)", "kind": "case_year", "verdict": "contradicted",
             "confidence": 0.9, "evidence": [{"kind": "kg_fact", "description": "KYLLO v. UNITED STATES: decided in 2001",
                                              "source": row.source, "locator": row.locator, "as_of": row.as_of}]}
    record_id = append_output(database, "Kyllo v. United States, 533 U.S. 27 (1999).", domain="legal",
                              claims=[claim], fer=1.0)
    log_in(client, key)
    headers = {"Authorization": f"Bearer {key}"}
    assert "Stale" not in client.get(f"/console/records/{record_id}").text
    assert client.get(f"/v1/audits/{record_id}", headers=headers).json()["current"]["kg_stale"] is False

    versions.rollback(database, packaged_kg, packaged, by="key:k1 (acme)")
    reason = f"cites a fact withdrawn by rollback to {packaged}"
    current = client.get(f"/v1/audits/{record_id}", headers=headers).json()["current"]
    assert current["kg_stale"] is True and current["kg_stale_reason"].startswith(reason)
    assert "scdb_cases.csv" in current["kg_stale_reason"]
    page = client.get(f"/console/records/{record_id}").text
    assert "Stale" in page and reason in page

    versions.rollback(database, packaged_kg, imported.version.version_hash, by="key:k1 (acme)")   # back again
    assert client.get(f"/v1/audits/{record_id}", headers=headers).json()["current"]["kg_stale"] is False
