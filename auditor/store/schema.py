"""The whole audit schema: every room's tables registered on one `Base.metadata`.

Alembic's environment and the schema tests import this, so a table added to any room is never missed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import auditor.alerts.models  # noqa: F401
import auditor.auth.models  # noqa: F401
import auditor.jobs.models  # noqa: F401
import auditor.kg.models  # noqa: F401
import auditor.packs.models  # noqa: F401
import auditor.tenants.models  # noqa: F401
import auditor.trail.models  # noqa: F401
from auditor.store.base import Base

metadata = Base.metadata


def include_object_for(dialect: str) -> Callable[..., bool]:
    """An Alembic `include_object` hook that leaves out what a model declares for another dialect only
    (`Index(...).ddl_if(dialect="postgresql")`, e.g. the pg_trgm index), so comparing the models with a
    migrated SQLite store does not ask for it."""

    def include(obj: Any, _name: str | None, _type: str, _reflected: bool, _compare_to: Any) -> bool:
        condition = getattr(obj, "_ddl_if", None)
        return condition is None or condition.dialect is None or condition.dialect == dialect

    return include
