"""Imports reach a running service without a restart: linking, the output gate's validators, the records'
KG version, scoring and re-audits, and the engine's decoding constraint; through `POST /v1/kg/reload` at
once, or the follower within AUDITOR_KG_REFRESH_S."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from auditor.app import create_app
from auditor.kg import versions
from auditor.serving import runtime
from auditor.store.database import Database
from knowledge_graphs import load_kg, packaged_kg
from tests.auditor.conftest import TEST_CHAIN_KEY, TEST_HMAC_KEY, FakeEngine, make_settings

pytestmark = pytest.mark.timeout(300)
FIXTURES = Path(__file__).parents[2] / "knowledge_graphs" / "imports" / "fixtures"
WRONG_YEAR = "Kyllo v. United States, 533 U.S. 27 (1999), held that thermal imaging is a search."
QUESTION = [{"role": "user", "content": "What did the Court hold in Kyllo v. United States?"}]


@pytest.fixture
def legal_service(sqlite_url: str):
    """The service on the packaged legal KG with its real validators and linking; the engine is a double
    that always answers with a wrongly dated Kyllo citation."""
    clients: list[TestClient] = []

    def build(**overrides: Any) -> TestClient:
        kgs = {"legal": packaged_kg("legal")}
        settings = make_settings(sqlite_url, domains=["legal"], **{"kg_refresh_s": 0, **overrides})
        client = TestClient(create_app(settings, engine=FakeEngine(WRONG_YEAR), verifier=runtime.RulesVerifier(kgs),
                                       knowledge=runtime.KgKnowledge(kgs)))
        client.__enter__()
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.__exit__(None, None, None)
    assert load_kg("legal") is packaged_kg("legal")     # the app gave the packaged KG back on shutdown


def ask(client: TestClient) -> dict[str, Any]:
    response = client.post("/v1/chat/completions", headers={"X-Domain": "legal"},
                           json={"model": "auditor", "messages": QUESTION, "max_tokens": 40})
    assert response.status_code == 200, response.text
    return client.get(f"/v1/audits/{response.headers['X-Audit-Id']}").json()


def import_cases(database_url: str) -> str:
    database = Database(database_url, chain_key=TEST_CHAIN_KEY)
    database.upgrade()
    try:
        return versions.import_file(database, packaged_kg("legal"), fmt="cases", path=FIXTURES / "scdb_cases.csv",
                                    imported_by="key:k1 (acme)").version.version_hash
    finally:
        database.dispose()


def anchors(row: dict[str, Any]) -> list[str]:
    return next(e["data"]["anchor_ids"] for e in row["kg_events"] if e["processor"] == "kg_linking")


def test_reload_makes_an_import_visible_to_linking_validators_and_records(legal_service, sqlite_url: str) -> None:
    client = legal_service()
    before = ask(client)
    assert before["kg_version"] == packaged_kg("legal").version
    assert before["gate_action"] == "allow" and before["n_unverifiable"] == 1 and anchors(before) == []

    new_version = import_cases(sqlite_url)
    reloaded = client.post("/v1/kg/reload").json()
    assert reloaded["changed"] == ["legal"]
    assert reloaded["domains"]["legal"]["version"] == new_version

    after = ask(client)
    assert after["kg_version"] == new_version
    assert anchors(after) == ["case:scdb-2000-077"]                     # linking knows the imported case
    assert after["gate_action"] == "block" and after["n_contradicted"] == 1
    # the citation and its year are two claims: the year (1999; the imported row says 2001) is the contradicted
    # one, and its evidence is the imported row, named by file and line
    [wrong_year] = [c for c in after["claims"] if c["verdict"] == "contradicted"]
    assert any("scdb_cases.csv line 4" in e["locator"] for e in wrong_year["evidence"]), wrong_year["evidence"]
    assert client.post("/v1/kg/reload").json()["changed"] == []
    versions_listed = client.get("/v1/kg/versions", params={"domain": "legal"}).json()["data"]
    assert [v["action"] for v in versions_listed] == ["packaged", "import"] and versions_listed[-1]["current"]


def test_the_follower_picks_an_import_and_a_rollback_up_without_reload(legal_service, sqlite_url: str) -> None:
    client = legal_service(kg_refresh_s=0.2)
    packaged = packaged_kg("legal").version
    assert ask(client)["kg_version"] == packaged
    new_version = import_cases(sqlite_url)
    assert _eventually(lambda: ask(client)["kg_version"] == new_version)
    database = Database(sqlite_url, chain_key=TEST_CHAIN_KEY)
    versions.rollback(database, packaged_kg, packaged, by="key:k1 (acme)")
    database.dispose()
    assert _eventually(lambda: ask(client)["kg_version"] == packaged)
    assert ask(client)["gate_action"] == "allow"


def test_a_restarted_service_starts_on_the_current_version(legal_service, sqlite_url: str) -> None:
    new_version = import_cases(sqlite_url)
    assert ask(legal_service())["kg_version"] == new_version


def test_a_reaudit_rescores_records_judged_under_older_versions(legal_service, sqlite_url: str) -> None:
    client = legal_service()
    old_ids = [ask(client)["id"] for _ in range(2)]
    # Live scoring judges them under the packaged version first; scored after the import, they would be
    # judged under the new one and rightly not be "older".
    assert _eventually(lambda: all(client.get(f"/v1/audits/{i}").json()["evaluations"] for i in old_ids),
                       timeout_s=60)
    new_version = import_cases(sqlite_url)
    client.post("/v1/kg/reload")
    fresh = ask(client)["id"]
    created = client.post("/v1/reaudits", json={"filter": {"kg_older_than": new_version}})
    assert created.status_code in (200, 201, 202), created.text
    job_id = created.json()["id"]
    assert _eventually(lambda: client.get(f"/v1/reaudits/{job_id}").json()["status"] == "done", timeout_s=120)
    job = client.get(f"/v1/reaudits/{job_id}").json()
    assert job["progress"]["total"] == 2
    for record_id in old_ids:
        evaluations = client.get(f"/v1/audits/{record_id}").json()["evaluations"]
        rescored = [e for e in evaluations if e.get("job_id") == job_id]
        assert rescored and rescored[0]["kg_version"] == new_version
    assert fresh not in old_ids


def test_the_decoding_constraint_sees_an_import(tiny_checkpoint: Path, sqlite_url: str) -> None:
    """The real engine's KG-constraint processor gets the new version: a drug only the formulary names is
    linked in the prompt, allowed, and accepted by the processor (it refuses ids it does not hold)."""
    from tests.auditor.real_engine import build_real_runtime

    engine, verifier, knowledge = build_real_runtime(tiny_checkpoint)
    settings = make_settings(sqlite_url, domains=["medical"], kg_refresh_s=0)
    question = [{"role": "user", "content": "What is the maximum daily dose of Zorbitrexal?"}]
    with TestClient(create_app(settings, engine=engine, verifier=verifier, knowledge=knowledge)) as client:
        def ask_medical() -> dict[str, Any]:
            response = client.post("/v1/chat/completions", headers={"X-Domain": "medical"},
                                   json={"model": "auditor", "messages": question, "max_tokens": 8})
            assert response.status_code == 200, response.text
            return client.get(f"/v1/audits/{response.headers['X-Audit-Id']}").json()

        assert anchors(ask_medical()) == []
        database = Database(sqlite_url, chain_key=TEST_CHAIN_KEY)
        tiny = knowledge.kgs["medical"]
        result = versions.import_file(database, tiny, fmt="formulary", path=FIXTURES / "formulary.csv",
                                      imported_by="key:k1 (acme)")
        database.dispose()
        assert client.post("/v1/kg/reload").json()["changed"] == ["medical"]
        processor = next(p for p in engine.engine.processors if p.name == "kg_constraint")
        assert processor.domains["medical"].kg_version == result.version.version_hash
        assert "drug:formulary:zorbitrexal" in processor.domains["medical"].known_entity_ids
        row = ask_medical()
        assert anchors(row) == ["drug:formulary:zorbitrexal"]
        assert row["sampling_params"]["kg_constraint"]["allowed_count"] >= 1
        assert row["kg_version"] == result.version.version_hash


def _eventually(check, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_an_engine_core_in_its_own_process_follows_the_store(tiny_checkpoint: Path, sqlite_url: str) -> None:
    """With the engine in its own process (the default), its KG-constraint processor follows the store itself:
    an imported case id it refuses before the import (strict: same version) is accepted once it has followed."""
    import asyncio
    import uuid

    from engine.sampling_params import InvalidRequestError, SamplingParams

    database = Database(sqlite_url, chain_key=TEST_CHAIN_KEY)
    database.upgrade()
    engine = runtime.load_engine(tiny_checkpoint, ["legal"], process=True, index_cache_dir=None,
                                 kg_store=runtime.KgStoreFollow(sqlite_url, 0.2, TEST_HMAC_KEY))

    async def probe() -> bool:
        params = SamplingParams(max_tokens=2, extra_args={"kg_constraint": {
            "domain": "legal", "allowed_entity_ids": ["case:scdb-2000-077"]}})
        try:
            async for _ in engine.generate("Kyllo", params, request_id=str(uuid.uuid4()), output_kind="delta"):
                pass
        except InvalidRequestError as exc:
            assert "case:scdb-2000-077" in str(exc)
            return False
        return True

    async def scenario() -> None:
        await engine.start()
        try:
            assert await probe() is False                     # the packaged legal KG has no such case
            versions.import_file(database, packaged_kg("legal"), fmt="cases", path=FIXTURES / "scdb_cases.csv",
                                 imported_by="key:k1 (acme)")
            deadline = time.monotonic() + 120
            while not await probe():
                assert time.monotonic() < deadline, "the engine core never followed the import"
                await asyncio.sleep(0.3)
        finally:
            await engine.shutdown()

    try:
        asyncio.run(scenario())
    finally:
        database.dispose()


def test_a_request_linked_under_a_newer_version_loses_only_the_ids_the_processor_lacks() -> None:
    """Between an import and the moment a separate engine core has compiled it, the API links under the new
    version: unknown ids are dropped (neither allowed nor forbidden there), not a 400."""
    from knowledge_graphs.decoding.constraint import KGConstraintError
    from tests.auditor.real_engine import tiny_medical_kg
    from tests.knowledge_graphs.decoding.test_constraint import _processor, byte_level_bpe

    kg = tiny_medical_kg()
    processor = _processor(byte_level_bpe(), kg)
    from engine.sampling_params import SamplingParams

    newer = {"domain": "medical", "allowed_entity_ids": ["drug:DB00331", "drug:formulary:new"], "kg_version": "f" * 16}
    assert processor._parse(SamplingParams(extra_args={"kg_constraint": newer}))[1] == ["drug:DB00331"]
    same = {**newer, "kg_version": kg.version}
    with pytest.raises(KGConstraintError, match="drug:formulary:new"):
        processor._parse(SamplingParams(extra_args={"kg_constraint": same}))


def test_a_store_with_no_kg_versions_builds_no_kg_to_check(sqlite_url: str) -> None:
    """The engine core follows the store too: with only packaged KGs there is nothing to build, and building one
    anyway held ~200 MB per process for nothing. A deleted chained version is still caught (test_kg_tamper)."""
    from auditor.kg.live import LiveKnowledgeGraphs

    database = Database(sqlite_url, chain_key=TEST_CHAIN_KEY)
    database.upgrade(hmac_key=TEST_CHAIN_KEY.hmac_key)
    built: list[str] = []

    def packaged(domain: str):
        built.append(domain)
        return packaged_kg(domain)

    live = LiveKnowledgeGraphs(database, ["legal", "medical"], refresh_s=0, packaged=packaged)
    assert live.refresh() == [] and built == [] and live.verified == {"legal", "medical"}
    database.dispose()
