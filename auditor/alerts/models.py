"""Alert rules and the alerts they fired (delivery state per alert; the firing itself is a chained event)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from auditor.store.base import Base, new_id, utcnow


class AlertRule(Base):
    __tablename__ = "alert_rules"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    expression: Mapped[str] = mapped_column(Text)               # as written: "fer > 0.2 over 1h for domain=medical"
    metric: Mapped[str] = mapped_column(String(32))
    op: Mapped[str] = mapped_column(String(2))
    threshold: Mapped[float] = mapped_column(Float)
    window_s: Mapped[int] = mapped_column(Integer)
    filters: Mapped[dict[str, Any] | None]
    webhook_url: Mapped[str] = mapped_column(String(2048))
    # sealed (auditor.alerts.signing); None: a rule from before signing, whose deliveries go unsigned
    signing_secret: Mapped[str | None] = mapped_column(Text)
    severity: Mapped[str | None] = mapped_column(String(16))    # info | warning | critical, sent with each alert
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    cooldown_s: Mapped[int] = mapped_column(Integer)            # a firing rule fires again only after this
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    created_by: Mapped[dict[str, Any] | None]
    next_check_at: Mapped[datetime] = mapped_column(default=utcnow)
    state: Mapped[str] = mapped_column(String(16), default="ok")   # ok | firing
    last_value: Mapped[float | None] = mapped_column(Float)
    last_fired_at: Mapped[datetime | None]
    watermark_seq: Mapped[int | None] = mapped_column(BigInteger)  # event rules: records up to here were seen


class Alert(Base):
    __tablename__ = "alerts"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    rule_id: Mapped[int] = mapped_column(ForeignKey("alert_rules.id"), index=True)
    fired_at: Mapped[datetime] = mapped_column(default=utcnow)
    value: Mapped[float | None] = mapped_column(Float)
    details: Mapped[dict[str, Any] | None]
    event_id: Mapped[str | None] = mapped_column(String(36))     # the chained "alert" event
    # pending (never tried) | retrying | delivered | dead (gave up: last retry failed, or the receiver said 410)
    delivery: Mapped[str] = mapped_column(String(16), index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[datetime | None]
