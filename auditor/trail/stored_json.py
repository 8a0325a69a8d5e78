"""A JSON column as SQL may read it even when one row holds text PostgreSQL cannot convert.

PostgreSQL's `json` type keeps the text it was given, and `\\u0000` is valid JSON, so such a value can be stored
(rows written before imports refused NUL, or by someone with database access). But every `->`, `->>` or `#>>`
on that value fails with "unsupported Unicode escape sequence", and a filter or sum over the column then fails
for the whole query: one tenant's row breaks every tenant's reads. `readable_json(column)` reads such a value
as SQL NULL instead (its JSON-derived fields read as absent, as for a row without them); the row itself is
still listed, shown and verified from Python, which reads the escape as it was chained. SQLite needs nothing.

The test is cheap for the rows that need none: `strpos` over the stored text, the regular expression (a
`\\u0000` preceded by an even number of backslashes, i.e. an escape and not the text "\\\\u0000") only where it hits.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, ColumnElement
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.visitors import InternalTraversal

# A literal for PostgreSQL with standard_conforming_strings (the default since 9.1): backslashes are as written.
_NUL_ESCAPE = r"'\u0000'"
_UNESCAPED_NUL = r"'(^|[^\\])(\\\\)*\\u0000'"


class _ReadableJson(ColumnElement[Any]):
    inherit_cache = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement)]

    def __init__(self, column: ColumnElement[Any]) -> None:
        self.column = column
        self.type = JSON(none_as_null=True)


def readable_json(column: Any) -> ColumnElement[Any]:
    """`column` (a JSON column) for reading its fields in SQL; see the module docstring."""
    return _ReadableJson(column)


@compiles(_ReadableJson)
def _as_is(element: _ReadableJson, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.column, **kw)


@compiles(_ReadableJson, "postgresql")
def _nul_as_null(element: _ReadableJson, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    return (f"(CASE WHEN strpos(({column})::text, {_NUL_ESCAPE}) = 0 THEN {column} "
            f"WHEN ({column})::text ~ {_UNESCAPED_NUL} THEN NULL ELSE {column} END)")
