"""`auditor tenants list|set-detection`: per-tenant settings (the domain-detection mode)."""

from __future__ import annotations

import argparse

from sqlalchemy.orm import Session

from auditor.commands.common import in_session, load_settings
from auditor.tenants.service import DETECTION_MODES, UnknownDetectionMode, all_settings, set_detection_mode


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tenants", help="per-tenant settings (domain detection)")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="tenants with their own settings, and the service default")
    listing.set_defaults(func=_list)
    detection = actions.add_parser(
        "set-detection", help="what a request without a domain gets: detect (default), require (400) or off")
    detection.add_argument("tenant", help="the tenant whose requests this applies to")
    detection.add_argument("mode", choices=(*DETECTION_MODES, "default"),
                           help="'default' returns the tenant to AUDITOR_DOMAIN_DETECTION")
    detection.set_defaults(func=_set_detection)


def _list(_args: argparse.Namespace) -> int:
    default = load_settings().domain_detection
    print(f"default domain detection (AUDITOR_DOMAIN_DETECTION): {default}")

    def lines(session: Session) -> list[str]:
        return [f"{row.tenant}  domain_detection={row.domain_detection or f'default ({default})'}  "
                f"updated {row.updated_at:%Y-%m-%d %H:%M} by {row.updated_by or '-'}" for row in all_settings(session)]

    for line in in_session(lines):
        print(line)
    return 0


def _set_detection(args: argparse.Namespace) -> int:
    mode = None if args.mode == "default" else args.mode
    in_session(lambda session: set_detection_mode(session, args.tenant, mode, by="cli"), write=True,
               user_errors=(UnknownDetectionMode,))
    print(f"{args.tenant}: domain detection {args.mode}")
    return 0
