"""Alert rules: expressions read as documented, a firing rule waits out its cooldown, a dead webhook is retried
then recorded as dead with its error, and every alert is a chained event."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from auditor.alerts import service
from auditor.alerts.engine import run_due
from auditor.alerts.models import Alert, AlertRule
from auditor.alerts.rules import AlertRuleError, AlertRuleIn, parse_expression
from auditor.jobs import scoring
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.access_log import CliOperator
from auditor.trail.ledgers import verify_trail
from tests.auditor.conftest import TEST_CHAIN_KEY
from tests.auditor.scoring_doubles import MarkerEvaluator, append_output


@pytest.mark.parametrize(("expression", "expected"), [
    ("fer > 0.2 over 1h for domain=medical", ("fer", ">", 0.2, 3600, {"domain": "medical"})),
    ("contradicted_rate >= 0.1 over 24h for domain=legal, model=m-7b", ("contradicted_rate", ">=", 0.1, 86400,
                                                                        {"domain": "legal", "model": "m-7b"})),
    ("any critical verdict", ("critical", ">", 0.0, 300, {})),
    ("block_rate < 0.5", ("block_rate", "<", 0.5, 300, {})),
])
def test_expressions(expression: str, expected: tuple) -> None:
    spec = parse_expression(expression)
    assert (spec.metric, spec.op, spec.threshold, spec.window_s, spec.filters) == expected


@pytest.mark.parametrize(("expression", "message"), [
    ("fer >> 2", "cannot read alert rule"), ("happiness > 1", "unknown metric"),
    ("fer > 0.2 for colour=red", "filter colour"), ("fer > 0.2 for domain", "cannot read filter"),
])
def test_bad_expressions_say_why(expression: str, message: str) -> None:
    with pytest.raises(AlertRuleError, match=message):
        parse_expression(expression)


def _rule(database: Database, expression: str, *, cooldown_s: int = 3600) -> int:
    rule = AlertRuleIn(name="r", expression=expression, webhook_url="http://127.0.0.1:9/hook", cooldown_s=cooldown_s)
    return service.create_rule(database, CliOperator(), rule).id


def test_a_firing_rule_waits_out_its_cooldown_and_resolves(database: Database) -> None:
    record = append_output(database, "[false] Rates rose in 2022.")
    scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record))
    rule_id = _rule(database, "contradicted > 0 over 1h", cooldown_s=600)
    posted: list[dict] = []
    now = utcnow()
    for minutes, fired in ((0, 1), (1, 0), (11, 1)):
        result = run_due(database, check_interval_s=1, retry_delays_s=[1], post=lambda _u, b, _h: posted.append(json.loads(b)) or 200,
                         now=now + timedelta(minutes=minutes))
        assert result["fired"] == fired, minutes
    assert len(posted) == 2 and posted[0]["value"] == 1 and posted[0]["rule"]["expression"] == "contradicted > 0 over 1h"
    result = run_due(database, check_interval_s=1, retry_delays_s=[1], post=lambda _u, _b, _h: 200,
                     now=now + timedelta(hours=3))   # the record left the window
    with database.session() as session:
        assert result["fired"] == 0 and session.get(AlertRule, rule_id).state == "ok"
    with database.engine.connect() as conn:
        assert verify_trail(conn, TEST_CHAIN_KEY.hmac_key).ok


def test_a_dead_webhook_is_retried_then_recorded_as_dead(database: Database) -> None:
    append_output(database, "[false] Wrong.")
    _rule(database, "records > 0 over 1h")

    def refuse(_url: str, _body: bytes, _headers: dict) -> int:
        raise ConnectionRefusedError("connection refused")

    now = utcnow()
    outcomes = [run_due(database, check_interval_s=3600, retry_delays_s=[1, 1], post=refuse,
                        now=now + timedelta(seconds=5 * i)) for i in range(4)]
    assert [o["failed"] for o in outcomes] == [0, 0, 1, 0] and sum(o["fired"] for o in outcomes) == 1
    with database.session() as session:
        alert = session.execute(select(Alert)).scalar_one()
    assert (alert.delivery, alert.attempts) == ("dead", 3) and "connection refused" in alert.last_error
