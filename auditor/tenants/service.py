"""Read and change tenant settings.

Why a table and not an environment variable keyed by tenant: the API processes and every Celery worker
must agree on a tenant's mode, and an admin must be able to change it without restarting them all; the
store is the one thing they already share. Each audit record also keeps the mode it ran under (inside its
hash-chained `details`), so a later change never rewrites what an old request was subject to.
"""

from __future__ import annotations

from typing import Literal, get_args

from sqlalchemy.orm import Session

from auditor.store.base import utcnow
from auditor.tenants.models import TenantSettings

DetectionMode = Literal["detect", "require", "off"]
DETECTION_MODES: tuple[str, ...] = get_args(DetectionMode)


class UnknownDetectionMode(ValueError):
    """A mode other than detect, require or off."""


def detection_mode(session: Session, tenant: str, *, default: str) -> str:
    """The tenant's domain-detection mode, or `default` when the tenant has not chosen one."""
    row = session.get(TenantSettings, tenant)
    return row.domain_detection if row is not None and row.domain_detection else default


def set_detection_mode(session: Session, tenant: str, mode: str | None, *, by: str | None) -> None:
    """Choose the tenant's mode (None: back to the service default). The caller commits."""
    if mode is not None and mode not in DETECTION_MODES:
        raise UnknownDetectionMode(f"unknown domain-detection mode {mode!r}; choose one of {', '.join(DETECTION_MODES)}")
    row = session.get(TenantSettings, tenant)
    if row is None:
        session.add(TenantSettings(tenant=tenant, domain_detection=mode, updated_at=utcnow(), updated_by=by))
    else:
        row.domain_detection, row.updated_at, row.updated_by = mode, utcnow(), by


def all_settings(session: Session) -> list[TenantSettings]:
    return list(session.query(TenantSettings).order_by(TenantSettings.tenant))
