"""`auditor audits list|show|export`: read the trail from the command line (each read is logged).

    auditor audits list --domain medical --has-contradicted --since 1d
    auditor audits show <AUDIT_ID> [--json]
    auditor audits export --domain legal --format csv --output legal.csv
    auditor audits export --domain legal --bundle ./regulator-bundle     # see `auditor.trail.bundle`
    auditor audits bundle-keys       # the public key and checker hash a regulator gets apart from bundles

Verdict columns are the current verdicts (the latest evaluation under the active rule pack, else the gate's
own); times are when the output was produced (an import's own timestamp)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from auditor.cli import CliError
from auditor.commands.common import (
    add_json_flag,
    guarded,
    load_settings,
    open_database,
    print_json,
    print_table,
)
from auditor.commands.filters import add_record_filters, build_filter
from auditor.trail import reads
from auditor.trail.access_log import CliOperator
from auditor.trail.queries import AuditQueryError
from auditor.trail.schemas import AuditFilters, AuditRecordOut, ExportFilters

EVIDENCE_CHARS = 110
LIST_COLUMNS = ("seq", "id", "occurred", "tenant", "domain", "model", "source", "gate", "verdicts s/c/u", "fer",
                "asks", "pack")
_FILTER_FLAGS = ("since", "until", "tenant", "domain", "domain_source", "intent", "model", "gate_action", "status", "kind",
                 "fer_min", "fer_max", "rule_id", "q", "cursor")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("audits", help="list, show and export audit records")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="one line per record, newest first")
    add_record_filters(listing)
    listing.add_argument("--kind", choices=("record", "purge"), help="records (default: both) or purge markers")
    listing.add_argument("--limit", type=int, default=50, help="records per page, 1-500 (default 50)")
    listing.add_argument("--cursor", help="the page after this cursor (printed under a full page)")
    listing.add_argument("--json", action="store_true", help="one JSON object per record and line, nothing else")
    listing.set_defaults(func=_list)
    show = actions.add_parser("show", help="one record in full: current verdicts, evaluations, reviews, holds")
    show.add_argument("audit_id", help="the record's audit id (X-Audit-Id)")
    add_json_flag(show, "the record")
    show.set_defaults(func=_show)
    export = actions.add_parser("export", help="every matching record as JSONL or CSV, or a regulator bundle")
    add_record_filters(export)
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="line format (default jsonl)")
    export.add_argument("--output", type=Path, help="file to write (default: stdout)")
    export.add_argument("--bundle", type=Path, metavar="DIR",
                        help="write a regulator bundle (manifest, CSV/JSONL per record and claim, evaluations, "
                             "reviews, chain segment, verify_bundle.py) into this new folder")
    export.set_defaults(func=_export)
    keys = actions.add_parser("bundle-keys", help="what a regulator needs apart from any bundle: the Ed25519 public "
                                                  "key bundles are signed with, and the SHA-256 of verify_bundle.py")
    add_json_flag(keys, "the public key and the checker's hash")
    keys.set_defaults(func=_bundle_keys)


def _list(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 500:
        raise CliError("--limit must be between 1 and 500")
    filters = build_filter(AuditFilters, args, limit=args.limit, kind=args.kind, cursor=args.cursor)
    database = open_database(load_settings())
    with _read_errors():
        rows, cursor = guarded(reads.list_page, database, CliOperator(), filters)
    if args.json:
        for row in rows:
            print(row.model_dump_json(exclude={"evaluations", "reviews", "holds"}))
        if cursor:
            print(f"more: --cursor {cursor}", file=sys.stderr)
        return 0
    print_table(LIST_COLUMNS, [_list_row(row) for row in rows], empty="no audit records match these filters")
    if cursor:
        print(f"more: --cursor {cursor}")
    return 0


def _list_row(row: AuditRecordOut) -> tuple[Any, ...]:
    current = row.current
    pack = current.rule_pack if current else None
    return (row.seq, row.id, row.occurred_at, row.tenant, row.domain, row.model_id,
            current.source if current else None, row.gate_action if current and current.had_gate else "(no gate)",
            f"{current.n_supported}/{current.n_contradicted}/{current.n_unverifiable}"
            + (f", {current.n_fabrication} possibly fabricated" if current.n_fabrication else "") if current else None,
            current.fer if current else None, current.verdict_action if current else None,
            (pack.version or pack.hash[:12]) + ("" if pack.active else " (old)") if pack and pack.hash else None)


def _show(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    with _read_errors():
        record = guarded(reads.show_record, database, CliOperator(), args.audit_id)
    if args.json:
        print_json(record.model_dump(mode="json"))
    else:
        _print_record(record)
    return 0


def _print_record(record: AuditRecordOut) -> None:
    print(f"record {record.id} (seq {record.seq}, {record.kind})")
    print(f"  tenant {record.tenant}  domain {record.domain or '-'}  intent {record.intent or '-'}  "
          f"model {record.model_id or '-'}  via {record.endpoint or '-'}  status {record.status}")
    print(f"  occurred {record.occurred_at:%Y-%m-%d %H:%M:%S}  recorded {record.created_at:%Y-%m-%d %H:%M:%S}  "
          f"content mode {record.content_mode}" + (f"  purged {record.purged_at:%Y-%m-%d}" if record.purged_at else ""))
    for label, text in (("prompt", record.prompt), ("output", record.output)):
        print(f"  {label}: {text if text is not None else '(not stored)'}")
    if record.delivered_output not in (None, record.output):
        print(f"  delivered: {record.delivered_output}")
    gate = ", ".join(f"{d.get('stage')}:{d.get('rule_id')}={d.get('action')}" for d in record.gate_decisions or []) or "allow"
    print(f"  gate: {record.gate_action or '-'} ({gate})" if record.current and record.current.had_gate
          else "  gate: none (imported output)")
    current = record.current
    if current is not None:
        pack = current.rule_pack
        under = f"pack {pack.version or '?'} ({(pack.hash or '')[:12]}{', active' if pack.active else ', not the active pack'})" \
            if pack else "no pack named"
        print(f"current verdicts: {current.source}" + (f" {current.evaluation_id}" if current.evaluation_id else "")
              + f" under {under}; FER {_num(current.fer)}; asks {current.verdict_action or '-'}"
              + (f" ({current.max_severity})" if current.max_severity else "")
              + ("; reviewed" + (f", {current.disputed} disputed" if current.disputed else "") if current.reviewed else ""))
        print_table(("#", "verdict", "kind", "conf", "claim", "evidence"),
                    [(i, c.get("verdict"), c.get("kind"), c.get("confidence"), c.get("text"), _evidence(c))
                     for i, c in enumerate(current.claims or []) if isinstance(c, dict)], empty="  (no claims)")
    print("evaluations:")
    print_table(("at", "id", "status", "evaluator", "pack", "fer", "claims", "job"),
                [(e.created_at, e.id, e.status, e.evaluator_version,
                  f"{e.rule_pack_version or '?'} ({(e.rule_pack_hash or '')[:12]})" if e.rule_pack_hash else None,
                  e.fer, len(e.claims or []), e.job_id or e.failure_reason) for e in record.evaluations or []],
                empty="  (none yet)")
    print("reviews:")
    print_table(("at", "by", "verdicts", "disputed"),
                [(r["at"], r["reviewer"]["key_id"] or r["reviewer"]["tenant"], r["verdict_ref"], r["disputed"])
                 for r in record.reviews or []], empty="  (none)")
    if record.holds:
        print("legal holds: " + "; ".join(f"{h['hold_id']} matter {h['matter_id']}" for h in record.holds))


def _evidence(claim: dict[str, Any]) -> str | None:
    evidence = claim.get("evidence") or []
    if not evidence or not isinstance(evidence[0], dict):
        return None
    text = f"{evidence[0].get('description')}" + (f" [{evidence[0]['source']}]" if evidence[0].get("source") else "")
    return text if len(text) <= EVIDENCE_CHARS else text[:EVIDENCE_CHARS - 1] + "…"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _export(args: argparse.Namespace) -> int:
    if args.bundle is not None:
        return _bundle(args)
    filters = build_filter(ExportFilters, args, format=args.format)
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


def _bundle(args: argparse.Namespace) -> int:
    from auditor.trail.bundle import BundleError, BundleFilters, write_bundle

    if args.output is not None:
        raise CliError("--bundle writes a folder; leave out --output")
    filters = build_filter(BundleFilters, args)
    settings = load_settings()
    database = open_database(settings)
    try:
        with _read_errors():
            manifest = guarded(write_bundle, database, CliOperator(), filters, args.bundle)
    except BundleError as exc:
        raise CliError(str(exc)) from None
    counts, signing = manifest["counts"], manifest["signing"]
    print(f"bundle {args.bundle}: {counts['records']} records, {counts['claims']} claims, "
          f"{counts['evaluations']} evaluations, {counts['reviews']} reviews")
    print(f"signed with Ed25519 public key {signing['ed25519']['public_key']} "
          f"(fingerprint {signing['ed25519']['fingerprint']})")
    print(f"verify_bundle.py sha256 {signing['verifier_sha256']}")
    print("give the regulator the public key and the checker's hash apart from the bundle; they check it with: "
          f"python3 verify_bundle.py {args.bundle} --public-key {signing['ed25519']['public_key']}")
    return 0


def _bundle_keys(args: argparse.Namespace) -> int:
    from auditor.trail.bundle import BundleError, signing_public_key, verifier_sha256

    database = open_database(load_settings(), migrate=False)
    try:
        key = signing_public_key(database)
    except BundleError as exc:
        raise CliError(str(exc)) from None
    finally:
        database.dispose()
    values = {"ed25519_public_key": key.public_hex, "fingerprint": key.fingerprint,
              "verify_bundle_sha256": verifier_sha256()}
    if args.json:
        print_json(values)
        return 0
    print(f"ed25519 public key:      {values['ed25519_public_key']}")
    print(f"fingerprint:             {values['fingerprint']}")
    print(f"verify_bundle.py sha256: {values['verify_bundle_sha256']}")
    return 0


@contextmanager
def _read_errors() -> Iterator[None]:
    try:
        yield
    except (AuditQueryError, reads.RecordNotFound, reads.TenantNotAllowed) as exc:
        raise CliError(str(exc).strip("'")) from exc
