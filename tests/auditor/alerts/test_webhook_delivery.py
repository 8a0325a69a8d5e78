"""Webhooks worth receiving (issue 42): the payload names the records that fired the alert, with console
links; every POST is signed Stripe-style (`Auditor-Signature: t=<unix>,v1=<hmac>`) with the rule's own secret,
shown once; failures are retried with backoff, 410 Gone stops them, and the last failure leaves the alert
dead; `auditor alerts test` posts a signed test payload. All traffic stays on 127.0.0.1."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import text

from auditor.alerts import service
from auditor.alerts.engine import run_due
from auditor.alerts.rules import AlertRuleIn
from auditor.jobs import scoring
from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.access_log import CliOperator
from tests.auditor.conftest import TEST_HMAC_KEY
from tests.auditor.scoring_doubles import MarkerEvaluator, append_output
from tests.cli_runner import run_cli

PUBLIC_URL = "https://auditor.example.org"


class Receiver:
    """A webhook on 127.0.0.1 answering each POST with the next status of `statuses` (the last repeats)."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses, self.calls = statuses, []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:   # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.calls.append((body, dict(self.headers)))
                self.send_response(receiver.statuses[min(len(receiver.calls), len(receiver.statuses)) - 1])
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/secret-token-123"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver_with() -> Iterator[Any]:
    started: list[Receiver] = []

    def start(*statuses: int) -> Receiver:
        started.append(Receiver(list(statuses)))
        return started[-1]

    yield start
    for receiver in started:
        receiver.server.shutdown()


def receiver_verifies(secret: str, body: bytes, header: str, *, now: float, tolerance_s: int = 300) -> bool:
    """What a receiver runs (the snippet in the docs), written here independently of the service's code."""
    parts = dict(item.split("=", 1) for item in header.split(","))
    timestamp = int(parts["t"])
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return abs(now - timestamp) <= tolerance_s and hmac.compare_digest(expected, parts["v1"])


def _contradicted_record(database: Database) -> str:
    record = append_output(database, "[false] Rates rose in 2022.")
    scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record))
    return record


def _rule(database: Database, url: str, expression: str = "contradicted > 0 over 1h") -> service.AlertRuleCreated:
    return service.create_rule(database, CliOperator(), AlertRuleIn(name="contradictions", expression=expression,
                                                                     webhook_url=url, cooldown_s=3600))


def _cli(monkeypatch: pytest.MonkeyPatch, database: Database, *args: str) -> tuple[int, str, str]:
    env = {"AUDITOR_DATABASE_URL": database.url, "AUDITOR_HMAC_KEY": TEST_HMAC_KEY, "AUDITOR_ENVIRONMENT": "test"}
    return run_cli(monkeypatch, env, *args)


def test_the_payload_names_its_records_and_its_signature_verifies(database: Database, receiver_with) -> None:
    record = _contradicted_record(database)
    receiver = receiver_with(200)
    rule = _rule(database, receiver.url)
    assert rule.signing_secret and rule.signing_secret.startswith("whsec_")
    result = run_due(database, check_interval_s=3600, retry_delays_s=[0.01], public_url=PUBLIC_URL + "/")
    assert result["delivered"] == 1, result
    [(body, headers)] = receiver.calls
    payload = json.loads(body)
    assert payload["test"] is False and payload["rule"]["id"] == rule.id and payload["rule"]["name"] == "contradictions"
    assert payload["severity"] == "warning" and payload["metric"] == "contradicted" and payload["value"] == 1
    assert payload["window"]["seconds"] == 3600 and payload["tenant"] == "*"
    assert payload["record_count"] == 1 and payload["records_truncated"] is False
    assert payload["records"] == [{"id": record, "console_url": f"{PUBLIC_URL}/console/records/{record}"}]

    signature = headers["Auditor-Signature"]
    now = time.time()
    assert receiver_verifies(rule.signing_secret, body, signature, now=now)
    assert not receiver_verifies(rule.signing_secret, body.replace(b'"value": 1', b'"value": 0'), signature, now=now)
    assert not receiver_verifies(rule.signing_secret, body, signature, now=now + 301)   # a replay, 5 min later
    assert not receiver_verifies("whsec_someone-else", body, signature, now=now)


