"""`auditor access-log`: who read which records, and what a key read (reading the log is logged too).

    auditor access-log --record AUDIT_ID            # who read this record
    auditor access-log --key KEY_ID --since 7d      # what this key read
    auditor access-log --action export --json
"""

from __future__ import annotations

import argparse

from pydantic import ValidationError

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
from auditor.trail.access_log import CliOperator, read_log
from auditor.trail.schemas import AccessLogFilters

_SHOWN_IDS = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("access-log", help="who read which records, and what each key read")
    parser.add_argument("--record", dest="record_id", metavar="AUDIT_ID", help="entries that showed this record")
    parser.add_argument("--key", dest="key_id", metavar="KEY_ID", help="entries of this API key")
    parser.add_argument("--tenant", help="entries of this tenant's readers")
    parser.add_argument("--role", help="entries of readers with this role")
    parser.add_argument("--action", help="list, show, export, bundle, verify, denied, review_queue, access_log, ...")
    parser.add_argument("--since", metavar="WHEN", help="from this time (ISO, or 7d, 12h)")
    parser.add_argument("--until", metavar="WHEN", help="before this time")
    parser.add_argument("--limit", type=int, default=50, help="entries per page, 1-500 (default 50)")
    parser.add_argument("--cursor", type=int, help="the page after this cursor")
    add_json_flag(parser, "the entries")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    values = {name: getattr(args, name) for name in ("record_id", "key_id", "tenant", "role", "action", "since",
                                                     "until", "limit", "cursor") if getattr(args, name) is not None}
    try:
        filters = AccessLogFilters.model_validate(values)
    except ValidationError as exc:
        raise CliError(validation_message(exc)) from None
    database = open_database(load_settings())
    entries, cursor = guarded(read_log, database, CliOperator(), filters)
    if args.json:
        print_json({"data": [e.model_dump(mode="json") for e in entries], "next_cursor": cursor})
        return 0
    print_table(("id", "at", "key", "tenant", "role", "action", "target", "records"),
                [(e.id, e.at, e.key_id, e.tenant, e.role, e.action, e.target, _records(e.record_ids, e.result_count))
                 for e in entries], empty="no access-log entries match")
    if cursor:
        print(f"more: --cursor {cursor}")
    return 0


def _records(ids: list | None, count: int | None) -> str | None:
    if not ids:
        return None if count is None else f"({count})"
    shown = " ".join(str(i) for i in ids[:_SHOWN_IDS])
    return shown + (f" (+{len(ids) - _SHOWN_IDS})" if len(ids) > _SHOWN_IDS else "")
