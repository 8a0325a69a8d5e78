"""Claims citing a reference no index holds are their own category (issue 48): counted on the record's current
verdicts, filterable in the API, the CLI and the console, and labelled on the record page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from auditor.app import create_app
from auditor.auth.keys import create_key
from tests.auditor.conftest import FakeEngine, make_settings
from tests.auditor.scoring_doubles import append_output
from tests.console.test_security import log_in


def _claim(text: str, verdict: str, kind: str | None) -> dict[str, Any]:
    evidence = [{"kind": kind, "description": f"{kind}: {text}"}] if kind else [{"kind": "kg_fact", "description": "ok"}]
    return {"text": text, "kind": "case_citation", "verdict": verdict, "confidence": 0.5, "evidence": evidence}


@pytest.fixture
def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, str, dict[str, str]]]:
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:Unscored")
    client = TestClient(create_app(make_settings(f"sqlite:///{tmp_path / 'audit.db'}"), engine=FakeEngine()),
                        follow_redirects=False)
    with client:
        database = client.app.state.services.database
        with database.session() as session:
            key = create_key(session, tenant="acme", role="auditor")[1]
        ids = {
            "possible": append_output(database, "They relied on Holloway v. Brinmark, 447 U.S. 901.", domain="legal",
                                      claims=[_claim("Holloway v. Brinmark, 447 U.S. 901", "unverifiable",
                                                     "possible_fabrication")]),
            "absent": append_output(database, "See Doe v. Roe, 541 U.S. 1127.", domain="legal",
                                    claims=[_claim("Doe v. Roe, 541 U.S. 1127", "contradicted", "fabrication")], fer=1.0),
            "plain": append_output(database, "See Miranda v. Arizona, 384 U.S. 436.", domain="legal",
                                   claims=[_claim("Miranda v. Arizona, 384 U.S. 436", "supported", None)], fer=0.0),
        }
        yield client, key, ids


def test_the_api_filters_and_counts_fabrications(console) -> None:
    client, key, ids = console
    headers = {"Authorization": f"Bearer {key}"}

    def listed(value: str) -> set[str]:
        response = client.get("/v1/audits", params={"fabrication": value}, headers=headers)
        assert response.status_code == 200, response.text
        return {row["id"] for row in response.json()["data"]}

    assert listed("true") == {ids["possible"], ids["absent"]} and listed("false") == {ids["plain"]}
    current = client.get(f"/v1/audits/{ids['possible']}", headers=headers).json()["current"]
    assert current["n_fabrication"] == 1


def test_the_console_lists_labels_and_filters_fabrications(console) -> None:
    client, key, ids = console
    log_in(client, key)
    page = client.get("/console/records", params={"fabrication": "true"}).text
    assert ids["possible"][:13] in page and ids["absent"][:13] in page and ids["plain"][:13] not in page
    assert "1 possible fabrication" in page and 'name="fabrication"' in page
    assert "possible fabrication" in client.get(f"/console/records/{ids['possible']}").text
    assert "no such reference" in client.get(f"/console/records/{ids['absent']}").text
    assert "no such reference" not in client.get(f"/console/records/{ids['plain']}").text


def test_the_cli_takes_the_same_filter(cli_database, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from auditor.cli import main

    possible = append_output(cli_database, "Holloway v. Brinmark, 447 U.S. 901.", domain="legal",
                             claims=[_claim("Holloway v. Brinmark, 447 U.S. 901", "unverifiable", "possible_fabrication")])
    plain = append_output(cli_database, "Miranda v. Arizona, 384 U.S. 436.", domain="legal",
                          claims=[_claim("Miranda v. Arizona, 384 U.S. 436", "supported", None)])
    for flag, expected in (("--fabrication", possible), ("--no-fabrication", plain)):
        assert main(["audits", "list", flag, "--json"]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]   # JSON lines
        assert [row["id"] for row in rows] == [expected] and rows[0]["current"]["n_fabrication"] == (flag == "--fabrication")
