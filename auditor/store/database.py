"""One SQLAlchemy engine + sessionmaker per database URL, and the Alembic upgrade used by the CLI and app.

SQLite gets WAL, foreign keys and a busy timeout; writers that need the chain head open their
transaction with BEGIN IMMEDIATE (see `Database.write_connection`) so appends are serialised across
processes instead of failing with SQLITE_BUSY on lock upgrade.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

import migrations

_IMMEDIATE = "auditor_begin_immediate"


class Database:
    def __init__(self, url: str, *, sqlite_synchronous: str = "FULL", echo: bool = False) -> None:
        self.url = url
        self.is_sqlite = make_url(url).get_backend_name() == "sqlite"
        self.engine: Engine = _make_engine(url, sqlite_synchronous=sqlite_synchronous, echo=echo)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[Session]:
        """A session whose transaction commits on success and rolls back on error.

        `write=True` for a session that reads and then writes (e.g. a read of the trail that logs
        itself): on SQLite it takes the write lock at BEGIN, because a WAL read transaction that
        later writes fails at once with "database is locked" if another writer committed in between
        (the busy timeout does not apply to that case)."""
        with self.sessionmaker() as session, session.begin():
            if write and self.is_sqlite:
                session.connection(execution_options={_IMMEDIATE: True})
            yield session

    @contextmanager
    def write_connection(self) -> Iterator[Connection]:
        """A connection in a transaction that holds the database write lock on SQLite from its start."""
        with self.engine.connect() as conn:
            if self.is_sqlite:
                conn.execution_options(**{_IMMEDIATE: True})
            with conn.begin():
                yield conn

    def upgrade(self, revision: str = "head") -> None:
        command.upgrade(alembic_config(self), revision)

    def dispose(self) -> None:
        self.engine.dispose()


def alembic_config(database: Database) -> Config:
    """Alembic config built in code so `auditor db upgrade` works from an installed package."""
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    # Passed as an attribute, not an ini option: configparser would choke on '%' in URLs.
    config.attributes["engine"] = database.engine
    return config


def _json_serializer(value: Any) -> str:
    # Non-ASCII kept as is, so text search over stored JSON (claims) matches what people type.
    return json.dumps(value, ensure_ascii=False)


def _make_engine(url: str, *, sqlite_synchronous: str, echo: bool) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, echo=echo, pool_pre_ping=True, json_serializer=_json_serializer)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, echo=echo, json_serializer=_json_serializer,
                           connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Driver-level autocommit so SQLAlchemy's "begin" event below decides how transactions start.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={sqlite_synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_IMMEDIATE) else "BEGIN")

    return engine
