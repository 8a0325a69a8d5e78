"""Where a record's domain came from, as stored inside its hash-chained `details`.

`details["domain_resolution"]` = {"source": "given" | "detected" | "none", "mode": detect | require | off | null,
"detection": the detector's scores and evidence (or null), "verified_under": the domains whose validators ran}.
Records written before domain detection existed have no such entry: their source is "given" when they name a
domain and "none" otherwise, which is what `source_of` and `source_condition` read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, or_

from auditor.trail.models import AuditRecord
from auditor.trail.stored_json import readable_json

DETAILS_KEY = "domain_resolution"
DomainSource = Literal["given", "detected", "none"]


def resolution_details(*, source: str, mode: str | None, detection: Mapping[str, Any] | None = None,
                       verified_under: list[str] | None = None) -> dict[str, Any]:
    return {DETAILS_KEY: {"source": source, "mode": mode, "detection": dict(detection) if detection else None,
                          "verified_under": list(verified_under or [])}}


def resolution_of(details: Mapping[str, Any] | None) -> dict[str, Any] | None:
    value = (details or {}).get(DETAILS_KEY)
    return value if isinstance(value, dict) else None


def source_of(details: Mapping[str, Any] | None, domain: str | None) -> str:
    resolution = resolution_of(details)
    if resolution is not None and resolution.get("source") in ("given", "detected", "none"):
        return str(resolution["source"])
    return "given" if domain else "none"


def source_condition(source: str) -> ColumnElement[bool]:
    """SQL for "records whose domain source is `source`" (legacy records included, see the module docstring)."""
    # readable_json: one row whose details PostgreSQL cannot read must not fail the filter for every tenant
    stored = readable_json(AuditRecord.details)[DETAILS_KEY]["source"].as_string()
    legacy = and_(stored.is_(None), AuditRecord.domain.is_not(None) if source == "given" else AuditRecord.domain.is_(None))
    if source == "detected":
        return stored == "detected"
    return or_(stored == source, legacy)
