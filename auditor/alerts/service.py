"""Alert rules and alerts for the API and CLI: create, list, disable rules; list fired alerts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select, update

from auditor.alerts.models import Alert, AlertRule
from auditor.alerts.rules import AlertRuleIn, parse_expression
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.access_log import Reader


class AlertRuleNotFound(LookupError):
    pass


class AlertRuleOut(BaseModel):
    id: int
    name: str
    expression: str
    metric: str
    op: str
    threshold: float
    window_s: int
    filters: dict[str, Any] | None
    webhook_url: str
    enabled: bool
    cooldown_s: int
    created_at: datetime
    created_by: dict[str, Any] | None
    state: str
    last_value: float | None
    last_fired_at: datetime | None


class AlertOut(BaseModel):
    id: str
    rule_id: int
    fired_at: datetime
    value: float | None
    details: dict[str, Any] | None
    event_id: str | None
    delivery: str
    attempts: int
    last_error: str | None
    delivered_at: datetime | None


def create_rule(database: Database, actor: Reader, rule: AlertRuleIn) -> AlertRuleOut:
    spec = parse_expression(rule.expression)
    with database.session(write=True) as session:
        row = AlertRule(name=rule.name, expression=rule.expression, metric=spec.metric, op=spec.op,
                        threshold=spec.threshold, window_s=spec.window_s, filters=spec.filters,
                        webhook_url=rule.webhook_url, enabled=True, cooldown_s=rule.cooldown_s, created_at=utcnow(),
                        created_by={"key_id": actor.key_id, "tenant": actor.tenant, "role": actor.role},
                        next_check_at=utcnow(), state="ok")
        session.add(row)
        session.flush()
        return AlertRuleOut.model_validate(row, from_attributes=True)


def list_rules(database: Database, *, include_disabled: bool = False) -> list[AlertRuleOut]:
    with database.session() as session:
        query = select(AlertRule).order_by(AlertRule.id)
        if not include_disabled:
            query = query.where(AlertRule.enabled.is_(True))
        return [AlertRuleOut.model_validate(r, from_attributes=True) for r in session.execute(query).scalars()]


def disable_rule(database: Database, rule_id: int) -> AlertRuleOut:
    with database.session(write=True) as session:
        if session.execute(update(AlertRule).where(AlertRule.id == rule_id).values(enabled=False)).rowcount == 0:
            raise AlertRuleNotFound(f"no alert rule {rule_id}")
        return AlertRuleOut.model_validate(session.get(AlertRule, rule_id), from_attributes=True)


def list_alerts(database: Database, *, rule_id: int | None = None, limit: int = 50) -> list[AlertOut]:
    with database.session() as session:
        query = select(Alert).order_by(Alert.fired_at.desc()).limit(limit)
        if rule_id is not None:
            query = query.where(Alert.rule_id == rule_id)
        return [AlertOut.model_validate(a, from_attributes=True) for a in session.execute(query).scalars()]
