"""`AUDITOR_ENGINE_CPUS` reaches the engine core `auditor serve` launches: off by default, auto splits the CPUs this
process may use (the core's torch threads then one per CPU of its own, unless set), a single CPU leaves placement to
the scheduler, and a setting that cannot be used stops the start with a one-line message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from auditor.serving import engine_loading
from engine.affinity import SUPPORTED
from tests.auditor.conftest import make_settings
from tests.auditor.serving.launched_core import LaunchedCore
from tests.auditor.serving.serve_refusal import refused_serve

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="per-thread CPU affinity is Linux's")


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(engine_loading, "EngineCoreClient", LaunchedCore)

    def launch(allowed: set[int], **overrides) -> LaunchedCore:
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(allowed))
        return engine_loading.start_engine_core(make_settings("sqlite://", **overrides))
    return launch


def test_off_by_default(launched) -> None:
    client = launched({0, 1, 2, 3})
    assert client.cpus is None and client.builder.settings.engine_threads is None


def test_auto_gives_the_core_all_but_one_cpu_and_its_threads_follow(launched) -> None:
    client = launched({0, 1, 2, 3}, engine_cpus="auto")
    assert client.cpus.core == {1, 2, 3} and client.cpus.api == {0}
    assert client.builder.settings.engine_threads == 3


def test_threads_that_are_set_decide_how_many_cpus_the_core_gets(launched) -> None:
    client = launched({0, 1, 2, 3}, engine_cpus="auto", engine_threads=1)
    assert client.cpus.core == {3} and client.builder.settings.engine_threads == 1


@pytest.mark.parametrize(("allowed", "overrides"), [({0, 1, 2, 3}, {"engine_cpus": "off"}),
                                                    ({0}, {"engine_cpus": "auto"}),
                                                    ({0, 1}, {"engine_cpus": "auto", "engine_threads": 2})])
def test_no_split_keeps_the_threads_as_they_were(launched, allowed, overrides) -> None:
    client = launched(allowed, **overrides)
    assert client.cpus is None
    assert client.builder.settings.engine_threads == overrides.get("engine_threads")


def test_an_unreadable_setting_is_refused_where_settings_are_read() -> None:
    with pytest.raises(ValidationError, match="not a CPU number or range"):
        make_settings("sqlite://", engine_cpus="all")


@pytest.mark.parametrize(("value", "message"), [("9999", "are not among the CPUs"), ("two", "not a CPU number")])
def test_a_cpu_setting_that_cannot_be_used_stops_serve_in_one_line(monkeypatch, tmp_path: Path, capsys,
                                                                  value: str, message: str) -> None:
    assert message in refused_serve(monkeypatch, tmp_path, capsys, engine_cpus=value)
