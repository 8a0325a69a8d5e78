"""The request path's trivial dependencies must not cost a worker-thread hop (FastAPI runs a plain `def`
dependency on a thread; under load each hop is milliseconds of latency added to every request)."""

import inspect

from auditor.api import deps


def test_attribute_reading_dependencies_run_on_the_event_loop() -> None:
    for dependency in (deps.get_services, deps.get_settings_dep, deps.get_database):
        assert inspect.iscoroutinefunction(dependency), dependency.__name__