def test_the_signing_secret_is_shown_once_and_not_stored_in_clear(database: Database, receiver_with) -> None:
    rule = _rule(database, receiver_with(200).url)
    listed = service.list_rules(database, CliOperator())
    assert rule.signing_secret and all(rule.signing_secret not in r.model_dump_json() for r in listed)
    with database.engine.connect() as conn:
        stored = conn.execute(text("SELECT signing_secret FROM alert_rules")).scalar_one()
    assert stored and rule.signing_secret not in stored and rule.signing_secret.removeprefix("whsec_") not in stored


def test_without_a_public_url_there_are_ids_but_no_links(database: Database, receiver_with) -> None:
    record = _contradicted_record(database)
    receiver = receiver_with(200)
    _rule(database, receiver.url)
    run_due(database, check_interval_s=3600, retry_delays_s=[0.01])
    assert json.loads(receiver.calls[0][0])["records"] == [{"id": record}]


def test_a_failing_webhook_is_retried_with_backoff_then_dead(database: Database, receiver_with,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _contradicted_record(database)
    receiver = receiver_with(500)
    _rule(database, receiver.url)
    now = utcnow()
    states = []
    for step in range(4):
        run_due(database, check_interval_s=3600, retry_delays_s=[1, 2], now=now + timedelta(seconds=5 * step))
        states.append(service.list_alerts(database, CliOperator())[0].delivery)
    assert states == ["retrying", "retrying", "dead", "dead"]
    assert len(receiver.calls) == 3
    assert [json.loads(body)["attempt"] for body, _ in receiver.calls] == [1, 2, 3]
    [alert] = service.list_alerts(database, CliOperator())
    assert alert.attempts == 3 and "500" in alert.last_error and "secret-token-123" not in alert.last_error
    status, out, _ = _cli(monkeypatch, database, "alerts", "list")
    assert status == 0 and " dead " in out and "secret-token-123" not in out


def test_not_yet_due_retries_wait_for_their_backoff(database: Database, receiver_with) -> None:
    _contradicted_record(database)
    receiver = receiver_with(503)
    _rule(database, receiver.url)
    now = utcnow()
    run_due(database, check_interval_s=3600, retry_delays_s=[30, 120], now=now)
    run_due(database, check_interval_s=3600, retry_delays_s=[30, 120], now=now + timedelta(seconds=10))
    assert len(receiver.calls) == 1


def test_410_gone_stops_the_retries(database: Database, receiver_with) -> None:
    _contradicted_record(database)
    receiver = receiver_with(410)
    _rule(database, receiver.url)
    now = utcnow()
    for step in range(3):
        run_due(database, check_interval_s=3600, retry_delays_s=[1, 1], now=now + timedelta(seconds=5 * step))
    [alert] = service.list_alerts(database, CliOperator())
    assert (alert.delivery, alert.attempts, len(receiver.calls)) == ("dead", 1, 1) and "410" in alert.last_error


def test_alerts_test_posts_a_signed_test_payload(database: Database, receiver_with,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = receiver_with(202)
    rule = _rule(database, receiver.url)
    status, out, err = _cli(monkeypatch, database, "alerts", "test", str(rule.id))
    assert status == 0, err
    assert len(out.strip().splitlines()) == 1 and "202" in out and "secret-token-123" not in out
    [(body, headers)] = receiver.calls
    payload = json.loads(body)
    assert payload["test"] is True and payload["rule"]["id"] == rule.id
    assert receiver_verifies(rule.signing_secret, body, headers["Auditor-Signature"], now=time.time())


def test_alerts_test_says_what_went_wrong_in_one_line(database: Database, receiver_with,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    rule = _rule(database, receiver_with(500).url)
    status, out, err = _cli(monkeypatch, database, "alerts", "test", str(rule.id))
    assert status != 0 and "500" in out + err and len((out + err).strip().splitlines()) == 1
    status, _, err = _cli(monkeypatch, database, "alerts", "test", "9999")
    assert status != 0 and "no alert rule 9999" in err and "Traceback" not in err
