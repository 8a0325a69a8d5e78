"""One SQLAlchemy engine + sessionmaker per database URL, and the Alembic upgrade used by the CLI and app.

SQLite gets WAL, foreign keys and a busy timeout; writers that need the chain head open their
transaction with BEGIN IMMEDIATE (see `Database.write_connection`) so appends are serialised across
processes instead of failing with SQLITE_BUSY on lock upgrade.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

import migrations
from auditor.settings import Settings
from auditor.store.signing_key import SigningKey, SigningKeyFile

if TYPE_CHECKING:   # alembic is imported where migrations run: an engine core that reads KG versions never does
    from alembic.config import Config

_IMMEDIATE = "auditor_begin_immediate"
_SQLITE_BUSY_TIMEOUT_MS = 30_000   # batch work (imports, purges) may wait this long for the write lock


@dataclass(frozen=True, slots=True)
class ChainKey:
    """What signs the trail's ledgers: the HMAC key and how often a signed checkpoint is written."""

    hmac_key: bytes
    checkpoint_interval: int = 100
    # The Ed25519 key that signs bundles (loaded on first use); None: this store signs no bundles.
    signing_key: SigningKey | SigningKeyFile | None = None


class ChainKeyMissing(RuntimeError):
    """A chained write on a store opened without the chain key."""


class Database:
    def __init__(self, url: str, *, sqlite_synchronous: str = "FULL", echo: bool = False,
                 chain_key: ChainKey | None = None) -> None:
        self.url = url
        self.is_sqlite = make_url(url).get_backend_name() == "sqlite"
        self.engine: Engine = _make_engine(url, sqlite_synchronous=sqlite_synchronous, echo=echo)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)
        self._chain_key = chain_key

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        signing_key = SigningKeyFile.for_settings(settings.signing_key_file, environment=settings.environment,
                                                  database_url=settings.database_url)
        key = ChainKey(settings.hmac_key.get_secret_value().encode(), settings.checkpoint_interval, signing_key)
        return cls(settings.database_url, sqlite_synchronous=settings.sqlite_synchronous, chain_key=key)

    @property
    def chain_key(self) -> ChainKey:
        if self._chain_key is None:
            raise ChainKeyMissing("this audit store was opened without the chain key (Database.from_settings)")
        return self._chain_key

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
    def write_connection(self, *, timeout_s: float | None = None) -> Iterator[Connection]:
        """A connection in a transaction that holds the database write lock on SQLite from its start.

        `timeout_s` bounds how long it may wait for locks and run statements (the request path passes
        `store_timeout_s`, so a stuck store answers 503 instead of hanging): SQLite's busy timeout for
        the write lock; PostgreSQL's lock_timeout and statement_timeout, for this transaction only."""
        with self.engine.connect() as conn:
            if self.is_sqlite:
                conn.execution_options(**{_IMMEDIATE: True})
                if timeout_s is not None:
                    _sqlite_busy_timeout(conn, int(timeout_s * 1000))
            try:
                with conn.begin():
                    if timeout_s is not None and not self.is_sqlite:
                        milliseconds = int(timeout_s * 1000)
                        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {milliseconds}")
                        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {milliseconds}")
                    yield conn
            finally:
                if self.is_sqlite and timeout_s is not None:   # pooled connections keep their pragmas
                    _sqlite_busy_timeout(conn, _SQLITE_BUSY_TIMEOUT_MS)

    @contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """A read-only connection that sees one consistent state for its whole life: REPEATABLE READ on
        PostgreSQL (READ COMMITTED would let appends and purges land between statements), a single read
        transaction on SQLite (WAL readers see the database as of their first read)."""
        with self.engine.connect() as conn:
            if self.is_sqlite:
                with conn.begin():
                    yield conn
                return
            conn = conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            with conn.begin():
                yield conn

    def upgrade(self, revision: str = "head", *, hmac_key: bytes | None = None) -> None:
        """Migrate; with the HMAC key, revisions that start a ledger over existing rows sign its head."""
        from alembic import command

        config = alembic_config(self)
        config.attributes["hmac_key"] = hmac_key
        command.upgrade(config, revision)

    def dispose(self) -> None:
        self.engine.dispose()


def _sqlite_busy_timeout(conn: Connection, milliseconds: int) -> None:
    # On the driver connection: through SQLAlchemy, the statement would begin a transaction before BEGIN IMMEDIATE.
    conn.connection.driver_connection.execute(f"PRAGMA busy_timeout={milliseconds}")


def alembic_config(database: Database) -> Config:
    """Alembic config built in code so `auditor db upgrade` works from an installed package."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    # Passed as an attribute, not an ini option: configparser would choke on '%' in URLs.
    config.attributes["engine"] = database.engine
    return config


def _json_serializer(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces, non-ASCII as is): the trail's verification hashes stored JSON
    text as it is when it is in this form, instead of parsing and re-encoding every row."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _make_engine(url: str, *, sqlite_synchronous: str, echo: bool) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        # connect_timeout: an unreachable server fails the request path fast instead of after the OS's TCP timeout.
        return create_engine(url, echo=echo, pool_pre_ping=True, json_serializer=_json_serializer,
                             connect_args={"connect_timeout": 5})
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
        cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_IMMEDIATE) else "BEGIN")

    return engine
