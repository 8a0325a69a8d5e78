"""Helpers shared by the CLI subcommands: settings and database with one-line errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from auditor.cli import CliError
from auditor.settings import Settings, get_settings
from auditor.store.database import Database

T = TypeVar("T")


def load_settings() -> Settings:
    try:
        return get_settings()
    except (ValidationError, ValueError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise CliError(f"invalid settings: {first}") from exc


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


def in_session(work: Callable[[Session], T], *, user_errors: tuple[type[Exception], ...] = ()) -> T:
    """Open the configured store, run `work` in one committed session, and turn both driver errors and the
    given service errors (a bad id, role, reason) into one-line CLI errors."""
    database = open_database(load_settings())
    try:
        with database.session() as session:
            return guarded(work, session)
    except user_errors as exc:
        raise CliError(str(exc)) from exc
