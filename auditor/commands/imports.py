"""`auditor imports list|fail`: the import batches, and failing one a killed process left "importing".

    auditor imports list [--status importing]
    auditor imports fail IMPORT_ID [--reason "the API process was killed"]

A batch whose import stopped with an error is marked failed by the import itself; only a process killed mid-import
leaves one "importing". Failing it changes no record: the lines it imported stay in the trail (chained), and
`imported` says how many.
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
from auditor.jobs.imports import ImportNotImporting, list_batches, mark_failed


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("imports", help="import batches: list them, fail one left importing by a crash")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="import batches, newest first")
    listing.add_argument("--status", choices=("importing", "complete", "failed"), help="only batches in this state")
    listing.add_argument("--limit", type=int, default=50, help="how many (default 50)")
    add_json_flag(listing, "the batches")
    listing.set_defaults(func=_list)
    fail = actions.add_parser("fail", help="mark a batch still importing as failed (after a crash)")
    fail.add_argument("import_id", help="the batch's id (see `auditor imports list --status importing`)")
    fail.add_argument("--reason", default="marked failed by an operator", help="kept with the batch's errors")
    fail.set_defaults(func=_fail)


def _list(args: argparse.Namespace) -> int:
    batches = guarded(list_batches, open_database(load_settings()), status=args.status, limit=args.limit)
    if args.json:
        print_json(batches)
        return 0
    print_table(("id", "tenant", "file", "status", "lines", "imported", "skipped", "created", "finished"),
                [(b["id"], b["tenant"], b["filename"], b["status"], b["lines"], b["imported"], b["skipped"],
                  b["created_at"], b["finished_at"]) for b in batches], empty="no imports")
    return 0


def _fail(args: argparse.Namespace) -> int:
    try:
        guarded(mark_failed, open_database(load_settings()), args.import_id, reason=args.reason)
    except ImportNotImporting as exc:
        raise CliError(str(exc)) from None
    print(f"import {args.import_id} marked failed")
    return 0
