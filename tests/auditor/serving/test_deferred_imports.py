"""Deferred imports: a deferred module runs on first use (or when load_deferred runs), once, from any thread."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from auditor.serving import deferred_imports


@pytest.fixture()
def slow_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = "deferred_probe_module"
    (tmp_path / f"{name}.py").write_text(
        "import time\nRUNS = __import__('builtins').__dict__.setdefault('_deferred_probe_runs', [])\n"
        "RUNS.append(1)\ntime.sleep(0.2)\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins
    monkeypatch.setattr(builtins, "_deferred_probe_runs", [], raising=False)
    yield name
    sys.modules.pop(name, None)


def test_a_deferred_module_runs_on_first_use_only(slow_module: str) -> None:
    import builtins

    deferred_imports.defer([slow_module])
    module = __import__(slow_module)
    assert builtins._deferred_probe_runs == []   # imported by name, not run
    assert module.VALUE == 42 and builtins._deferred_probe_runs == [1]
    assert __import__(slow_module).VALUE == 42 and builtins._deferred_probe_runs == [1]


def test_threads_that_race_for_it_run_it_once(slow_module: str) -> None:
    import builtins

    deferred_imports.defer([slow_module])
    module = __import__(slow_module)
    seen: list[int] = []
    threads = [threading.Thread(target=lambda: seen.append(module.VALUE)) for _ in range(4)]
    loader = deferred_imports.start_loading_deferred()
    for thread in threads:
        thread.start()
    for thread in [*threads, loader]:
        thread.join(10)
    assert seen == [42] * 4 and builtins._deferred_probe_runs == [1]
    assert not isinstance(sys.modules[slow_module], deferred_imports._Deferred)   # the real one from now on


def test_an_imported_module_or_an_unknown_name_is_left_alone() -> None:
    import json

    deferred_imports.defer(["json", "no_such_module_anywhere"])
    assert sys.modules["json"] is json and "no_such_module_anywhere" not in sys.modules


def test_the_first_steps_run_before_the_deferred_imports_and_a_failed_step_stops_nothing(slow_module: str) -> None:
    import builtins

    deferred_imports.defer([slow_module])
    order: list[str] = []

    def failing_load() -> None:
        order.append("detector")
        raise OSError("MiniLM weights unreadable")

    def registries() -> None:
        order.append(f"registries after {len(builtins._deferred_probe_runs)} deferred import(s)")

    loader = deferred_imports.start_loading_deferred(registries, first=[failing_load])
    loader.join(10)
    assert order == ["detector", "registries after 1 deferred import(s)"]
