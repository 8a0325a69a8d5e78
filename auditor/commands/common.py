"""Helpers shared by the CLI subcommands: settings and database with one-line errors."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from auditor.cli import CliError
from auditor.jobs.settings import WorkerSettings
from auditor.settings import Settings, get_settings
from auditor.store.database import Database

T = TypeVar("T")


def load_settings() -> Settings:
    try:
        settings = get_settings()
    except ValidationError as exc:
        raise CliError(_invalid_setting(exc, "AUDITOR_")) from exc
    except ValueError as exc:
        raise CliError(f"invalid settings: {exc}") from exc
    # AUDITOR_WORKER_* are read where they are used (the app's start, the worker); checked here too, so a bad
    # one is this one line, not a traceback when the app starts
    try:
        WorkerSettings()
    except ValidationError as exc:
        raise CliError(_invalid_setting(exc, "AUDITOR_WORKER_")) from exc
    return settings


def _invalid_setting(exc: ValidationError, prefix: str) -> str:
    """The first error, naming the variable it came from (a check across settings has none to name)."""
    error = exc.errors()[0]
    name = prefix + "_".join(str(part) for part in error["loc"]).upper() if error["loc"] else None
    return f"invalid settings: {name}: {error['msg']}" if name else f"invalid settings: {error['msg']}"


def open_database(settings: Settings, *, migrate: bool = True) -> Database:
    database = Database.from_settings(settings)
    if migrate and settings.auto_migrate:
        guarded(database.upgrade, hmac_key=settings.hmac_key.get_secret_value().encode())
    return database


def guarded(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a database operation, turning driver errors into one-line CLI errors."""
    try:
        return function(*args, **kwargs)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise CliError(f"audit store error: {reason}") from exc


def in_session(work: Callable[[Session], T], *, user_errors: tuple[type[Exception], ...] = (),
               write: bool = False) -> T:
    """Open the configured store, run `work` in one committed session, and turn both driver errors and the
    given service errors (a bad id, role, reason) into one-line CLI errors. `write=True` for work that reads
    and then writes, so a running service's commits in between cannot fail it on SQLite (Database.session)."""
    database = open_database(load_settings())
    try:
        with database.session(write=write) as session:
            return guarded(work, session)
    except user_errors as exc:
        raise CliError(str(exc)) from exc


# -- output: every listing has a header and says so when it is empty; --json prints JSON alone -------------


def print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, default=_json_default, indent=2))


def print_json_lines(values: Iterable[Any]) -> None:
    for value in values:
        print(json.dumps(value, ensure_ascii=False, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return str(value)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str) -> None:
    """Aligned columns under a header line, or the empty-state message when there are no rows."""
    if not rows:
        print(empty)
        return
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max(len(str(h)), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    print("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(value.ljust(w) for value, w in zip(row, widths, strict=True)).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def add_json_flag(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON only (nothing else on stdout)")


def validation_message(exc: ValidationError, *, option_prefix: str = "--") -> str:
    """A pydantic error as one CLI line naming the option: "--fer-min: Input should be ..."."""
    first = exc.errors()[0]
    loc = [str(part) for part in first["loc"] if not isinstance(part, int)]
    option = option_prefix + "-".join(loc).replace("_", "-") if loc else "input"
    return f"{option}: {first['msg']}"
