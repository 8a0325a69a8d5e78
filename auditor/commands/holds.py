"""`auditor holds place|list|show|release`: legal holds by matter (placing and releasing are chained events).

    auditor holds place --matter SEC-2026-114 --reason "subpoena of 3 Dec" --record ID --record ID
    auditor holds place --matter M-7 --reason "litigation hold" --tenant acme
    auditor holds place --matter M-8 --reason "recall review" --domain medical --since 2026-11-01
    auditor holds list [--matter M] [--all]
    auditor holds release 3 --reason "matter closed"
"""

from __future__ import annotations

import argparse
from typing import Any

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
from auditor.trail.access_log import CliOperator
from auditor.trail.holds import HoldError, HoldIn, HoldOut, get_hold, list_holds, place_hold, release_hold

_FILTER_OPTIONS = ("domain", "intent", "model", "since", "until")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("holds", help="legal holds by matter: place, list, show, release")
    actions = parser.add_subparsers(dest="action", required=True)
    place = actions.add_parser("place", help="place a hold (its records are kept from retention purges)")
    add_place_options(place)
    place.set_defaults(func=place_command)
    listing = actions.add_parser("list", help="holds, newest first (active only unless --all)")
    listing.add_argument("--matter", help="only this matter's holds")
    listing.add_argument("--all", action="store_true", help="include released holds")
    add_json_flag(listing, "the holds")
    listing.set_defaults(func=_list)
    show = actions.add_parser("show", help="one hold in full")
    show.add_argument("hold_id", type=int, help="the hold's number (see `auditor holds list`)")
    add_json_flag(show, "the hold")
    show.set_defaults(func=_show)
    release = actions.add_parser("release", help="release a hold, with a reason")
    add_release_options(release)
    release.set_defaults(func=release_command)


def add_place_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--matter", required=True, help="the matter (case, investigation) the hold serves")
    parser.add_argument("--reason", required=True, help="why the records must be kept")
    scope = parser.add_argument_group("scope (one kind: records, a tenant, or filter options)")
    scope.add_argument("--record", action="append", dest="records", metavar="AUDIT_ID",
                       help="a record to keep; repeat for several")
    scope.add_argument("--tenant", help="keep every record of this tenant")
    for name in _FILTER_OPTIONS:
        scope.add_argument(f"--{name}", help=f"keep records matching this {name} (with the other filter options)")
    add_json_flag(parser, "the hold")


def add_release_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("hold_id", type=int, help="the hold's number (see `auditor holds list`)")
    parser.add_argument("--reason", required=True, help="why the hold ends (e.g. the matter closed)")
    add_json_flag(parser, "the released hold")


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    filters = {name: getattr(args, name) for name in _FILTER_OPTIONS if getattr(args, name) is not None}
    if args.records:
        if args.tenant or filters:
            raise CliError("--record cannot be combined with --tenant or filter options")
        return {"records": args.records}
    if filters:
        return {"filter": {**filters, **({"tenant": args.tenant} if args.tenant else {})}}
    if args.tenant:
        return {"tenant": args.tenant}
    raise CliError("give a scope: --record (repeatable), --tenant, or filter options such as --domain")


def place_command(args: argparse.Namespace) -> int:
    try:
        hold = HoldIn.model_validate({"matter_id": args.matter, "reason": args.reason, "scope": _scope(args)})
    except ValidationError as exc:
        raise CliError(validation_message(exc)) from None
    database = open_database(load_settings())
    try:
        placed = guarded(place_hold, database, CliOperator(), hold)
    except HoldError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print_json(placed.model_dump(mode="json"))
    else:
        print(f"legal hold {placed.id} placed for matter {placed.matter_id}: {_describe_scope(placed)}")
    return 0


def release_command(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    try:
        released = guarded(release_hold, database, CliOperator(), args.hold_id, reason=args.reason)
    except HoldError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print_json(released.model_dump(mode="json"))
    else:
        print(f"legal hold {released.id} (matter {released.matter_id}) released: {args.reason}")
    return 0


def _list(args: argparse.Namespace) -> int:
    holds = guarded(list_holds, open_database(load_settings()), matter_id=args.matter, include_released=args.all)
    if args.json:
        print_json([h.model_dump(mode="json") for h in holds])
        return 0
    print_table(("id", "matter", "placed", "by", "scope", "status", "reason"),
                [(h.id, h.matter_id, h.placed_at, (h.placed_by or {}).get("key_id") or (h.placed_by or {}).get("tenant"),
                  _describe_scope(h), "active" if h.active else f"released {h.released_at:%Y-%m-%d}", h.reason)
                 for h in holds],
                empty="no legal holds" + ("" if args.all else " active (--all shows released ones)")
                      + (f" for matter {args.matter}" if args.matter else ""))
    return 0


def _show(args: argparse.Namespace) -> int:
    try:
        hold = guarded(get_hold, open_database(load_settings()), args.hold_id)
    except HoldError as exc:
        raise CliError(str(exc)) from None
    print_json(hold.model_dump(mode="json"))
    return 0


def _describe_scope(hold: HoldOut) -> str:
    scope = hold.scope
    if "records" in scope:
        return f"{hold.records_named} record(s)"
    if "tenant" in scope:
        return f"tenant {scope['tenant']}"
    return "filter " + " ".join(f"{k}={v}" for k, v in scope["filter"].items())
