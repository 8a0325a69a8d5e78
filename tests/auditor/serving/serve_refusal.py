"""`auditor serve` started with settings it must refuse: the exit code and what it wrote to stderr."""

from __future__ import annotations

from pathlib import Path

import pytest


def refused_serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                  **settings: str) -> str:
    """Run `auditor serve` with these settings (as AUDITOR_* variables) and return its stderr, having checked
    that it stopped as a bad setting must: a non-zero exit and one line, no traceback."""
    from auditor.cli import main
    from auditor.settings import get_settings

    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    for name, value in settings.items():
        monkeypatch.setenv(f"AUDITOR_{name.upper()}", value)
    get_settings.cache_clear()
    try:
        code = main(["serve", "--port", "8125"])
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, (code, err)
    return err
