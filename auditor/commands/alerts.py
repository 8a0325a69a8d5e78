"""`auditor alerts add|rules|disable|list|test`: alert rules over the current verdicts, posted (signed) to a webhook.

    auditor alerts add --name med-fer --webhook https://hooks.example/x "fer > 0.2 over 1h for domain=medical"
    auditor alerts add --name critical --webhook https://hooks.example/x "any critical verdict"
    auditor alerts list                      # alerts fired: delivery pending, retrying, delivered or dead
    auditor alerts test 3                    # POST a signed test payload to rule 3's webhook; prints the status
"""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from auditor.alerts import service
from auditor.alerts.rules import AlertRuleIn
from auditor.cli import CliError
from auditor.commands.common import (
    add_json_flag,
    guarded,
    load_settings,
    open_database,
    print_json,
    print_table,
    validation_message,
)
from auditor.trail.access_log import CliOperator


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("alerts", help="alert rules (FER, rates, critical verdicts) and fired alerts")
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a rule: '<metric> <op> <number> [over <span>] [for key=value, ...]'")
    add.add_argument("expression", help="e.g. 'fer > 0.2 over 1h for domain=medical' or 'any critical verdict'")
    add.add_argument("--name", required=True, help="a short name for the rule")
    add.add_argument("--webhook", required=True, help="URL the alert is POSTed to (JSON)")
    add.add_argument("--cooldown", type=int, default=3600, help="seconds before a still-firing rule fires again")
    add.add_argument("--severity", choices=("info", "warning", "critical"),
                     help="sent with each alert (default: critical for critical-verdict rules, else warning)")
    add_json_flag(add, "the rule")
    add.set_defaults(func=_add)
    rules = actions.add_parser("rules", help="the alert rules")
    rules.add_argument("--all", action="store_true", help="include disabled rules")
    add_json_flag(rules, "the rules")
    rules.set_defaults(func=_rules)
    disable = actions.add_parser("disable", help="stop checking a rule")
    disable.add_argument("rule_id", type=int, help="the rule's number (see `auditor alerts rules`)")
    disable.set_defaults(func=_disable)
    listing = actions.add_parser("list", help="alerts fired, newest first, with their webhook delivery")
    listing.add_argument("--rule", type=int, help="only this rule's alerts")
    listing.add_argument("--limit", type=int, default=50, help="how many (default 50)")
    add_json_flag(listing, "the alerts")
    listing.set_defaults(func=_list)
    test = actions.add_parser("test", help="POST a signed test payload (\"test\": true) to a rule's webhook")
    test.add_argument("rule_id", type=int, help="the rule's number (see `auditor alerts rules`)")
    test.set_defaults(func=_test)


def _add(args: argparse.Namespace) -> int:
    try:
        rule = AlertRuleIn(name=args.name, expression=args.expression, webhook_url=args.webhook, cooldown_s=args.cooldown,
                           severity=args.severity)
    except ValidationError as exc:
        raise CliError(validation_message(exc)) from None
    created = guarded(service.create_rule, open_database(load_settings()), CliOperator(), rule)
    if args.json:
        print_json(created.model_dump(mode="json"))
    else:
        print(f"alert rule {created.id} ({created.name}): {created.metric} {created.op} {created.threshold} over "
              f"{created.window_s}s" + (f" for {created.filters}" if created.filters else "")
              + f" -> {created.webhook_url} (fingerprint {created.webhook_fingerprint})")
        print(f"signing secret (shown once; receivers verify Auditor-Signature with it): {created.signing_secret}")
    return 0


def _rules(args: argparse.Namespace) -> int:
    rules = guarded(service.list_rules, open_database(load_settings()), CliOperator(), include_disabled=args.all)
    if args.json:
        print_json([r.model_dump(mode="json") for r in rules])
        return 0
    print_table(("id", "name", "expression", "state", "last value", "last fired", "enabled", "webhook", "fingerprint"),
                [(r.id, r.name, r.expression, r.state, r.last_value, r.last_fired_at, r.enabled, r.webhook_url,
                  r.webhook_fingerprint)
                 for r in rules], empty="no alert rules (add one with `auditor alerts add`)")
    return 0


def _disable(args: argparse.Namespace) -> int:
    try:
        rule = guarded(service.disable_rule, open_database(load_settings()), args.rule_id)
    except service.AlertRuleNotFound as exc:
        raise CliError(str(exc)) from None
    print(f"alert rule {rule.id} ({rule.name}) disabled")
    return 0


def _list(args: argparse.Namespace) -> int:
    alerts = guarded(service.list_alerts, open_database(load_settings()), CliOperator(), rule_id=args.rule,
                     limit=args.limit)
    if args.json:
        print_json([a.model_dump(mode="json") for a in alerts])
        return 0
    print_table(("id", "rule", "fired", "value", "delivery", "attempts", "last error"),
                [(a.id, a.rule_id, a.fired_at, a.value, a.delivery, a.attempts, a.last_error) for a in alerts],
                empty="no alerts fired")
    return 0


def _test(args: argparse.Namespace) -> int:
    settings = load_settings()
    try:
        outcome = guarded(service.send_test, open_database(settings), args.rule_id, public_url=settings.public_url)
    except service.AlertRuleNotFound as exc:
        raise CliError(str(exc)) from None
    if not outcome.delivered:
        raise CliError(f"alert rule {args.rule_id}: test payload not delivered: {outcome.error}")
    print(f"alert rule {args.rule_id}: test payload delivered, HTTP {outcome.status}")
    return 0
