"""Checking alert rules and delivering the alerts they fire.

`run_due` runs on every dispatcher pass (the embedded worker's and each Celery worker's): it claims the
rules whose check is due with a conditional UPDATE (so two workers never check the same rule at once),
computes each rule's metric over its window of current verdicts, and fires when the condition holds and
the rule is not already firing (or has been firing longer than its cooldown). Firing writes the alert row
(with the ids of the records that made it fire) and a chained "alert" event in one commit. Delivery is
separate and retried, an outbox of its own: each due alert is POSTed, signed, to the rule's webhook
(`auditor.alerts.delivery`); a failure marks it `retrying` and schedules the next attempt after the next delay
of `alert_retry_delays_s`; after the last one, or at once on 410 Gone, it is `dead`, with the error kept.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select, update

from auditor.alerts import payload as payloads
from auditor.alerts.delivery import Outcome, Poster, post_http, send
from auditor.alerts.models import Alert, AlertRule
from auditor.alerts.rules import AlertSpec
from auditor.alerts.signing import unseal
from auditor.store.base import new_id, utcnow
from auditor.store.database import Database
from auditor.trail.events import append_event
from auditor.trail.schemas import RecordFilter
from auditor.trail.trends import window_totals
from auditor.trail.verdicts import aware

logger = logging.getLogger("auditor.alerts")


class _System:
    tenant, key_id, role, tenant_scope = "(alerts)", None, "system", None


class AlertSchedule:
    """What a dispatcher pass needs to run the alert rules: the check period, the retry delays, the links' base."""

    def __init__(self, *, check_interval_s: float, retry_delays_s: list[float], post: Poster = post_http,
                 public_url: str | None = None) -> None:
        self.check_interval_s, self.retry_delays_s, self.post = check_interval_s, list(retry_delays_s), post
        self.public_url = public_url

    @classmethod
    def from_settings(cls, settings: Any) -> AlertSchedule:
        return cls(check_interval_s=settings.alert_check_interval_s, retry_delays_s=settings.alert_retry_delays_s,
                   public_url=settings.public_url)

    def run(self, database: Database) -> dict[str, int]:
        return run_due(database, check_interval_s=self.check_interval_s, retry_delays_s=self.retry_delays_s,
                       post=self.post, public_url=self.public_url)


def run_due(database: Database, *, check_interval_s: float, retry_delays_s: list[float], post: Poster = post_http,
            now: datetime | None = None, public_url: str | None = None) -> dict[str, int]:
    """Check the due rules, then deliver what is pending. Returns counts (checked, fired, delivered, failed)."""
    now = now or utcnow()
    checked = fired = 0
    for rule_id in _claim_due(database, now, check_interval_s):
        checked += 1
        fired += _check(database, rule_id, now)
    delivered, failed = deliver_pending(database, retry_delays_s=retry_delays_s, post=post, now=now,
                                        public_url=public_url)
    return {"checked": checked, "fired": fired, "delivered": delivered, "failed": failed}


def _claim_due(database: Database, now: datetime, interval_s: float) -> list[int]:
    with database.session(write=True) as session:
        due = session.execute(select(AlertRule.id, AlertRule.next_check_at).where(
            AlertRule.enabled.is_(True), AlertRule.next_check_at <= now)).all()
        claimed = []
        for rule_id, at in due:
            won = session.execute(update(AlertRule).where(AlertRule.id == rule_id, AlertRule.next_check_at == at)
                                  .values(next_check_at=now + timedelta(seconds=interval_s))).rowcount
            if won:
                claimed.append(rule_id)
        return claimed


def _check(database: Database, rule_id: int, now: datetime) -> int:
    with database.write_connection() as conn:
        rule = conn.execute(select(AlertRule.__table__).where(AlertRule.id == rule_id)).one()
        spec = AlertSpec(rule.metric, rule.op, rule.threshold, rule.window_s, rule.filters or {})
        totals = window_totals(conn, RecordFilter.model_validate(spec.filters),
                               since=now - timedelta(seconds=spec.window_s), until=now)
        value = totals[spec.metric]
        holds = spec.holds(value)
        values: dict[str, Any] = {"last_value": value}
        fire = holds and (rule.state != "firing" or rule.last_fired_at is None
                          or aware(rule.last_fired_at) + timedelta(seconds=rule.cooldown_s) <= now)
        if fire:
            _fire(conn, database, rule, spec, value, totals, now)
            values.update(state="firing", last_fired_at=now)
        elif not holds:
            values["state"] = "ok"
        conn.execute(update(AlertRule).where(AlertRule.id == rule_id).values(**values))
        return int(fire)


