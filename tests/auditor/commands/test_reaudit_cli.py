"""`auditor reaudit ...` without a broker: the job runs in the CLI process behind a progress bar;
bad options fail with one line."""

from __future__ import annotations

import json

import pytest

from auditor.cli import main
from auditor.settings import get_settings
from tests.auditor.scoring_doubles import append_output


@pytest.fixture
def cli_database(cli_database, monkeypatch):
    """The shared CLI store (tests/conftest.py), scored by the marker evaluator."""
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:MarkerEvaluator")
    get_settings.cache_clear()
    return cli_database


def test_reaudit_start_runs_the_job_and_prints_its_summary(cli_database, capsys) -> None:
    flipped = append_output(cli_database, "[false] Rates rose in 2022.",
                            claims=[{"text": "Rates rose in 2022.", "verdict": "supported"}], fer=0.0)
    append_output(cli_database, "Gold is a metal.", fer=0.0)
    append_output(cli_database, "A legal statement.", domain="legal")
    assert main(["reaudit", "start", "--domain", "finance", "--chunk-size", "1", "--json"]) == 0
    out = capsys.readouterr().out
    job = json.loads(out[out.index("{"):])
    assert job["status"] == "done" and job["progress"]["done"] == 2
    assert job["summary"]["gate_action_changes"]["listed"] == [{"record_id": flipped, "before": "allow",
                                                                "after": "block"}]
    # A second run compares against the first run's evaluations: no verdict changed since, but the
    # gate action still differs from what the record was delivered under.
    assert main(["reaudit", "start", "--domain", "finance"]) == 0
    text = capsys.readouterr().out
    assert "2 re-scored, 0 failed" in text and "claims whose verdict changed: 0" in text
    assert "records whose gate action would now differ: 1 {'allow->block': 1}" in text


@pytest.mark.parametrize(("argv", "message"), [
    (["reaudit", "start"], "give filter options (e.g. --domain legal) or --import-id"),
    (["reaudit", "start", "--fer-min", "2"], "--fer-min: Input should be less than or equal to 1"),
    (["reaudit", "start", "--domain", "legal", "--detach"], "--detach needs workers (AUDITOR_REDIS_URL)"),
    (["reaudit", "cancel", "no-such-job"], "no re-audit job 'no-such-job'"),
])
def test_bad_reaudit_commands_fail_with_one_line(cli_database, capsys, argv, message) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"auditor reaudit: error: {message}")
