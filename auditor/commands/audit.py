"""`auditor audit verify-chain|purge|hold|release`: integrity and retention of the audit trail."""

from __future__ import annotations

import argparse
import json

from sqlalchemy.orm import Session

from auditor.cli import CliError
from auditor.commands.common import guarded, in_session, load_settings, open_database
from auditor.trail import reads
from auditor.trail.access_log import CliOperator
from auditor.trail.retention import RetentionError, place_hold, purge_expired, release_hold
from auditor.trail.witness import WitnessError, WitnessPublisher, open_witness


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("audit", help="verify the hash chain, purge expired content, legal holds")
    actions = parser.add_subparsers(dest="action", required=True)
    verify = actions.add_parser("verify-chain", help="exit 1 naming the first altered, deleted or reordered record")
    verify.add_argument("--json", action="store_true", help="print the report as JSON only")
    verify.add_argument("--witness", nargs="?", const="", metavar="ADDRESS",
                        help="also compare with the external witness (default address: AUDITOR_CHAIN_WITNESS)")
    verify.set_defaults(func=_verify)
    witness = actions.add_parser("witness", help="copy the signed ledger heads and checkpoints to the witness now")
    witness.add_argument("address", nargs="?", help="default: AUDITOR_CHAIN_WITNESS")
    witness.set_defaults(func=_witness)
    purge = actions.add_parser("purge", help="drop expired content (per-domain retention), keep hashed tombstones")
    purge.add_argument("--dry-run", action="store_true")
    purge.set_defaults(func=_purge)
    hold = actions.add_parser("hold", help="place a legal hold (exempts records from purges)")
    hold.add_argument("--tenant")
    hold.add_argument("--domain")
    hold.add_argument("--record")
    hold.add_argument("--reason", required=True)
    hold.set_defaults(func=_hold)
    release = actions.add_parser("release", help="release a legal hold by id")
    release.add_argument("hold_id", type=int)
    release.set_defaults(func=_release)


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
                         witness=witness)
    except WitnessError as exc:
        raise CliError(str(exc)) from exc
    if args.json:
        print(json.dumps(report.to_dict()))
    elif report.ok:
        counts = {name: info["entries_checked"] for name, info in report.ledgers.items()}
        witnessed = f"; matches the witness ({report.extra['witness_entries']} entries)" if witness is not None else ""
        print(f"chain ok: {counts['records']} records, {counts['evaluations']} evaluations, "
              f"{counts['access']} access-log entries, {report.checkpoints_checked} signed checkpoints{witnessed}")
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
    verb = "would purge" if args.dry_run else "purged"
    print(f"{verb} {len(result.purged_ids)} record(s); {len(result.held_ids)} under legal hold"
          + (f"; purge record {result.purge_record_id}" if result.purge_record_id else ""))
    return 0


def _hold(args: argparse.Namespace) -> int:
    def hold(session: Session) -> int:
        return place_hold(session, reason=args.reason, tenant=args.tenant, domain=args.domain,
                          record_id=args.record).id

    print(f"legal hold {in_session(hold, user_errors=(RetentionError,))} placed")
    return 0


def _release(args: argparse.Namespace) -> int:
    in_session(lambda session: release_hold(session, args.hold_id), user_errors=(RetentionError,))
    print(f"legal hold {args.hold_id} released")
    return 0
