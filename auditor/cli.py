"""The `auditor` console script. Each subcommand lives in `auditor/commands/<name>.py` with
`register(subparsers)` (adds its parser and sets `func`) so that this file stays a table of contents."""

from __future__ import annotations

import argparse
import importlib
import sys

# Module names under auditor.commands, in the order `auditor --help` lists them.
COMMANDS = ("demo", "serve", "engine_core", "verify", "db", "audit", "audits", "keys", "tenants", "worker",
            "reaudit", "import_outputs")


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="auditor", description="Domain hallucination-audit and compliance service")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"auditor.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"auditor.commands.{name}":
                continue  # command not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"auditor {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
