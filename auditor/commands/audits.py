"""`auditor audits list|show|export`: read the trail from the command line (each read is logged)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from auditor.cli import CliError
from auditor.commands.common import guarded, load_settings, open_database
from auditor.trail import records as audit_log
from auditor.trail.export import export_lines, record_dict
from auditor.trail.schemas import AuditFilters

# CLI reads are attributed to the operator role that has database access.
CLI_TENANT, CLI_ROLE = "(cli)", "admin"
_FILTER_FLAGS = ("since", "until", "tenant", "domain", "intent", "model", "gate_action", "status", "kind",
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


def _filters(args: argparse.Namespace, **extra: Any) -> AuditFilters:
    values = {name: getattr(args, name) for name in (*_FILTER_FLAGS, "has_contradicted") if getattr(args, name) is not None}
    try:
        return AuditFilters(**values, **extra)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise CliError(f"--{'-'.join(str(p) for p in error['loc']).replace('_', '-')}: {error['msg']}") from exc


def _list(args: argparse.Namespace) -> int:
    filters = _filters(args, limit=args.limit) if 1 <= args.limit <= 500 else None
    if filters is None:
        raise CliError("--limit must be between 1 and 500")
    database = open_database(load_settings())
    with database.session(write=True) as session:
        try:
            rows, cursor = guarded(audit_log.list_records, session, filters, tenant_scope=None)
        except audit_log.AuditQueryError as exc:
            raise CliError(str(exc)) from exc
        audit_log.log_access(session, key_id=None, tenant=CLI_TENANT, role=CLI_ROLE, action="list",
                             filters=filters.model_dump(mode="json", exclude_none=True), result_count=len(rows))
        for row in rows:
            if args.json:
                print(json.dumps(record_dict(row), ensure_ascii=False))
            else:
                print(f"{row.seq:>6}  {row.id}  {row.created_at:%Y-%m-%d %H:%M:%S}  {row.tenant}  "
                      f"{row.domain or '-'}  {row.intent or '-'}  {row.status}  {row.gate_action or '-'}  "
                      f"fer={'-' if row.fer is None else f'{row.fer:.2f}'}")
    if cursor and not args.json:
        print(f"more: --cursor {cursor}", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    with database.session(write=True) as session:
        row = guarded(audit_log.get_record, session, args.audit_id, tenant_scope=None)
        audit_log.log_access(session, key_id=None, tenant=CLI_TENANT, role=CLI_ROLE, action="show",
                             target=args.audit_id[:64], result_count=0 if row is None else 1)
        if row is not None:
            record = record_dict(row)
            record["evaluations"] = [
                {c: getattr(e, c) for c in ("id", "evaluator_version", "status", "fer", "citation_confidence",
                                            "joint_score", "kg_version", "rule_pack_hash")}
                for e in audit_log.evaluations_for(session, args.audit_id)
            ]
    if row is None:
        raise CliError(f"no audit record {args.audit_id!r}")
    print(json.dumps(record, indent=2, ensure_ascii=False, default=str))
    return 0


def _export(args: argparse.Namespace) -> int:
    filters = _filters(args)
    database = open_database(load_settings())
    out = args.output.open("w", encoding="utf-8", newline="") if args.output else sys.stdout

    def write_all() -> None:
        with database.session(write=True) as session:
            audit_log.log_access(session, key_id=None, tenant=CLI_TENANT, role=CLI_ROLE, action="export",
                                 filters=filters.model_dump(mode="json", exclude_none=True))
        with database.session() as session:  # streamed: keyset pages, one line at a time
            for line in export_lines(audit_log.iter_records(session, filters, tenant_scope=None), args.format):
                out.write(line)

    try:
        guarded(write_all)
    except audit_log.AuditQueryError as exc:
        raise CliError(str(exc)) from exc
    finally:
        if args.output:
            out.close()
    if args.output:
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
