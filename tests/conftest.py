"""Test-wide environment, set before any project module is imported."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `auditor serve` run inside this process (a CLI test) would lower pytest's own threads for good (`engine.priority`);
# tests/engine/test_priority.py runs the real thing in interpreters of its own
os.environ.setdefault("AUDITOR_API_NICE", "0")


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _packaged_kgs_after_each_test():
    """A test that made an imported KG version current in this process (`knowledge_graphs.activate`, e.g. a
    CLI command run in-process) must not leave it to the next test."""
    yield
    from knowledge_graphs import registry

    registry._active.clear()


@pytest.fixture
def cli_database(tmp_path, monkeypatch):
    """A fresh SQLite store that in-process CLI commands (`auditor.cli.main`) use, with no API key in the env."""
    from auditor.settings import get_settings
    from auditor.store.database import Database

    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("AUDITOR_API_KEY", raising=False)
    get_settings.cache_clear()
    database = Database.from_settings(get_settings())
    database.upgrade()
    yield database
    database.dispose()
    get_settings.cache_clear()
