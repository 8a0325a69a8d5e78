"""`AUDITOR_ENGINE_ALLOCATOR` reaches the engine core `auditor serve` launches: auto takes jemalloc where the system
has it and glibc's elsewhere, system keeps glibc's, and jemalloc asked for on a system without it stops the start
with a one-line message instead of serving on another malloc than the operator chose."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.serving import engine_loading
from engine import allocator
from tests.auditor.conftest import make_settings
from tests.auditor.serving.launched_core import LaunchedCore
from tests.auditor.serving.serve_refusal import refused_serve


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(engine_loading, "EngineCoreClient", LaunchedCore)
    return lambda **overrides: engine_loading.start_engine_core(make_settings("sqlite://", **overrides))


@pytest.mark.parametrize(("system_has", "setting", "preloaded"), [
    ("libjemalloc.so.2", "auto", "libjemalloc.so.2"),
    (None, "auto", None),
    ("libjemalloc.so.2", "system", None),
    ("libjemalloc.so.2", "jemalloc", "libjemalloc.so.2"),
])
def test_the_setting_decides_what_the_core_preloads(launched, monkeypatch, system_has, setting, preloaded) -> None:
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: system_has)
    assert launched(engine_allocator=setting).preload == preloaded


def test_jemalloc_asked_for_where_there_is_none_stops_serve_in_one_line(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: None)
    assert "libjemalloc2" in refused_serve(monkeypatch, tmp_path, capsys, engine_allocator="jemalloc")
