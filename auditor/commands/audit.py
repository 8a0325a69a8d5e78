"""`auditor audit verify-chain|witness|purge|hold|release`: integrity and retention of the audit trail.

`hold` and `release` are the same commands as `auditor holds place` and `auditor holds release`."""

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
from auditor.commands.holds import add_place_options, add_release_options, place_command, release_command
from auditor.trail import reads
from auditor.trail.access_log import CliOperator
from auditor.trail.retention import purge_expired
from auditor.trail.witness import WitnessError, WitnessPublisher, open_witness


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("audit", help="verify the hash chain, purge expired content, legal holds")
    actions = parser.add_subparsers(dest="action", required=True)
    verify = actions.add_parser("verify-chain", help="exit 1 naming the first altered, deleted or reordered entry")
    add_json_flag(verify, "the report")
    verify.add_argument("--witness", nargs="?", const="", metavar="ADDRESS",
                        help="also compare with the external witness (default address: AUDITOR_CHAIN_WITNESS)")
    verify.add_argument("--incremental", action="store_true",
                        help="start each ledger at the last signed checkpoint a previous verify reached "
                             "(fast; run a full verify on a schedule too)")
    verify.set_defaults(func=_verify)
    witness = actions.add_parser("witness", help="copy the signed ledger heads and checkpoints to the witness now")
    witness.add_argument("address", nargs="?", help="default: AUDITOR_CHAIN_WITNESS")
    witness.set_defaults(func=_witness)
    purge = actions.add_parser("purge", help="drop expired content (per-domain retention), keep hashed tombstones")
    purge.add_argument("--dry-run", action="store_true", help="list what would be purged and what is held, change nothing")
    add_json_flag(purge, "the purged and held ids")
    purge.set_defaults(func=_purge)
    hold = actions.add_parser("hold", help="place a legal hold (same as `auditor holds place`)")
    add_place_options(hold)
    hold.set_defaults(func=place_command)
    release = actions.add_parser("release", help="release a legal hold (same as `auditor holds release`)")
    add_release_options(release)
    release.set_defaults(func=release_command)


def _verify(args: argparse.Namespace) -> int:
    settings = load_settings()
    database = open_database(settings, migrate=False)
    witness = None
    if args.witness is not None:
        address = args.witness or settings.chain_witness
        if not address:
            raise CliError("--witness needs an address, or AUDITOR_CHAIN_WITNESS")
        try:
            witness = open_witness(address)
        except WitnessError as exc:
            raise CliError(str(exc)) from exc
    try:
        report = guarded(reads.verify, database, CliOperator(), hmac_key=settings.hmac_key.get_secret_value().encode(),
                         witness=witness, mode="incremental" if args.incremental else "full")
    except WitnessError as exc:
        raise CliError(str(exc)) from exc
    if args.json:
        print_json(report.to_dict())
    elif report.ok:
        counts = {name: info["entries_checked"] for name, info in report.ledgers.items()}
        witnessed = f"; matches the witness ({report.extra['witness_entries']} entries)" if witness is not None else ""
        since = ""
        if args.incremental:
            started = report.extra.get("started_after", {})
            since = " (new since the last verify: " + ", ".join(
                f"{name} after seq {seq}" for name, seq in started.items()) + ")" if started else " (full: no earlier verify)"
        kg = report.extra.get("kg") or {}
        print(f"chain ok: {counts['records']} records, {counts['evaluations']} evaluations, "
              f"{counts['access']} access-log entries, {counts['events']} events, "
              f"{report.checkpoints_checked} signed checkpoints, {kg.get('versions_checked', 0)} KG versions"
              f"{witnessed}{since}")
    else:
        assert report.problem is not None
        print(f"chain broken: {report.problem.line()}")
    return 0 if report.ok else 1


def _witness(args: argparse.Namespace) -> int:
    settings = load_settings()
    address = args.address or settings.chain_witness
    if not address:
        raise CliError("give a witness address, or set AUDITOR_CHAIN_WITNESS")
    try:
        publisher = WitnessPublisher(open_database(settings, migrate=False), open_witness(address))
        sent = guarded(publisher.publish_once)
    except WitnessError as exc:
        raise CliError(str(exc)) from exc
    print(f"witness {address}: {sent} entr{'y' if sent == 1 else 'ies'} written")
    return 0


def _purge(args: argparse.Namespace) -> int:
    settings = load_settings()
    result = guarded(purge_expired, open_database(settings), settings, dry_run=args.dry_run)
    if args.json:
        print_json({"dry_run": args.dry_run, "purge_record_id": result.purge_record_id,
                    "purged_ids": result.purged_ids, "held": result.holds})
        return 0
    verb = "would purge" if args.dry_run else "purged"
    print(f"{verb} {len(result.purged_ids)} record(s); {len(result.held_ids)} under legal hold"
          + (f"; purge record {result.purge_record_id}" if result.purge_record_id else ""))
    if args.dry_run:
        print_table(("record", "outcome", "holds"),
                    [(rid, "purge", None) for rid in result.purged_ids]
                    + [(rid, "held", ",".join(map(str, result.holds[rid]))) for rid in result.held_ids],
                    empty="nothing has expired")
    return 0
