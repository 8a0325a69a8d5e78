"""Inserting many rows at once: PostgreSQL's COPY for large batches, an executemany INSERT otherwise.

COPY streams rows in PostgreSQL's own format instead of one bound statement per row; for the trail's
wide rows it is several times faster than executemany (see `benchmarks/trail_scale.py`). Both paths
write the same values: JSON columns are serialised as the engine's JSON type serialises them
(canonical JSON; None is SQL NULL), and the rows join the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Connection, Table, insert

COPY_THRESHOLD = 64   # below this, COPY's setup costs more than it saves


def bulk_insert(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    if not rows:
        return
    if conn.dialect.name != "postgresql" or len(rows) < COPY_THRESHOLD:
        conn.execute(insert(table), list(rows))
        return
    # Columns the rows name, in table order; server-side defaults (serial ids) fill the rest.
    named = set().union(*(row.keys() for row in rows))
    columns = [column for column in table.columns if column.name in named]
    json_columns = {column.name for column in columns if isinstance(column.type, JSON)}
    names = ", ".join(f'"{column.name}"' for column in columns)
    cursor = conn.connection.driver_connection.cursor()
    with cursor.copy(f'COPY "{table.name}" ({names}) FROM STDIN') as copy:
        for row in rows:
            copy.write_row([_json(row.get(c.name)) if c.name in json_columns else row.get(c.name) for c in columns])


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
