"""`auditor audits list|show|export`: read the trail from the command line (each read is logged)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from auditor.cli import CliError
from auditor.commands.common import guarded, load_settings, open_database
from auditor.trail import reads
from auditor.trail.access_log import CliOperator
from auditor.trail.queries import AuditQueryError
from auditor.trail.schemas import AuditFilters, ExportFilters

_FILTER_FLAGS = ("since", "until", "tenant", "domain", "domain_source", "intent", "model", "gate_action", "status", "kind",
                 "fer_min", "fer_max", "rule_id", "q", "cursor")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("audits", help="list, show and export audit records")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="one line per record, newest first")
    _add_filters(listing)
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(func=_list)
    show = actions.add_parser("show", help="one record in full, with its evaluations")
    show.add_argument("audit_id")
    show.set_defaults(func=_show)
    export = actions.add_parser("export", help="every matching record as JSONL or CSV")
    _add_filters(export)
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    export.add_argument("--output", type=Path, help="file to write (default: stdout)")
    export.set_defaults(func=_export)


def _add_filters(parser: argparse.ArgumentParser) -> None:
    for name in _FILTER_FLAGS:
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name)
    contradicted = parser.add_mutually_exclusive_group()
    contradicted.add_argument("--has-contradicted", dest="has_contradicted", action="store_true", default=None)
    contradicted.add_argument("--no-contradicted", dest="has_contradicted", action="store_false")


def _filters(args: argparse.Namespace, *, model_class: type[AuditFilters] = AuditFilters, **extra: Any) -> AuditFilters:
    values = {name: getattr(args, name) for name in (*_FILTER_FLAGS, "has_contradicted") if getattr(args, name) is not None}
    try:
        return model_class(**values, **extra)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise CliError(f"--{'-'.join(str(p) for p in error['loc']).replace('_', '-')}: {error['msg']}") from exc


def _list(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 500:
        raise CliError("--limit must be between 1 and 500")
    filters = _filters(args, limit=args.limit)
    database = open_database(load_settings())
    with _read_errors():
        rows, cursor = guarded(reads.list_page, database, CliOperator(), filters)
    for row in rows:
        if args.json:
            print(json.dumps(row.model_dump(mode="json", exclude={"evaluations"}), ensure_ascii=False))
        else:
            print(f"{row.seq:>6}  {row.id}  {row.created_at:%Y-%m-%d %H:%M:%S}  {row.tenant}  "
                  f"{row.domain or '-'}  {row.intent or '-'}  {row.status}  {row.gate_action or '-'}  "
                  f"fer={'-' if row.fer is None else f'{row.fer:.2f}'}")
    if cursor and not args.json:
        print(f"more: --cursor {cursor}", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    with _read_errors():
        record = guarded(reads.show_record, database, CliOperator(), args.audit_id)
    print(json.dumps(record.model_dump(mode="json"), indent=2, ensure_ascii=False))
    return 0


def _export(args: argparse.Namespace) -> int:
    filters = _filters(args, format=args.format, model_class=ExportFilters)
    database = open_database(load_settings())
    with _read_errors():
        lines = guarded(reads.export, database, CliOperator(), filters)
    out = args.output.open("w", encoding="utf-8", newline="") if args.output else sys.stdout
    try:
        with _read_errors():
            guarded(lambda: out.writelines(lines))
    finally:
        if args.output:
            out.close()
    if args.output:
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


@contextmanager
def _read_errors() -> Iterator[None]:
    try:
        yield
    except (AuditQueryError, reads.RecordNotFound, reads.TenantNotAllowed) as exc:
        raise CliError(str(exc).strip("'")) from exc
