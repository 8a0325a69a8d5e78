"""The tenant-settings table: one row per tenant that departs from the service-wide defaults."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from auditor.store.base import Base, utcnow


class TenantSettings(Base):
    __tablename__ = "tenant_settings"

    tenant: Mapped[str] = mapped_column(String(128), primary_key=True)
    # detect | require | off; None: the service default (AUDITOR_DOMAIN_DETECTION)
    domain_detection: Mapped[str | None] = mapped_column(String(16))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_by: Mapped[str | None] = mapped_column(String(128))   # key id or "cli"
