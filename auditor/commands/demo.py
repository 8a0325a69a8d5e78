"""`auditor demo [--quick] [--domains D ...] [--dir DIR] [--serve]`: run the service on the embedded defaults and audit a scripted
set of finance, medical and legal requests (see `auditor.demo`)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from auditor.cli import CliError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the service locally and audit scripted requests")
    parser.add_argument("--quick", action="store_true", help="one request per domain instead of the full script")
    parser.add_argument("--domains", nargs="+", choices=("finance", "legal", "medical"),
                        help="only the scripted requests of these domains (default: all three)")
    parser.add_argument("--dir", type=Path, default=Path("var/demo"),
                        help="folder for the demo's SQLite audit store (default: ./var/demo)")
    parser.add_argument("--model", type=Path, help="checkpoint folder (default: the bundled demo model)")
    parser.add_argument("--max-tokens", type=int, default=160, help="max tokens per answer (default 160)")
    parser.add_argument("--serve", action="store_true",
                        help="keep the service up afterwards and print the console's URL and a login key (Ctrl-C stops)")
    parser.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from auditor.demo import (
        DemoError,
        console_key,
        demo_settings,
        free_port,
        render,
        run_demo,
        scripted_requests,
    )

    if args.max_tokens < 1:
        raise CliError("--max-tokens must be >= 1")
    if args.model is not None and not args.model.is_dir():
        raise CliError(f"no model folder at {args.model}")
    # Piped or in CI there is no terminal width: rich would squeeze the table into 80 columns.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    requests = scripted_requests(quick=args.quick, domains=args.domains)
    domains = sorted({r.domain for r in requests})
    settings = demo_settings(args.dir, model_path=args.model, domains=domains, port=free_port())
    console.print(f"Starting the service on 127.0.0.1:{settings.port} (audit store {settings.database_url}); "
                  f"loading the model and the {', '.join(domains)} knowledge graphs takes a minute or two ...")
    def serve(base_url: str) -> None:
        key = console_key(settings)
        console.print(f"\nThe compliance console: {base_url}/console (log in with this admin key, shown once: {key})\n"
                      "Serving until Ctrl-C ...", soft_wrap=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            console.print("stopping")

    try:
        results = run_demo(settings, requests, max_tokens=args.max_tokens, serve=serve if args.serve else None)
    except DemoError as exc:
        raise CliError(str(exc)) from exc
    render(results, settings, console)
    return 0
