"""Alert rules and alerts for the API and CLI: create, list, disable rules; list fired alerts.

Tenancy: a rule whose filter names a tenant (`... for tenant=beta`) is that tenant's, and so are the alerts it
fired; a rule without one watches every tenant and is the admins' alone. A tenant's reader sees its tenant's
rules and alerts only. Webhook URLs are shown redacted to everyone (`auditor.alerts.webhooks`). A rule's
signing secret is made at creation and shown in that answer only (`auditor.alerts.signing`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import ColumnElement, select, update

from auditor.alerts import payload as payloads
from auditor.alerts.delivery import Outcome, Poster, post_http, send
from auditor.alerts.engine import rule_secret
from auditor.alerts.models import Alert, AlertRule
from auditor.alerts.rules import AlertRuleIn, parse_expression
from auditor.alerts.signing import new_secret, seal
from auditor.alerts.webhooks import redact_url, scrub_url, url_fingerprint
from auditor.store.base import new_id, utcnow
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
    tenant: str | None              # the tenant the rule watches; None: every tenant (admins only)
    webhook_url: str                # redacted: scheme, host and port; never the path, query or user info
    webhook_fingerprint: str        # first 16 hex digits of the full URL's SHA-256
    signed: bool                    # deliveries carry Auditor-Signature (rules from before signing: not)
    severity: str
    enabled: bool
    cooldown_s: int
    created_at: datetime
    created_by: dict[str, Any] | None
    state: str
    last_value: float | None
    last_fired_at: datetime | None


class AlertRuleCreated(AlertRuleOut):
    signing_secret: str             # shown this once: receivers verify Auditor-Signature with it


class AlertOut(BaseModel):
    id: str
    rule_id: int
    fired_at: datetime
    value: float | None
    details: dict[str, Any] | None
    event_id: str | None
    delivery: str                   # pending | retrying | delivered | dead
    attempts: int
    last_error: str | None
    delivered_at: datetime | None


def _rule_out(row: AlertRule) -> AlertRuleOut:
    values = {name: getattr(row, name) for name in AlertRuleOut.model_fields
              if name not in ("tenant", "webhook_url", "webhook_fingerprint", "signed", "severity")}
    return AlertRuleOut(**values, tenant=_watched_tenant(row.filters), webhook_url=redact_url(row.webhook_url),
                        webhook_fingerprint=url_fingerprint(row.webhook_url), signed=row.signing_secret is not None,
                        severity=row.severity or payloads.default_severity(row.metric))


def _watched_tenant(filters: dict[str, Any] | None) -> str | None:
    tenant = (filters or {}).get("tenant")
    return str(tenant) if tenant is not None else None


def _visible_to(tenant_scope: str | None) -> ColumnElement[bool] | None:
    """Rules a reader scoped to `tenant_scope` may see (None: an admin, every rule)."""
    if tenant_scope is None:
        return None
    return AlertRule.filters["tenant"].as_string() == tenant_scope


def create_rule(database: Database, actor: Reader, rule: AlertRuleIn) -> AlertRuleCreated:
    spec = parse_expression(rule.expression)
    secret = new_secret()
    with database.session(write=True) as session:
        row = AlertRule(name=rule.name, expression=rule.expression, metric=spec.metric, op=spec.op,
                        threshold=spec.threshold, window_s=spec.window_s, filters=spec.filters,
                        webhook_url=rule.webhook_url, signing_secret=seal(secret, database.chain_key.hmac_key),
                        severity=rule.severity or payloads.default_severity(spec.metric), enabled=True, cooldown_s=rule.cooldown_s, created_at=utcnow(),
                        created_by={"key_id": actor.key_id, "tenant": actor.tenant, "role": actor.role},
                        next_check_at=utcnow(), state="ok")
        session.add(row)
        session.flush()
        return AlertRuleCreated(**_rule_out(row).model_dump(), signing_secret=secret)


def list_rules(database: Database, reader: Reader, *, include_disabled: bool = False) -> list[AlertRuleOut]:
    with database.session() as session:
        query = select(AlertRule).order_by(AlertRule.id)
        if not include_disabled:
            query = query.where(AlertRule.enabled.is_(True))
        if (visible := _visible_to(reader.tenant_scope)) is not None:
            query = query.where(visible)
        return [_rule_out(r) for r in session.execute(query).scalars()]


def disable_rule(database: Database, rule_id: int) -> AlertRuleOut:
    with database.session(write=True) as session:
        if session.execute(update(AlertRule).where(AlertRule.id == rule_id).values(enabled=False)).rowcount == 0:
            raise AlertRuleNotFound(f"no alert rule {rule_id}")
        return _rule_out(session.get(AlertRule, rule_id))


def list_alerts(database: Database, reader: Reader, *, rule_id: int | None = None, limit: int = 50) -> list[AlertOut]:
    with database.session() as session:
        query = (select(Alert, AlertRule.webhook_url).join(AlertRule, AlertRule.id == Alert.rule_id)
                 .order_by(Alert.fired_at.desc()).limit(limit))
        if rule_id is not None:
            query = query.where(Alert.rule_id == rule_id)
        if (visible := _visible_to(reader.tenant_scope)) is not None:
            query = query.where(visible)
        shown = []
        for alert, webhook_url in session.execute(query):
            out = AlertOut.model_validate(alert, from_attributes=True)
            # errors stored before delivery scrubbed them may still quote the URL
            if out.last_error:
                out.last_error = scrub_url(out.last_error, webhook_url)
            shown.append(out)
        return shown


def send_test(database: Database, rule_id: int, *, public_url: str | None = None,
              post: Poster = post_http) -> Outcome:
    """POST a signed payload marked `"test": true` to the rule's webhook, once (nothing is recorded)."""
    with database.session() as session:
        rule = session.get(AlertRule, rule_id)
        if rule is None:
            raise AlertRuleNotFound(f"no alert rule {rule_id}")
    now = utcnow()
    details = {"rule": {"id": rule.id, "name": rule.name, "expression": rule.expression}, "metric": rule.metric,
               "value": None, "threshold": rule.threshold, "op": rule.op,
               "window": {"seconds": rule.window_s, "since": now.isoformat(), "until": now.isoformat()},
               "filters": rule.filters or {}, "record_ids": [], "record_count": 0}
    body = payloads.build(alert_id=new_id(), fired_at=now.isoformat(), attempt=1, details=details,
                          severity=rule.severity, public_url=public_url, test=True)
    try:
        secret = rule_secret(database, rule.signing_secret)
    except ValueError as exc:
        return Outcome(None, str(exc))
    return send(rule.webhook_url, body, secret, post)
