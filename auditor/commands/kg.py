"""`auditor kg import|list|diff|rollback|reaudit`: the organisation's authoritative data as KG versions.

    auditor kg import --domain finance --format ofac-sdn sdn.csv --as-of 2026-12-01
    auditor kg import --domain medical --format formulary formulary.csv --name st-example
    auditor kg list [--domain legal]
    auditor kg stats [--domain finance]       # entities and facts per relation of the packaged KGs
    auditor kg diff 3f9916d8 28dbdd03
    auditor kg rollback 3f9916d8              # the packaged legal KG again (a new version row)
    auditor kg reaudit --older-than 28dbdd03  # re-score records judged under earlier legal versions
    auditor kg reaudit --withdrawn            # re-score records whose verdicts cite facts a rollback withdrew
    auditor kg anchor [--dry-run]             # chain the versions imported before KG changes were chained

Formats: ofac-sdn (finance), formulary (medical), cases (legal, SCDB columns), triples (any domain, JSONL);
the public sources' own: gleif-lei, sec-tickers, iso4217-xml (finance), uslm-xml, courtlistener-citations
(legal), openfda-label, rxnorm-rrf (medical), ecfr-xml, eurlex (any domain). See docs/knowledge.md.
Once any API key exists, imports and rollbacks name an admin key (`--key`, or AUDITOR_API_KEY); the key id
goes into every imported fact's provenance. Serving processes pick a new version up within
AUDITOR_KG_REFRESH_S seconds (or `POST /v1/kg/reload`). Imports, rollbacks and anchorings are chained events;
a version or overlay that fails its integrity check is flagged by `list`, refused by `diff` and `rollback`,
and never served. Names from the store are printed with control characters escaped (`terminal.safe`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from auditor.cli import CliError
from auditor.commands.common import add_json_flag, guarded, load_settings, open_database
from auditor.commands.terminal import cell, safe
from auditor.kg import versions
from auditor.settings import Settings
from auditor.store.database import Database
from knowledge_graphs import DOMAINS, packaged_kg
from knowledge_graphs.imports import FORMATS, ImportFileError, ImportFormatError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("kg", help="import authoritative data into the KGs; list, diff, roll back versions")
    actions = parser.add_subparsers(dest="action", required=True)
    imp = actions.add_parser("import", help="import a file as a new KG version (nothing changes if a row is bad)")
    imp.add_argument("file", type=Path, help="the file to import (its SHA-256 goes into every fact's provenance)")
    imp.add_argument("--domain", required=True, choices=DOMAINS, help="the KG the file extends")
    imp.add_argument("--format", required=True, choices=list(FORMATS), dest="fmt", help="the file's layout (docs/knowledge.md)")
    imp.add_argument("--name", help="the overlay's name (default: the format); a later import under the same "
                                    "name replaces this one")
    imp.add_argument("--as-of", help="the date the source is valid for, YYYY-MM-DD (default: today)")
    imp.add_argument("--key", help="an admin API key (default: AUDITOR_API_KEY)")
    imp.add_argument("--errors", action="store_true", help="list every bad line, not only the first")
    add_json_flag(imp, "the new version")
    imp.set_defaults(func=_import)
    listing = actions.add_parser("list", help="the version history (* marks each domain's current version)")
    listing.add_argument("--domain", choices=DOMAINS, help="only this domain's versions")
    add_json_flag(listing, "the versions")
    listing.set_defaults(func=_list)
    stats = actions.add_parser("stats", help="entities, and facts per relation, of the packaged KGs")
    stats.add_argument("--domain", choices=DOMAINS, help="only this domain")
    add_json_flag(stats, "the counts")
    stats.set_defaults(func=_stats)
    diff = actions.add_parser("diff", help="entities and facts that differ between two versions")
    diff.add_argument("before", help="the older version (hash, 6+ characters of it, or domain@seq)")
    diff.add_argument("after", help="the newer version")
    diff.add_argument("--limit", type=int, default=20, help="changes shown per kind (default 20)")
    add_json_flag(diff, "the changes")
    diff.set_defaults(func=_diff)
    rollback = actions.add_parser("rollback", help="make an earlier version current again")
    rollback.add_argument("version", help="a version hash (or 6+ characters of it), or domain@seq")
    rollback.add_argument("--key", help="an admin API key (default: AUDITOR_API_KEY)")
    rollback.set_defaults(func=_rollback)
    reaudit = actions.add_parser("reaudit", help="re-score records judged under KG versions older than VERSION, "
                                                 "or whose verdicts cite facts a rollback withdrew")
    which = reaudit.add_mutually_exclusive_group(required=True)
    which.add_argument("--older-than", dest="older_than",
                       help="re-score records judged under versions before this one, and those whose verdicts cite "
                            "an imported fact its domain's current version no longer holds")
    which.add_argument("--withdrawn", action="store_true",
                       help="re-score only the records whose verdicts cite an imported fact the current version "
                            "no longer holds (after a rollback, or an import that replaced an earlier one)")
    reaudit.add_argument("--domain", choices=DOMAINS, help="with --withdrawn: only this domain's records")
    reaudit.add_argument("--chunk-size", type=int, default=None, help="records per task")
    reaudit.add_argument("--detach", action="store_true", help="return once the job is queued (needs workers)")
    reaudit.set_defaults(func=_reaudit)
    anchor = actions.add_parser("anchor", help="chain the KG versions and imports written before KG changes were "
                                               "chained (check them first: this vouches for them)")
    anchor.add_argument("--dry-run", action="store_true", help="list what would be anchored, change nothing")
    anchor.add_argument("--key", help="an admin API key (default: AUDITOR_API_KEY)")
    anchor.set_defaults(func=_anchor)


# -- stats ----------------------------------------------------------------------------------------------


def _stats(args: argparse.Namespace) -> int:
    counts = {domain: kg_stats(packaged_kg(domain)) for domain in ([args.domain] if args.domain else DOMAINS)}
    if args.json:
        print(json.dumps(counts))
        return 0
    console = Console(highlight=False)
    for domain, found in counts.items():
        console.print(f"{domain} KG {found['version']}: {found['entities']} entities, {found['facts']} facts "
                      f"({found['facts_with_period']} with a validity period), {found['declared_relations']} relations "
                      "declared with aliases")
        table = Table("relation", "facts", "with a period")
        for relation, (facts, dated) in found["by_relation"].items():
            table.add_row(cell(relation), str(facts), str(dated))
        console.print(table)
    return 0


def kg_stats(kg: Any) -> dict[str, Any]:
    by_relation: dict[str, list[int]] = {}
    for fact in kg.facts():
        entry = by_relation.setdefault(fact.relation, [0, 0])
        entry[0] += 1
        entry[1] += bool(fact.valid_from or fact.valid_to)
    ordered = dict(sorted(by_relation.items(), key=lambda item: (-item[1][0], item[0])))
    return {"version": kg.version, "entities": len(kg), "facts": sum(v[0] for v in ordered.values()),
            "facts_with_period": sum(v[1] for v in ordered.values()), "declared_relations": len(kg.relations),
            "by_relation": {k: tuple(v) for k, v in ordered.items()}}


# -- import ---------------------------------------------------------------------------------------------


def _import(args: argparse.Namespace) -> int:
    if not args.file.is_file():
        raise CliError(f"{args.file}: no such file")
    if args.as_of is not None:
        _check_date(args.as_of)
    settings = load_settings()
    database = open_database(settings)
    actor = _actor(database, args.key)
    started, memory_before = time.perf_counter(), _max_rss_mb()
    try:
        result = guarded(versions.import_file, database, packaged_kg(args.domain), fmt=args.fmt, path=args.file,
                         name=args.name, as_of=args.as_of, imported_by=actor)
    except ImportFileError as exc:
        if args.errors:
            for line in exc.lines():
                print(line)
        raise CliError(safe(exc)) from exc
    except (ImportFormatError, versions.KgVersionError) as exc:
        raise CliError(safe(exc)) from exc
    elapsed = time.perf_counter() - started
    summary = {"version": result.version.version_hash, "domain": args.domain, "seq": result.version.seq,
               "import_id": result.import_id, "rows": result.rows, "entities": result.entities,
               "facts": result.facts, "superseded_matches": result.supersedes, "new_drugs": result.new_entities,
               "replaced_overlays": result.replaced, "imported_by": actor, "seconds": round(elapsed, 2),
               "peak_rss_mb_added": round(_max_rss_mb() - memory_before, 1)}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{args.domain} KG is now version {result.version.version_hash} (seq {result.version.seq}): "
          f"{result.rows} rows, {result.entities} entities, {result.facts} facts from {safe(args.file.name)} "
          f"in {elapsed:.1f}s; imported by {safe(actor)}")
    if result.replaced:
        print(f"replaces the earlier overlay {safe(', '.join(result.replaced))}")
    if result.new_entities:
        print(f"{len(result.new_entities)} drug(s) the KG did not know became new entities: "
              f"{safe(', '.join(result.new_entities[:10]))}{' ...' if len(result.new_entities) > 10 else ''}")
    print(f"serving processes follow within {settings.kg_refresh_s:g}s (or POST /v1/kg/reload)")
    return 0


def _actor(database: Database, key: str | None) -> str:
    """Who imports: the admin key given (its id goes into provenance); without one, only while no key exists."""
    from auditor.auth.keys import find_active_key, keys_ever_created

    key = key or os.environ.get("AUDITOR_API_KEY")
    with database.session() as session:
        if key:
            found = find_active_key(session, key)
            if found is None:
                raise CliError("the API key given is unknown or revoked")
            if found.role != "admin":
                raise CliError(f"KG changes need an admin key; this one is {found.role}")
            return f"key:{found.id} ({found.tenant})"
        if keys_ever_created(session):
            raise CliError("API keys exist: name an admin key with --key or AUDITOR_API_KEY")
    return versions.cli_actor()


def _check_date(value: str) -> None:
    import datetime as dt

    try:
        dt.date.fromisoformat(value)
    except ValueError as exc:
        raise CliError(f"--as-of must be a date YYYY-MM-DD, got {value!r}") from exc


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- list, diff, rollback -------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    rows = guarded(versions.list_versions, database, domain=args.domain)
    imports = guarded(versions.imports_by_id, database, sorted({i for r in rows for i in r.overlays}))
    if args.json:
        print(json.dumps([{**asdict(r), "created_at": r.created_at.isoformat(),
                           "overlay_names": [imports[i].name for i in r.overlays if i in imports]} for r in rows]))
        return 0
    if not rows:
        print("no KG versions yet: every domain serves its packaged KG (import with `auditor kg import`)")
        return 0
    table = Table(show_header=True, header_style="bold")
    for column in ("", "seq", "domain", "version", "action", "overlays", "created", "by", "check"):
        table.add_column(column)
    for row in rows:
        overlays = ", ".join(f"{imports[i].name} ({imports[i].rows} rows)" for i in row.overlays if i in imports)
        action = row.action + (f" to seq {row.rollback_to}" if row.rollback_to else "")
        table.add_row("*" if row.current else "", str(row.seq), row.domain, row.version_hash, action,
                      cell(overlays or "-"), row.created_at.isoformat(timespec="seconds"), cell(row.created_by),
                      cell(row.check))
    Console(width=200, highlight=False).print(table)
    failing = [row for row in rows if row.check != "ok"]
    if failing:
        print(f"{len(failing)} version(s) fail their integrity check (see the check column); "
              "`auditor audit verify-chain` names each problem")
    return 0


def _diff(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    try:
        before, after, changes = guarded(versions.diff, database, packaged_kg, args.before, args.after)
    except versions.KgVersionError as exc:
        raise CliError(safe(exc)) from exc
    groups = {"entities_added": [_entity(e) for e in changes.entities_added],
              "entities_removed": [_entity(e) for e in changes.entities_removed],
              "facts_added": [_fact(f) for f in changes.facts_added],
              "facts_removed": [_fact(f) for f in changes.facts_removed]}
    if args.json:
        print(json.dumps({"domain": before.domain, "before": before.version_hash, "after": after.version_hash,
                          **groups}, default=str))
        return 0
    print(f"{before.domain} KG {before.version_hash} (seq {before.seq}) -> {after.version_hash} (seq {after.seq})")
    for name, items in groups.items():
        print(f"{name.replace('_', ' ')}: {len(items)}")
        for item in items[:args.limit]:
            print(f"  {safe(item)}")
        if len(items) > args.limit:
            print(f"  ... {len(items) - args.limit} more")
    return 0


def _entity(entity: Any) -> str:
    return f"{entity.id} ({entity.type}) {entity.name}"


def _fact(fact: Any) -> str:
    target = fact.object if fact.object is not None else f"{fact.value}{' ' + fact.unit if fact.unit else ''}"
    where = f" [{fact.provenance.locator}]" if fact.provenance is not None else ""
    qualifiers = f" {json.dumps(fact.qualifiers, sort_keys=True)}" if fact.qualifiers else ""
    return f"{fact.subject} -{fact.relation}-> {target}{qualifiers}{where}"


def _rollback(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    actor = _actor(database, args.key)
    try:
        row = guarded(versions.rollback, database, packaged_kg, args.version, by=actor)
    except versions.KgVersionError as exc:
        raise CliError(safe(exc)) from exc
    print(f"{row.domain} KG is now version {row.version_hash} again (seq {row.seq}, rollback to seq "
          f"{row.rollback_to}); serving processes follow within {load_settings().kg_refresh_s:g}s")
    print(f"verdicts that cite facts this rollback withdrew show as stale until re-judged: "
          f"`auditor kg reaudit --withdrawn --domain {row.domain}`")
    return 0


def _anchor(args: argparse.Namespace) -> int:
    database = open_database(load_settings())
    actor = _actor(database, args.key)
    try:
        result = guarded(versions.anchor, database, by=actor, dry_run=args.dry_run)
    except versions.KgVersionError as exc:
        raise CliError(safe(exc)) from exc
    if not (result.versions or result.imports):
        print("nothing to anchor: every KG version and import is chained")
        return 0
    verb = "would anchor" if args.dry_run else "anchored"
    print(f"{verb} {len(result.versions)} KG version(s) and {len(result.imports)} import(s) written before KG "
          f"changes were chained{'' if args.dry_run else f'; by {safe(actor)}'}")
    for row in result.versions:
        print(f"  {row.domain}@{row.seq} {row.version_hash} {row.action}, overlays {safe(', '.join(row.overlays) or '-')}, "
              f"by {safe(row.created_by)} at {row.created_at.isoformat(timespec='seconds')}")
    return 0


# -- re-audit ---------------------------------------------------------------------------------------------


def _reaudit(args: argparse.Namespace) -> int:
    """`auditor reaudit start --kg-older-than <full hash>`: a re-audit job over the records whose current
    verdicts were made under an older version of the same domain's KG or cite facts it withdrew;
    `--withdrawn` (`reaudit start --kg-withdrawn`): only the records whose verdicts cite withdrawn facts."""
    from auditor.cli import main

    tail = (["--chunk-size", str(args.chunk_size)] if args.chunk_size else []) + (["--detach"] if args.detach else [])
    if args.withdrawn:
        scope = f"{args.domain} records" if args.domain else "records"
        print(f"{scope} whose verdicts cite imported facts the current KG versions no longer hold")
        return main(["reaudit", "start", "--kg-withdrawn", *(["--domain", args.domain] if args.domain else []), *tail])
    if args.domain:
        raise CliError("--domain goes with --withdrawn; --older-than names its domain by its version")
    database = open_database(load_settings())
    try:
        with database.engine.connect() as conn:
            target = versions.resolve(conn, args.older_than)
    except versions.KgVersionError as exc:
        raise CliError(safe(exc)) from exc
    print(f"{target.domain} records judged under KG versions older than {target.version_hash} (seq {target.seq}), "
          f"or citing facts the current version no longer holds")
    return main(["reaudit", "start", "--kg-older-than", target.version_hash, *tail])


def follow_store_once(database: Database, settings: Settings) -> None:
    """Serve the store's current KG versions in this process (a CLI that scores or verifies)."""
    from auditor.kg.live import LiveKnowledgeGraphs

    try:
        guarded(LiveKnowledgeGraphs(database, settings.domains, refresh_s=0).refresh)
    except versions.KgIntegrityError as exc:   # never judge with the packaged KG in place of a doctored one
        raise CliError(f"{safe(exc)} (`auditor audit verify-chain` names the problem)") from exc
