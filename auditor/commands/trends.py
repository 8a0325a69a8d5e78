"""`auditor trends`: FER, contradicted and block rates per domain/model/intent/tenant, by hour or day.

    auditor trends --by domain,model --bucket day --since 14d
    auditor trends --by intent --domain medical --bucket hour --since 48h --json
"""

from __future__ import annotations

import argparse

from auditor.cli import CliError
from auditor.commands.common import (
    add_json_flag,
    guarded,
    load_settings,
    open_database,
    print_json,
    print_table,
)
from auditor.commands.filters import add_record_filters, build_filter
from auditor.trail import trends
from auditor.trail.access_log import CliOperator


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("trends", help="FER and verdict rates over time, per domain, model, intent, tenant")
    parser.add_argument("--by", default="domain", help="group by domain, model, intent, tenant (comma-separated)")
    parser.add_argument("--bucket", choices=("hour", "day"), default="day", help="time bucket (default day)")
    add_record_filters(parser, title="which records (default window: 30 days by day, 48 hours by hour)")
    add_json_flag(parser, "the series")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    query = build_filter(trends.TrendQuery, args, bucket=args.bucket, group_by=args.by)
    database = open_database(load_settings())
    try:
        result = guarded(trends.read_trends, database, CliOperator(), query)
    except trends.TrendError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print_json(result)
        return 0
    groups = result["group_by"]
    print_table(("bucket", *groups, "records", "supported", "contradicted", "fer", "contradicted rate", "block rate",
                 "critical"),
                [(p["bucket_start"][:16 if args.bucket == "hour" else 10], *(p[g] for g in groups), p["records"],
                  p["claims"]["supported"], p["claims"]["contradicted"], p["fer"], p["contradicted_rate"],
                  p["block_rate"], p["critical"]) for p in result["series"]],
                empty=f"no records between {result['since']:%Y-%m-%d %H:%M} and {result['until']:%Y-%m-%d %H:%M}")
    return 0
