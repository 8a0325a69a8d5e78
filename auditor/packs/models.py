"""The rule-pack registry table: every pack version the service has used, with its content, and which one
is active per domain. Activations are chained events (`auditor.trail.events`); this table is their state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from auditor.store.base import Base, utcnow


class RulePackVersion(Base):
    __tablename__ = "rule_packs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    domain: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64), index=True)
    body: Mapped[dict[str, Any]]                        # the validated pack, so any process can load it by hash
    source: Mapped[str | None] = mapped_column(String(512))
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)
    active: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    activated_at: Mapped[datetime | None]

    __table_args__ = (UniqueConstraint("domain", "hash"),)
