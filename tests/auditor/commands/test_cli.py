"""The `auditor` subcommands this service owns: db, keys, audits, audit (verify-chain, purge, holds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

from auditor.cli import main
from auditor.settings import get_settings
from auditor.store.database import Database
from auditor.trail.records import NewRecord, append_record
from tests.auditor.conftest import TEST_HMAC_KEY


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Database:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("AUDITOR_DATABASE_URL", url)
    monkeypatch.setenv("AUDITOR_ENVIRONMENT", "test")
    monkeypatch.setenv("AUDITOR_HMAC_KEY", TEST_HMAC_KEY)
    monkeypatch.setenv("AUDITOR_RETENTION_DAYS", '{"medical": 0}')
    get_settings.cache_clear()
    yield Database.from_settings(get_settings())
    get_settings.cache_clear()


def _records(database: Database, n: int) -> list[str]:
    return [append_record(database, NewRecord(tenant="acme", status="completed", domain="medical",
                                              prompt=f"p{i}", output=f"o{i}")).id
            for i in range(n)]


def test_db_upgrade_and_keys(cli_env: Database, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade"]) == 0
    assert main(["keys", "create", "--tenant", "acme", "--role", "auditor", "--name", "compliance"]) == 0
    created = capsys.readouterr().out
    key_id = created.split("key id: ")[1].split()[0]
    assert "aud_" in created
    assert main(["keys", "list"]) == 0
    assert key_id in capsys.readouterr().out
    assert main(["keys", "revoke", key_id]) == 0
    assert main(["keys", "revoke", "nope"]) == 2
    assert "no key with id" in capsys.readouterr().err


def test_audits_list_show_export(cli_env: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["db", "upgrade"])
    ids = _records(cli_env, 3)
    capsys.readouterr()
    assert main(["audits", "list", "--json"]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == ids[::-1]
    assert main(["audits", "show", ids[0]]) == 0
    assert json.loads(capsys.readouterr().out)["prompt"] == "p0"
    assert main(["audits", "show", "missing"]) == 2
    out = tmp_path / "trail.csv"
    assert main(["audits", "export", "--format", "csv", "--output", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 4
    assert main(["audits", "list", "--fer-min", "7"]) == 2
    assert "--fer-min" in capsys.readouterr().err
    with cli_env.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM access_log")).scalar() == 4


def test_verify_chain_exit_status(cli_env: Database, capsys: pytest.CaptureFixture[str]) -> None:
    main(["db", "upgrade"])
    ids = _records(cli_env, 3)
    assert main(["audit", "verify-chain"]) == 0
    assert "chain ok: 3 records" in capsys.readouterr().out
    with cli_env.engine.begin() as conn:
        conn.execute(text("UPDATE audit_records SET tenant = 'evil' WHERE seq = 2"))
    assert main(["audit", "verify-chain"]) == 1
    assert capsys.readouterr().out.strip() == f"chain broken: altered: record {ids[1]} (seq 2): stored fields do not match content_digest"


def test_purge_and_hold(cli_env: Database, capsys: pytest.CaptureFixture[str]) -> None:
    main(["db", "upgrade"])
    ids = _records(cli_env, 2)
    assert main(["audit", "hold", "--reason", "   "]) == 2
    assert main(["audit", "hold", "--record", ids[0], "--reason", "subpoena"]) == 0
    capsys.readouterr()
    assert main(["audit", "purge", "--dry-run"]) == 0
    assert "would purge 1 record(s); 1 under legal hold" in capsys.readouterr().out
    assert main(["audit", "purge"]) == 0
    assert main(["audit", "verify-chain"]) == 0


def test_bad_database_url_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AUDITOR_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    get_settings.cache_clear()
    try:
        assert main(["audit", "verify-chain"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert err.startswith("auditor audit: error: audit store error") and len(err.strip().splitlines()) == 1


def test_default_hmac_key_refused_outside_development(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AUDITOR_ENVIRONMENT", "production")
    monkeypatch.delenv("AUDITOR_HMAC_KEY", raising=False)
    get_settings.cache_clear()
    try:
        assert main(["audit", "verify-chain"]) == 2
    finally:
        get_settings.cache_clear()
    assert "AUDITOR_HMAC_KEY must be set" in capsys.readouterr().err


def test_tenants_set_and_list_the_detection_mode(cli_env: Database, capsys: pytest.CaptureFixture[str]) -> None:
    from auditor.tenants.service import detection_mode

    assert main(["tenants", "set-detection", "acme", "require"]) == 0
    assert main(["tenants", "set-detection", "beta", "off"]) == 0
    with cli_env.session() as session:
        assert detection_mode(session, "acme", default="detect") == "require"
        assert detection_mode(session, "nobody", default="detect") == "detect"
    assert main(["tenants", "set-detection", "acme", "default"]) == 0
    capsys.readouterr()
    assert main(["tenants", "list"]) == 0
    listing = capsys.readouterr().out
    assert "default domain detection (AUDITOR_DOMAIN_DETECTION): detect" in listing
    assert "acme  domain_detection=default (detect)" in listing and "beta  domain_detection=off" in listing
    with pytest.raises(SystemExit):   # argparse: one-line usage error, exit status 2
        main(["tenants", "set-detection", "acme", "sometimes"])


def test_engine_core_needs_an_address_and_a_model(cli_env: Database, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine-core"]) == 2
    assert "AUDITOR_ENGINE_ADDRESS" in capsys.readouterr().err
    monkeypatch.setenv("AUDITOR_MODEL_PATH", str(tmp_path / "no-model"))
    get_settings.cache_clear()
    assert main(["engine-core", "--address", f"ipc://{tmp_path}/core"]) == 2
    err = capsys.readouterr().err
    assert "no model at" in err and "Traceback" not in err
