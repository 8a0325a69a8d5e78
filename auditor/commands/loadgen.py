"""`auditor loadgen`: load the service with an intent mix and report latency, goodput and hallucination rates
per intent.

    auditor loadgen --rate 4 --duration 60 --sla medical-diagnosis:ttft_p99=500ms   # open loop, Poisson
    auditor loadgen --users 8 --requests 200                                        # closed loop
    auditor loadgen --sweep --rates 1,2,4 --constraint on,off --max-num-seqs 4,16 --out docs/loadgen

A single run goes to a running service (--url, default http://127.0.0.1:8000). `--sweep` starts a server of
its own for each configuration (constraint on/off, max_num_seqs) unless --url is given, when it sweeps the
rates only. Traffic goes to 127.0.0.1 (or ::1) only, and every run is bounded by --duration and --requests.
Exit status: 0; 1 when a run missed one of its SLAs; 2 for bad arguments or an unreachable service.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from auditor.cli import CliError
from auditor.loadgen.client import NotLoopback, Result, require_loopback
from auditor.loadgen.report import ALL
from auditor.loadgen.run import MAX_REQUESTS, LoadSpec
from auditor.loadgen.workload import WorkloadError, load_prompts, parse_mix, parse_slas

DEFAULT_MIX = "medical-diagnosis=0.3,fin-risk=0.3,legal-advice=0.2,code-completion=0.2"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("loadgen", help="load the service with an intent mix; latency, goodput, FER per intent",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="the service (loopback only; default http://127.0.0.1:AUDITOR_PORT); with "
                                      "--sweep: sweep the rates on this server instead of starting servers")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, help="open loop: Poisson arrivals per second (default 2)")
    load.add_argument("--users", type=int, help="closed loop: this many users, each sending as soon as answered")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds to send for (default 30, at most 3600)")
    parser.add_argument("--requests", type=int, default=None, help=f"send at most this many (at most {MAX_REQUESTS})")
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"intent=weight,... (default {DEFAULT_MIX})")
    parser.add_argument("--sla", action="append", default=[], metavar="INTENT:METRIC_PNN=VALUE",
                        help="an objective, e.g. medical-diagnosis:ttft_p99=500ms or '*:e2e_p90=3s' (metrics: ttft, "
                             "itl, tpot, e2e); repeatable")
    parser.add_argument("--prompts", type=Path, help="JSONL prompts (intent, domain, prompt) instead of the bundled ones")
    parser.add_argument("--max-tokens", type=int, default=64, help="completion tokens per request (default 64)")
    parser.add_argument("--model", default="auditor", help="the model id requests name (default auditor)")
    parser.add_argument("--max-concurrency", type=int, default=256, help="requests in flight at most (open loop)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one request may take")
    parser.add_argument("--seed", type=int, default=0, help="arrival times and intent draws")
    parser.add_argument("--api-key", default=os.environ.get("AUDITOR_API_KEY"),
                        help="client key for the requests (default AUDITOR_API_KEY)")
    parser.add_argument("--audit-key", default=os.environ.get("AUDITOR_AUDIT_KEY"),
                        help="auditor key to read the run's records (default AUDITOR_AUDIT_KEY, else --api-key)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (no tables, no progress bar)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. in CI logs)")
    sweep = parser.add_argument_group("sweep")
    sweep.add_argument("--sweep", action="store_true", help="measure every rate on every configuration")
    sweep.add_argument("--rates", default="1,2,4", help="offered rates, req/s (default 1,2,4)")
    sweep.add_argument("--constraint", default="on", help="KG constraint: on, off or on,off (default on)")
    sweep.add_argument("--max-num-seqs", default="", help="engine batch sizes, e.g. 4,16 (default: the engine's)")
    sweep.add_argument("--threads", type=int, default=1, help="torch threads of each server's engine (default 1)")
    sweep.add_argument("--out", type=Path, default=Path("loadgen-sweep"), help="where the CSV and charts go")
    sweep.add_argument("--no-charts", action="store_true", help="write the CSV only (charts need matplotlib)")
    parser.set_defaults(func=_loadgen)


def _loadgen(args: argparse.Namespace) -> int:
    try:
        mix = parse_mix(args.mix)
        slas = parse_slas(args.sla, mix)
        prompts = load_prompts(args.prompts, mix)
    except WorkloadError as exc:
        raise CliError(str(exc)) from exc
    from auditor.loadgen.sweep import Workload  # noqa: PLC0415

    workload = Workload(mix, prompts, slas, audit_key=args.audit_key)
    spec = _spec(args)
    if args.sweep:
        return _sweep(args, spec, workload)
    return _single(args, spec, workload)


def _spec(args: argparse.Namespace) -> LoadSpec:
    url = args.url or f"http://127.0.0.1:{os.environ.get('AUDITOR_PORT', '8000')}"
    try:
        base_url = require_loopback(url)
    except NotLoopback as exc:
        raise CliError(str(exc)) from exc
    rate = None if args.users else (args.rate if args.rate is not None else 2.0)
    spec = LoadSpec(base_url=base_url, rate=rate, users=args.users, duration_s=args.duration,
                    max_requests=args.requests if args.requests is not None else MAX_REQUESTS,
                    max_concurrency=args.max_concurrency, max_tokens=args.max_tokens, model=args.model,
                    api_key=args.api_key, timeout_s=args.timeout, drain_s=args.timeout, seed=args.seed)
    try:
        spec.check()
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    return spec


def _check_reachable(base_url: str) -> None:
    import httpx  # noqa: PLC0415

    try:
        status = httpx.get(f"{base_url}/ready", timeout=5).status_code
    except httpx.HTTPError as exc:
        raise CliError(f"no service answers at {base_url} ({type(exc).__name__}); start one with `auditor serve`") from exc
    if status != 200:
        raise CliError(f"the service at {base_url} is not ready (/ready answered {status})")


# -- one run -------------------------------------------------------------------------------------


def _single(args: argparse.Namespace, spec: LoadSpec, workload: Any) -> int:
    from auditor.loadgen.sweep import measure  # noqa: PLC0415

    _check_reachable(spec.base_url)
    with _progress(args, spec.expected_requests) as (on_result, _describe):
        summary = asyncio.run(measure(spec, workload, tag=f"g{os.getpid()}x", on_result=on_result))
    summary.update({"url": spec.base_url, "mode": "open" if spec.rate else "closed", "rate": spec.rate,
                    "users": spec.users, "duration_s": spec.duration_s, "mix": workload.mix,
                    "load_average": [round(x, 2) for x in os.getloadavg()]})
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary, list(workload.mix))
    return 0 if all(s["met"] for s in summary["slas"]) else 1


def _print_summary(summary: dict[str, Any], intents: list[str]) -> None:
    # Piped or redirected output has no terminal width to fit: rich would assume 80 columns and truncate cells.
    console = Console() if sys.stdout.isatty() else Console(width=180)
    mode = f"rate {summary['rate']:g}/s (open loop)" if summary["rate"] else f"{summary['users']} users (closed loop)"
    table = Table(title=f"{mode}, {summary['elapsed_s']:.1f} s, load average {summary['load_average'][0]:.1f}; "
                        "latencies in ms")
    columns = ["intent", "req", "ok", "req/s", "tok/s", "TTFT p50", "TTFT p99", "ITL p99", "e2e p50", "e2e p99",
               "queue p99", "goodput", "FER", "viol."]
    for column in columns:
        table.add_column(column, justify="left" if column == "intent" else "right", no_wrap=column == "intent")
    for intent in [*intents, ALL]:
        s = summary["intents"][intent]
        table.add_row(intent, str(s["requests"]), str(s["ok"]), f"{s['req_s']:.2f}", f"{s['output_tok_s']:.0f}",
                      *(_ms(s.get(k)) for k in ("ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
                                                "queue_p99_ms")),
                      f"{s['goodput_req_s']:.2f}", _fraction(s.get("fer")), _fraction(s.get("violation_rate")))
    console.print(table)
    for sla in summary["slas"]:
        verdict = "[green]met[/green]" if sla["met"] else "[red]MISSED[/red]"
        console.print(f"SLA {sla['sla']}: observed {_ms(sla['observed_ms'])} ms over {sla['samples']} samples: {verdict}")
    errors = summary["intents"][ALL]["errors"]
    if errors:
        console.print("errors: " + ", ".join(f"{kind} x{count}" for kind, count in sorted(errors.items())))
    if summary["delayed_arrivals"]:
        console.print(f"{summary['delayed_arrivals']} arrivals waited for a free slot (--max-concurrency): the run "
                      "was not purely open-loop")
    if summary["cancelled"]:
        console.print(f"{summary['cancelled']} requests were still running after the drain time and were cancelled")
    if "records_unavailable" in summary:
        console.print(f"FER, violations and queue times: records unavailable ({summary['records_unavailable']}); "
                      "give an auditor key with --audit-key")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# -- sweep ---------------------------------------------------------------------------------------


def _sweep(args: argparse.Namespace, spec: LoadSpec, workload: Any) -> int:
    from auditor.loadgen import sweep  # noqa: PLC0415
    from auditor.loadgen.charts import ChartsUnavailable, require_matplotlib, write_charts  # noqa: PLC0415

    if not args.no_charts:
        try:
            require_matplotlib()   # before minutes of load, not after
        except ChartsUnavailable as exc:
            raise CliError(f"{exc}; or pass --no-charts for the CSV only") from exc
    rates = _numbers(args.rates, "--rates", float)
    if spec.users:
        raise CliError("--sweep sweeps open-loop rates (--rates); --users is for a single run")
    configs = _configs(args)
    if len(configs) * len(rates) > sweep.MAX_POINTS:
        raise CliError(f"{len(configs) * len(rates)} points: a sweep measures at most {sweep.MAX_POINTS}")
    for rate in rates:
        try:
            replace(spec, rate=rate).check()
        except ValueError as exc:
            raise CliError(f"--rates: {exc}") from exc
    if not 1 <= args.threads <= 256:
        raise CliError("--threads must be between 1 and 256")
    _writable(args.out)   # before minutes of load, not after
    start_server = None
    if args.url:
        _check_reachable(spec.base_url)
    else:
        start_server = _server_starter(args)
    intents = list(workload.mix)
    total = sum(replace(spec, rate=rate).expected_requests for rate in rates) * len(configs)
    console = Console(stderr=True)
    done: list[sweep.Point] = []
    with _progress(args, total) as (on_result, describe):
        def on_point(point: sweep.Point) -> None:
            done.append(point)
            sweep.write_csv(done, args.out / "sweep.csv")   # what is measured survives an interrupted sweep
            every = point.summary["intents"][ALL]
            describe(f"{point.config.label}, {point.rate:g}/s done")
            if not args.json:
                console.print(f"{point.config.label}, rate {point.rate:g}/s: {every['req_s']:.2f} req/s, p99 TTFT (ms) "
                              + ", ".join(f"{i} {_ms(point.summary['intents'][i]['ttft_p99_ms'])}" for i in intents)
                              + f" (load average {point.load_average[0]:.1f})")

        try:
            points = sweep.run_sweep(configs, rates, spec, workload, start_server=start_server, on_point=on_point,
                                     on_result=on_result)
        except RuntimeError as exc:   # a server that would not start
            raise CliError(str(exc)) from exc
    sweep.write_csv(points, args.out / "sweep.csv")
    table = sweep.p99_table(points, intents)
    (args.out / "p99_table.md").write_text(table)
    written = [args.out / "sweep.csv", args.out / "p99_table.md"]
    if not args.no_charts:
        title = f"{spec.max_tokens} max tokens, {spec.duration_s:g} s per point"
        written += write_charts(points, intents, args.out, title=title)
    if args.json:
        print(json.dumps({"points": [{"config": p.config.label, "rate": p.rate, "load_average": p.load_average,
                                      **p.summary} for p in points], "files": [str(p) for p in written]}, indent=2))
    else:
        print(table)
        print("wrote " + ", ".join(str(path) for path in written))
    return 0


def _writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".loadgen-write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise CliError(f"--out {folder}: cannot write there ({exc.strerror or exc})") from exc


def _configs(args: argparse.Namespace) -> list[Any]:
    from auditor.loadgen.sweep import ServerConfig  # noqa: PLC0415

    constraint_values = [v.strip() for v in args.constraint.split(",") if v.strip()]
    if not constraint_values or any(v not in ("on", "off") for v in constraint_values):
        raise CliError("--constraint takes on, off or on,off")
    sizes = _numbers(args.max_num_seqs, "--max-num-seqs", int) if args.max_num_seqs else [None]
    if any(size is not None and not 1 <= size <= 4096 for size in sizes):
        raise CliError("--max-num-seqs: each size must be between 1 and 4096")
    if args.url:
        if args.constraint != "on" or args.max_num_seqs:
            raise CliError("--constraint and --max-num-seqs need servers of their own: drop --url to let the sweep "
                           "start them")
        return [ServerConfig()]
    return [ServerConfig(constraint=value == "on", max_num_seqs=size) for value in constraint_values for size in sizes]


def _numbers(text: str, flag: str, kind: Callable[[str], Any]) -> list[Any]:
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise CliError(f"{flag}: give at least one value")
    return values


def _server_starter(args: argparse.Namespace) -> Callable[[Any], Any]:
    from auditor.loadgen.server import launch  # noqa: PLC0415

    def start(config: Any) -> Any:
        env = {**config.env(), "AUDITOR_ENGINE_THREADS": str(args.threads), "OMP_NUM_THREADS": str(args.threads)}
        print(f"starting a server: {config.label}", file=sys.stderr)
        return launch(env)

    return start


class _progress:
    """A progress bar over the requests (stderr; off with --json or --no-progress): yields (on_result, describe)."""

    def __init__(self, args: argparse.Namespace, total: int) -> None:
        self.enabled = not (args.json or args.no_progress)
        self.total = total
        self.errors = 0

    def __enter__(self) -> tuple[Callable[[Result], None], Callable[[str], None]]:
        if not self.enabled:
            return (lambda _result: None), (lambda _text: None)
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
        self.bar.__enter__()
        self.task = self.bar.add_task("requests", total=self.total, errors=0)

        def on_result(result: Result) -> None:
            self.errors += not result.ok
            self.bar.update(self.task, advance=1, errors=self.errors)

        def describe(text: str) -> None:
            self.bar.update(self.task, description=text)

        return on_result, describe

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)