def _fire(conn: Connection, database: Database, rule: Any, spec: AlertSpec, value: float | None,
          totals: dict[str, Any], now: datetime) -> None:
    alert_id = new_id()
    since = now - timedelta(seconds=spec.window_s)
    record_ids, record_count = payloads.firing_records(conn, spec, since=since, until=now)
    details = {"rule": {"id": rule.id, "name": rule.name, "expression": rule.expression},
               "metric": spec.metric, "value": value, "threshold": spec.threshold, "op": spec.op,
               "window": {"seconds": spec.window_s, "since": (now - timedelta(seconds=spec.window_s)).isoformat(),
                          "until": now.isoformat()},
               "filters": spec.filters, "totals": totals, "record_ids": record_ids, "record_count": record_count}
    event = append_event(conn, _System(), key=database.chain_key, kind="alert", subject=f"rule:{rule.id}",
                         payload={"alert_id": alert_id, **details})
    conn.execute(Alert.__table__.insert().values(
        id=alert_id, rule_id=rule.id, fired_at=now, value=value, details=details, event_id=event["id"],
        delivery="pending", attempts=0, next_attempt_at=now))
    logger.warning("alert %s fired: %s (value %s)", rule.name, rule.expression, value)


def deliver_pending(database: Database, *, retry_delays_s: list[float], post: Poster = post_http,
                    now: datetime | None = None, public_url: str | None = None) -> tuple[int, int]:
    """POST each due alert once; returns (delivered, given up). Network calls run outside any transaction: an
    alert is claimed (its next attempt pushed back) first, then posted, then settled."""
    now = now or utcnow()
    with database.session(write=True) as session:
        due = session.execute(select(Alert.id, Alert.attempts, Alert.details, Alert.fired_at, AlertRule.webhook_url,
                                     AlertRule.signing_secret, AlertRule.severity)
                              .join(AlertRule, AlertRule.id == Alert.rule_id)
                              .where(Alert.delivery.in_(("pending", "retrying")), Alert.next_attempt_at <= now)
                              .limit(50)).all()
        for alert in due:   # claim: a concurrent pass skips it for a minute
            session.execute(update(Alert).where(Alert.id == alert.id).values(next_attempt_at=now + timedelta(seconds=60)))
    delivered = failed = 0
    for alert in due:
        attempt = alert.attempts + 1
        body = payloads.build(alert_id=alert.id, fired_at=aware(alert.fired_at).isoformat(), attempt=attempt,
                              details=alert.details or {}, severity=alert.severity, public_url=public_url)
        try:
            outcome = send(alert.webhook_url, body, rule_secret(database, alert.signing_secret), post)
        except ValueError as exc:   # the secret cannot be unsealed: never send unsigned what should be signed
            outcome = Outcome(None, str(exc))
        values: dict[str, Any] = {"attempts": attempt, "last_error": outcome.error}
        if outcome.delivered:
            values.update(delivery="delivered", delivered_at=utcnow(), next_attempt_at=None)
            delivered += 1
        elif outcome.stop or attempt > len(retry_delays_s):
            values.update(delivery="dead", next_attempt_at=None)
            failed += 1
            logger.error("alert %s: webhook failed %d times, giving up: %s", alert.id, attempt, outcome.error)
        else:
            values.update(delivery="retrying",
                          next_attempt_at=now + timedelta(seconds=retry_delays_s[attempt - 1]))
        with database.session(write=True) as session:
            session.execute(update(Alert).where(Alert.id == alert.id).values(**values))
    return delivered, failed


def rule_secret(database: Database, sealed: str | None) -> str | None:
    """The rule's signing secret (None: a rule from before signing, delivered unsigned)."""
    return None if sealed is None else unseal(sealed, database.chain_key.hmac_key)
