"""`auditor demo`: the real service on the embedded defaults, requests through HTTP, records in the store.

The test runs the finance part of the quick script (the finance KG loads in seconds; the medical one
takes a minute of CPU) against the bundled model, then opens the records as a user would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from auditor.cli import main
from auditor.demo import SCRIPT, scripted_requests

BUNDLED = Path(__file__).resolve().parent.parent / "auditor" / "bundled_model"
AUDIT_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def test_quick_script_has_one_request_per_domain() -> None:
    quick = scripted_requests(quick=True)
    assert sorted(r.domain for r in quick) == ["finance", "legal", "medical"]
    assert len(scripted_requests(quick=False)) == len(SCRIPT) > len(quick)
    assert {r.domain for r in scripted_requests(quick=False, domains=["legal"])} == {"legal"}
    assert all(r.intent for r in SCRIPT)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_audits_requests_and_the_records_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not (BUNDLED / "model.safetensors").is_file():
        pytest.skip("the bundled demo model has not been trained yet (python -m scripts.train_demo_model)")
    assert main(["demo", "--quick", "--domains", "finance", "--dir", str(tmp_path), "--max-tokens", "96"]) == 0
    out = capsys.readouterr().out
    audit_ids = list(dict.fromkeys(AUDIT_ID.findall(out)))
    assert audit_ids, out
    assert "fin-risk" in out and "auditor audits show" in out

    env = {**os.environ, "AUDITOR_DATABASE_URL": f"sqlite:///{(tmp_path / 'audit.db').resolve()}"}
    shown = subprocess.run([sys.executable, "-m", "auditor.cli", "audits", "show", audit_ids[0]],
                           capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert audit_ids[0] in shown.stdout and "fin-risk" in shown.stdout
    chain = subprocess.run([sys.executable, "-m", "auditor.cli", "audit", "verify-chain"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert chain.returncode == 0, chain.stdout + chain.stderr


def test_missing_model_folder_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--quick", "--model", str(tmp_path / "nowhere"), "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("auditor demo: error:") and "nowhere" in err and "\n" not in err


def test_serve_makes_an_admin_key_the_console_accepts(tmp_path: Path) -> None:
    from auditor.auth.keys import find_active_key
    from auditor.demo import console_key, demo_settings
    from auditor.store.database import Database

    settings = demo_settings(tmp_path, model_path=None, domains=["finance"], port=1)
    database = Database.from_settings(settings)
    database.upgrade()
    key = console_key(settings)
    with database.session() as session:
        found = find_active_key(session, key)
        assert found is not None and found.role == "admin" and found.tenant == "default"
    database.dispose()
