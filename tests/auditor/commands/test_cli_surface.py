"""The CLI as a new user meets it: every option explained, every listing saying when it is empty, and --json
printing JSON and nothing else on stdout."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from auditor.cli import build_parser, main
from auditor.settings import get_settings
from tests.auditor.conftest import TEST_HMAC_KEY


@pytest.fixture
def empty_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.setenv("AUDITOR_ENVIRONMENT", "test")
    monkeypatch.setenv("AUDITOR_HMAC_KEY", TEST_HMAC_KEY)
    monkeypatch.setenv("AUDITOR_RULE_PACK_WATCH", "false")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _subparsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _subparsers(sub, (*path, name))
    return found


def test_every_command_and_option_says_what_it_does() -> None:
    missing = []
    for path, parser in _subparsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if not action.help:
                missing.append(f"auditor {' '.join(path)} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


EMPTY_LISTINGS = [
    (["audits", "list"], "no audit records match these filters"),
    (["review", "queue"], "the review queue is empty for these filters"),
    (["holds", "list"], "no legal holds active (--all shows released ones)"),
    (["access-log", "--action", "export"], "no access-log entries match"),
    (["reaudit", "list"], "no re-audit jobs yet"),
    (["alerts", "rules"], "no alert rules (add one with `auditor alerts add`)"),
    (["alerts", "list"], "no alerts fired"),
    (["trends", "--since", "2d"], "no records between"),
]


@pytest.mark.parametrize(("argv", "message"), EMPTY_LISTINGS)
def test_empty_listings_say_so(empty_store, capsys, argv, message) -> None:
    assert main(argv) == 0
    assert capsys.readouterr().out.strip().startswith(message)


JSON_COMMANDS = [["audits", "list", "--json"], ["review", "queue", "--json"], ["holds", "list", "--json"],
                 ["access-log", "--json"], ["reaudit", "list", "--json"], ["alerts", "rules", "--json"],
                 ["alerts", "list", "--json"], ["trends", "--json"], ["rules", "list", "--json"],
                 ["audit", "verify-chain", "--json"], ["audit", "purge", "--dry-run", "--json"]]


@pytest.mark.parametrize("argv", JSON_COMMANDS)
def test_json_prints_json_alone(empty_store, capsys, argv) -> None:
    main(["db", "upgrade"])
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    if argv[:2] == ["audits", "list"]:
        assert all(json.loads(line) for line in out.splitlines())   # JSON lines, one record each
    else:
        json.loads(out)
