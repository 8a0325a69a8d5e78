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
    from auditor.cli import main
    from auditor.settings import get_settings

    monkeypatch.setattr(allocator, "find_jemalloc", lambda: None)
    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.setenv("AUDITOR_ENGINE_ALLOCATOR", "jemalloc")
    get_settings.cache_clear()
    try:
        code = main(["serve", "--port", "8124"])
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert code != 0 and "libjemalloc2" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
