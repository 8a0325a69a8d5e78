"""A bounded schemathesis run over the app's own OpenAPI schema: no generated request gets a 5xx."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings

from auditor.app import create_app
from tests.auditor.conftest import FakeEngine, make_settings

# Built at import: schemathesis parametrizes from the loaded schema and runs the app's lifespan itself.
_FOLDER = tempfile.mkdtemp(prefix="auditor-fuzz-")
atexit.register(shutil.rmtree, _FOLDER, ignore_errors=True)
_DB = Path(_FOLDER) / "fuzz.db"
_APP = create_app(make_settings(f"sqlite:///{_DB}", max_body_bytes=16_000), engine=FakeEngine())
schema = schemathesis.openapi.from_asgi("/openapi.json", _APP)


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_errors(case) -> None:
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:300]}"
    if response.status_code >= 400:
        assert set(response.json()["error"]) >= {"message", "type", "code"}
