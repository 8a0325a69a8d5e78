"""`auditor rules list|reload|activate`: the rule packs each domain judges with.

    auditor rules list                       # versions per domain, the active one marked
    auditor rules reload                     # register and activate the pack files as they are now
    auditor rules activate medical 2026.12.1 --reason "roll back the dose rule change"

Every server and worker picks a change up within AUDITOR_RULE_PACK_REFRESH_S (2 s); with the file watch on
(AUDITOR_RULE_PACK_WATCH, the default) an edited pack file is activated without `reload`.
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
from auditor.packs import registry
from auditor.trail.access_log import CliOperator


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("rules", help="rule packs: list versions, reload the files, activate a version")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="registered pack versions per domain (* marks the active one)")
    listing.add_argument("--domain", help="only this domain")
    add_json_flag(listing, "the versions")
    listing.set_defaults(func=_list)
    reload = actions.add_parser("reload", help="register and activate the pack files (AUDITOR_RULE_PACK_DIR)")
    add_json_flag(reload, "what changed")
    reload.set_defaults(func=_reload)
    activate = actions.add_parser("activate", help="make a registered version the active one (e.g. a rollback)")
    activate.add_argument("domain", help="finance, medical or legal")
    activate.add_argument("version", help="a version, a hash or a hash prefix (see `auditor rules list`)")
    activate.add_argument("--reason", help="why (kept in the chained event)")
    activate.set_defaults(func=_activate)


def _list(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    with database.engine.connect() as conn:
        rows = guarded(registry.list_versions, conn, args.domain)
    if args.json:
        print_json([row._asdict() for row in rows])
        return 0
    print_table(("", "domain", "version", "hash", "registered", "activated", "source"),
                [("*" if r.active else "", r.domain, r.version, r.hash[:16], r.registered_at, r.activated_at, r.source)
                 for r in rows],
                empty="no rule pack registered yet (the first server, worker or `auditor rules reload` registers them)")
    return 0


def _reload(args: argparse.Namespace) -> int:
    settings = load_settings()
    directory = registry.pack_dir(settings.rule_pack_dir)
    results = guarded(registry.sync_from_dir, open_database(settings), directory, actor=CliOperator(), force=True)
    if args.json:
        print_json({"directory": str(directory), "results": [r.__dict__ for r in results]})
    else:
        print_table(("domain", "version", "hash", "outcome", "detail"),
                    [(r.domain, r.version, (r.hash or "")[:16] or None, r.outcome, r.detail) for r in results],
                    empty=f"no pack files in {directory}")
    return 1 if any(r.outcome == "invalid" for r in results) else 0


def _activate(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    try:
        ref = guarded(registry.activate, database, args.domain, args.version, actor=CliOperator(), reason=args.reason)
    except registry.PackNotFound as exc:
        raise CliError(str(exc)) from None
    print(f"{args.domain}: {ref.version} ({ref.hash[:16]}) is now active; servers and workers follow within seconds")
    return 0
