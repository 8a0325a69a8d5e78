"""The whole audit schema: every room's tables registered on one `Base.metadata`.

Alembic's environment and the schema tests import this, so a table added to any room is never missed."""

from __future__ import annotations

import auditor.auth.models  # noqa: F401
import auditor.jobs.models  # noqa: F401
import auditor.tenants.models  # noqa: F401
import auditor.trail.models  # noqa: F401
from auditor.store.base import Base

metadata = Base.metadata
