"""A throwaway PostgreSQL schema: tests and benchmarks each get an empty audit store inside a shared
database (the `test` database CI provides) and leave nothing behind."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError


@contextmanager
def scratch_schema(postgres_url: str, *, prefix: str = "auditor_scratch") -> Iterator[str]:
    """Create a fresh schema, yield a URL whose connections use it (search_path), drop it afterwards."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    separator = "&" if "?" in postgres_url else "?"
    try:
        yield f"{postgres_url}{separator}options=-csearch_path%3D{schema}"
    finally:
        drop_schema(admin, schema)
        admin.dispose()


def drop_schema(admin: Engine, schema: str, *, attempts: int = 5) -> None:
    """DROP SCHEMA ... CASCADE, retried: a background thread of an app still shutting down (an outbox pass, a
    rule-pack refresh) can hold a lock the drop needs and make PostgreSQL pick the drop as a deadlock victim."""
    for attempt in range(attempts):
        try:
            with admin.connect() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            return
        except OperationalError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
