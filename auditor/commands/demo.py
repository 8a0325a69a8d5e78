"""`auditor demo [--quick] [--domains D ...] [--dir DIR] [--serve]`: run the service on the embedded defaults, audit a
scripted set of finance, medical and legal requests, and show what the product catches (see `auditor.demo`):
the KG constraint off and on, a wrong answer blocked, another LLM's answers imported and re-audited, and a
tampered copy of the trail caught by verify-chain."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from auditor.cli import CliError

DEFAULT_DIR = Path("var/demo")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the service locally, audit scripted requests, show what it catches")
    parser.add_argument("--quick", action="store_true", help="one scripted request per domain instead of the full script")
    parser.add_argument("--domains", nargs="+", choices=("finance", "legal", "medical"),
                        help="only the scripted requests of these domains (default: all three; the scenes always "
                             "load finance and medical)")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                        help="folder for the demo's SQLite audit store, made afresh on each run (default: ./var/demo)")
    parser.add_argument("--model", type=Path, help="checkpoint folder (default: the bundled demo model)")
    parser.add_argument("--max-tokens", type=int, default=160, help="max tokens per answer (default 160)")
    parser.add_argument("--serve", action="store_true",
                        help="keep the service up afterwards and print the console's URL and a login key (Ctrl-C stops)")
    parser.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    from rich.console import Console

    from auditor.demo import (
        SCENE_DOMAINS,
        DemoError,
        DemoReport,
        console_key,
        demo_settings,
        free_port,
        prepare_workdir,
        run_demo,
        scripted_requests,
    )
    from auditor.demo.render import render, render_how_to_open

    if args.max_tokens < 1:
        raise CliError("--max-tokens must be >= 1")
    if args.model is not None and not args.model.is_dir():
        raise CliError(f"no model folder at {args.model}")
    # Piped or in CI there is no terminal width: rich would squeeze the tables into 80 columns.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    requests = scripted_requests(quick=args.quick, domains=args.domains)
    domains = sorted({r.domain for r in requests} | set(SCENE_DOMAINS))
    try:
        prepare_workdir(args.dir, demo_default=args.dir == DEFAULT_DIR)
    except (DemoError, OSError) as exc:
        raise CliError(str(exc)) from exc
    settings = demo_settings(args.dir, model_path=args.model, domains=domains, port=free_port())
    console.print(f"Starting the service on 127.0.0.1:{settings.port} (audit store {settings.database_url}); "
                  f"loading the model and the {', '.join(domains)} knowledge graphs takes a minute or two ...",
                  soft_wrap=True)

    def done(report: DemoReport, base_url: str) -> None:
        render(report, settings, console)
        render_how_to_open(report, settings, console, serving=args.serve)
        console.print(f"\nThe demo took {time.monotonic() - started:.0f} s.")
        if args.serve:
            key = console_key(settings)
            console.print(f"\nThe compliance console: {base_url}/console (log in with this admin key, shown once: "
                          f"{key})\nServing until Ctrl-C ...", soft_wrap=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                console.print("stopping")

    try:
        run_demo(settings, requests, max_tokens=args.max_tokens, step=lambda message: console.print(message),
                 done=done)
    except DemoError as exc:
        raise CliError(str(exc)) from exc
    return 0
