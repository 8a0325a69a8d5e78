"""`auditor <args>` run in-process, as the tests that drive the CLI do it: the environment set through pytest's
monkeypatch, settings re-read, stdout and stderr captured, argparse's exits turned into a status."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping

import pytest


def run_cli(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str], *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `auditor <args>` with `env` set."""
    from auditor.cli import main
    from auditor.settings import get_settings

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(list(args))
            except SystemExit as exc:   # argparse
                status = int(exc.code or 0)
    finally:
        get_settings.cache_clear()
    return status, out.getvalue(), err.getvalue()
