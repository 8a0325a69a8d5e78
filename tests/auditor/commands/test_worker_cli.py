"""`auditor worker`: refuses to start without a broker, with one line."""

from __future__ import annotations

import pytest

from auditor.cli import main
from auditor.settings import get_settings


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("AUDITOR_REDIS_URL", raising=False)
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def test_worker_without_a_broker_says_how_scoring_runs_instead(cli_env, capsys) -> None:
    assert main(["worker"]) == 2
    assert capsys.readouterr().err.strip() == (
        "auditor worker: error: AUDITOR_REDIS_URL is not set: without a broker, scoring runs in-process "
        "in `auditor serve`")


def test_worker_rejects_a_zero_concurrency(cli_env, capsys) -> None:
    cli_env.setenv("AUDITOR_REDIS_URL", "redis://127.0.0.1:6379/15")
    get_settings.cache_clear()
    assert main(["worker", "--concurrency", "0"]) == 2
    assert capsys.readouterr().err.strip() == "auditor worker: error: --concurrency must be at least 1"
