"""A throwaway PostgreSQL schema: tests and benchmarks each get an empty audit store inside a shared
database (the `test` database CI provides) and leave nothing behind."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text


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
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
