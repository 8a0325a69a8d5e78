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
