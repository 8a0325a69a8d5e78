"""`auditor import FILE.jsonl [--strict]`: import external LLM outputs for re-audit.

Each line: {"prompt", "output", "domain", "model", "timestamp"} (+ optional "id", "metadata").
Malformed lines are listed with their line numbers and skipped; with --strict any malformed line
rejects the whole file and nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from auditor.cli import CliError
from auditor.commands.common import guarded, load_settings, open_database
from auditor.jobs.imports import ImportFailed, ImportRejected, LineError, import_file

_SHOWN_ERRORS = 50


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("import", help="import external LLM outputs (JSONL) for re-audit")
    parser.add_argument("file", type=Path, help="JSONL: prompt, output, domain, model, timestamp (with zone) per line")
    parser.add_argument("--strict", action="store_true", help="reject the whole file if any line is malformed")
    parser.add_argument("--tenant", default="default", help="tenant that owns the imported records")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    settings = load_settings()
    database = open_database(settings)
    try:
        result = guarded(import_file, database, args.file, settings=settings, tenant=args.tenant, strict=args.strict)
    except ImportRejected as exc:
        _print_errors(exc.errors)
        raise CliError(f"{args.file}: {len(exc.errors)} malformed line(s); --strict: nothing imported") from exc
    except ImportFailed as exc:
        raise CliError(str(exc)) from exc
    finally:
        database.dispose()
    _print_errors(result.errors)
    print(f"import {result.import_id}: {result.imported} record(s) imported, {result.skipped} line(s) skipped")
    print(f"re-audit it with: auditor reaudit start --import-id {result.import_id}")
    return 0


def _print_errors(errors: list[LineError]) -> None:
    for error in errors[:_SHOWN_ERRORS]:
        print(f"line {error.line}: {error.message}", file=sys.stderr)
    if len(errors) > _SHOWN_ERRORS:
        print(f"... and {len(errors) - _SHOWN_ERRORS} more malformed line(s)", file=sys.stderr)
