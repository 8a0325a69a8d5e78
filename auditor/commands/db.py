"""`auditor db upgrade|current`: Alembic migrations of the audit store (config built in code)."""

from __future__ import annotations

import argparse

from alembic import command

from auditor.commands.common import guarded, load_settings, open_database
from auditor.store.database import alembic_config


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("db", help="migrate the audit store")
    actions = parser.add_subparsers(dest="action", required=True)
    upgrade = actions.add_parser("upgrade", help="apply migrations (default: up to head)")
    upgrade.add_argument("revision", nargs="?", default="head", help="the Alembic revision to reach (default head)")
    upgrade.set_defaults(func=_upgrade)
    current = actions.add_parser("current", help="show the applied revision")
    current.set_defaults(func=_current)


def _upgrade(args: argparse.Namespace) -> int:
    settings = load_settings()
    database = open_database(settings, migrate=False)
    guarded(database.upgrade, args.revision, hmac_key=settings.hmac_key.get_secret_value().encode())
    print(f"audit store at {database.engine.url.render_as_string(hide_password=True)} upgraded to {args.revision}")
    return 0


def _current(_args: argparse.Namespace) -> int:
    database = open_database(load_settings(), migrate=False)
    guarded(command.current, alembic_config(database))
    return 0
