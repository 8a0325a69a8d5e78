"""`auditor verify --domain D [--json] [--pack PATH] [--intent I] [FILE|-]`: judge the claims of a text.

Exit status: 0 when the gate would let the text through (allow, annotate, redact), 1 when it would block or
refuse it (so a script can stop on it), 2 on bad input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from auditor.cli import CliError

DOMAINS = ("finance", "medical", "legal")
EVIDENCE_CHARS = 140   # the table shows the first evidence item; --json has all of it
STOPPING_ACTIONS = ("block", "refuse")   # the gate actions that keep a text from its reader: exit status 1
VERDICT_STYLES = {"supported": "green", "contradicted": "bold red", "unverifiable": "yellow"}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("verify", help="judge the claims of a text: supported / contradicted / unverifiable",
                                   description="Exit status 1 when the gate would block or refuse the text.")
    parser.add_argument("--domain", required=True, help="finance, medical or legal")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--pack", help="rule-pack YAML file (default: the bundled pack of the domain)")
    parser.add_argument("--intent", help="apply only the rules for this intent")
    parser.add_argument("--kg", choices=("current", "packaged"), default="current",
                        help="current: the store's KG version (imports included; the default); packaged: without them")
    parser.add_argument("file", nargs="?", default="-", help="UTF-8 text file, or - for stdin (default)")
    parser.set_defaults(func=run)


def read_text(source: str) -> str:
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except FileNotFoundError:
        raise CliError(f"no such file: {source}") from None
    except IsADirectoryError:
        raise CliError(f"{source} is a directory, not a text file") from None
    except OSError as exc:
        raise CliError(f"cannot read {source}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{'stdin' if source == '-' else source} is not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise CliError(f"{'stdin' if source == '-' else source} is empty: nothing to verify")
    return text


def _serve_current_kg(domain: str) -> None:
    """Judge with the store's current KG version of `domain` (imports, rollbacks); the packaged KG when the
    store holds none or cannot be read (said on stderr)."""
    from sqlalchemy import inspect
    from sqlalchemy.engine import make_url

    from auditor.commands.common import load_settings
    from auditor.commands.terminal import safe
    from auditor.kg.errors import KgIntegrityError
    from auditor.kg.live import LiveKnowledgeGraphs
    from auditor.store.database import Database

    settings = load_settings()
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").is_file():
        return                               # no store here: nothing was imported
    database = Database.from_settings(settings)
    try:
        if inspect(database.engine).has_table("kg_versions"):
            LiveKnowledgeGraphs(database, [domain], refresh_s=0).refresh()
    except KgIntegrityError as exc:   # judging without a doctored list would drop its claims: refuse instead
        raise CliError(f"the store's {domain} KG failed its integrity check, so this text is not judged "
                       f"(`auditor audit verify-chain` names the problem; --kg packaged judges without imports): "
                       f"{safe(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - any other store problem: judge with the packaged KG, and say so
        print(f"auditor verify: note: the store's KG versions could not be read ({type(exc).__name__}); "
              "judging with the packaged KG", file=sys.stderr)
    finally:
        database.dispose()


def run(args: argparse.Namespace) -> int:
    if args.domain not in DOMAINS:
        raise CliError(f"unknown domain {args.domain!r} (choose from {', '.join(DOMAINS)})")
    text = read_text(args.file)
    from rules import PackError, load_pack, verify  # heavy imports only once the input is known to be good

    if args.kg == "current":
        _serve_current_kg(args.domain)
    try:
        pack = load_pack(Path(args.pack)) if args.pack else None
        report = verify(text, args.domain, pack=pack, intent=args.intent)
    except PackError as exc:
        raise CliError(str(exc)) from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), ensure_ascii=False))
    else:
        print_table(report)
    action = report.strongest_action()
    return 1 if action is not None and action.on_fail in STOPPING_ACTIONS else 0


def print_table(report: object) -> None:
    from rich.console import Console
    from rich.table import Table

    from rules import Report

    assert isinstance(report, Report)
    console = Console()
    table = Table(title=f"{report.domain}: {len(report.claims)} claims", show_lines=False)
    for column in ("#", "verdict", "kind", "claim", "conf", "evidence"):
        table.add_column(column, overflow="fold")
    for index, claim in enumerate(report.claims):
        style = VERDICT_STYLES[claim.verdict]
        evidence = claim.evidence[0].description if claim.evidence else ""
        evidence = evidence if len(evidence) <= EVIDENCE_CHARS else evidence[:EVIDENCE_CHARS - 1] + "…"
        table.add_row(str(index), f"[{style}]{claim.verdict}[/]", claim.kind, claim.text, f"{claim.confidence:.2f}",
                      evidence)
    console.print(table)
    scores = {"FER": report.fer, "citation confidence": report.citation_confidence, "joint": report.joint_score}
    console.print("  ".join(f"{k}: {'n/a' if v is None else f'{v:.3f}'}" for k, v in scores.items()))
    action = report.strongest_action()
    if action is not None:
        console.print(f"gate: [bold]{action.on_fail}[/] ({action.rule_id}, {action.severity})")
    console.print(f"versions: kg {report.versions.kg}  pack {report.versions.rule_pack[:12]}  "
                  f"{report.versions.evaluator}", style="dim")
