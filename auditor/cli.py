"""The `auditor` console script. Each subcommand lives in `auditor/commands/<name>.py` with
`register(subparsers)` (adds its parser and sets `func`) so that this file stays a table of contents."""

from __future__ import annotations

import argparse
import importlib
import sys

# Module names under auditor.commands, in the order `auditor --help` lists them.
COMMANDS = ("demo", "serve", "engine_core", "verify", "db", "audit", "audits", "holds", "review", "access_log", "trends",
            "alerts", "rules", "keys", "tenants", "worker", "reaudit", "import_outputs", "imports", "kg",
            "loadgen")


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser; with `only` (a module name in COMMANDS), that one alone: importing a command
    module imports what it runs (the trail, the rule packs and their validators), and `auditor serve` should
    pay only for its own (its start-up time is a target: benchmarks.startup)."""
    parser = argparse.ArgumentParser(prog="auditor", description="Domain hallucination-audit and compliance service")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(f"auditor.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"auditor.commands.{name}":
                continue  # command not built yet
            raise
        module.register(subparsers)
    return parser


def _command_module(argv: list[str]) -> str | None:
    """The module of the subcommand argv names first (`engine-core` -> engine_core), or None (`--help`, a
    misspelt or unknown command: then every parser is built, so argparse lists them all)."""
    name = argv[0].replace("-", "_") if argv else ""
    return name if name in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_command_module(argv)).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"auditor {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # `python -m auditor.cli` runs this file as __main__, whose CliError is not the one the commands import
    # from auditor.cli: dispatch through the imported module so their errors stay one line.
    from auditor.cli import main as _main

    sys.exit(_main())
