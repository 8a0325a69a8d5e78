"""A real `auditor serve` in a subprocess, for the load benchmarks (`service_load`, `soak`): start it and time
`/ready`, read the RSS of its whole process tree, send a fixed chat mix from closed-loop clients, and check
that every success has its committed record and that the chain verifies."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from auditor.loadgen.server import wait_until_ready

DATA = Path(__file__).parent / "data"
INTENTS = {"finance": "fin-risk", "medical": "medical-diagnosis", "legal": "legal-advice", None: "general-chat"}
MIX = ("finance", "medical", "legal", None)   # a fixed mix: one of each in turn
INDEX_CACHE_DIR = Path("var/cache/kg-index").resolve()


@dataclass
class ChatRequest:
    domain: str | None
    user_text: str

    def body(self, max_tokens: int) -> dict[str, Any]:
        return {"model": "auditor", "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": self.user_text}]}

    def headers(self) -> dict[str, str]:
        headers = {"X-Intent": INTENTS[self.domain]}
        if self.domain:
            headers["X-Domain"] = self.domain
        return headers


def request_mix(count: int, *, tag: str) -> list[ChatRequest]:
    """`count` requests cycling finance, medical, legal and no-domain chat (benchmarks/data). Each user text ends
    with a number unique to (tag, index), so no two requests of a run, or of two runs, share a prompt: neither
    side of a comparison gets prefix-cache hits the other does not."""
    by_domain: dict[str | None, list[str]] = {d: [] for d in MIX}
    for line in (DATA / "hallucination_prompts.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_domain[row["domain"]].append(row["prompt"])
    by_domain[None] = [json.loads(line)["prompt"] for line in (DATA / "offdomain_chat.jsonl").read_text().splitlines()]
    cursors = {d: itertools.cycle(prompts) for d, prompts in by_domain.items()}
    return [ChatRequest(domain, f"{next(cursors[domain])} (#{tag}{i:05d})")
            for i, domain in zip(range(count), itertools.cycle(MIX))]


@dataclass
class Result:
    status: int
    domain: str | None
    audit_id: str | None = None
    completion_tokens: int = 0
    ttft_s: float | None = None
    e2e_s: float = 0.0
    error: str | None = None


async def send_stream(client: httpx.AsyncClient, request: ChatRequest, max_tokens: int) -> Result:
    started = time.perf_counter()
    result = Result(0, request.domain)
    try:
        async with client.stream("POST", "/v1/chat/completions", json=request.body(max_tokens),
                                 headers=request.headers()) as response:
            result.status = response.status_code
            result.audit_id = response.headers.get("X-Audit-Id")
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    result.status, result.error = 599, chunk["error"]["message"]   # an error event mid-stream
                    continue
                choices = chunk.get("choices") or []
                if result.ttft_s is None and choices and choices[0].get("delta", {}).get("content"):
                    result.ttft_s = time.perf_counter() - started
                if chunk.get("usage"):
                    result.completion_tokens = chunk["usage"]["completion_tokens"]
    except httpx.HTTPError as exc:
        result.status, result.error = 598, f"{type(exc).__name__}: {exc}"
    result.e2e_s = time.perf_counter() - started
    return result


async def closed_loop(base_url: str, requests: list[ChatRequest], *, clients: int, max_tokens: int,
                      deadline: float | None = None) -> tuple[list[Result], float]:
    """`clients` workers, each sending its next request as soon as its previous one ends; (results, seconds)."""
    queue: asyncio.Queue[ChatRequest] = asyncio.Queue()
    for request in requests:
        queue.put_nowait(request)
    results: list[Result] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits) as client:
        async def worker() -> None:
            while not queue.empty() and (deadline is None or time.monotonic() < deadline):
                results.append(await send_stream(client, queue.get_nowait(), max_tokens))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return results, time.perf_counter() - started


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    base_url: str
    database_url: str
    ready_s: float
    workdir: Path
    warm_s: float | None = None
    started_at: float = 0.0   # perf_counter when it was launched
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def rss_mb(self) -> float:
        """Resident memory of the server and every process below it (the engine core, workers)."""
        return sum(rss_kb(pid) for pid in tree(self.proc.pid)) / 1024

    def kg_cache_mb(self) -> tuple[float, float] | None:
        """(held, budget) MB of the engine core's KG-constraint caches, all domains, from /metrics (the core's
        latest report): the part of its RSS that is bounded caches filling. None when /metrics says nothing."""
        from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

        try:
            text = httpx.get(f"{self.base_url}/metrics", timeout=10).text
        except httpx.HTTPError:
            return None
        totals = {family.name: sum(sample.value for sample in family.samples)   # all domains
                  for family in text_string_to_metric_families(text) if family.name.startswith(_KG_CACHE)}
        if not totals:
            return None
        held = totals.get(f"{_KG_CACHE}view_bytes", 0.0) + totals.get(f"{_KG_CACHE}memo_bytes", 0.0)
        return held / 2**20, totals.get(f"{_KG_CACHE}budget_bytes", 0.0) / 2**20

    def verify_chain(self) -> bool:
        response = httpx.get(f"{self.base_url}/v1/audits/verify", timeout=120)
        return response.status_code == 200 and response.json().get("ok") is True

    def records_found(self, audit_ids: list[str]) -> int:
        """How many of these requests have a committed record that is not a failure."""
        return committed(self.records(audit_ids))

    def records(self, audit_ids: list[str]) -> dict[str, tuple[str, float | None]]:
        """id -> (status, the engine's own time for it, arrival to last token: `timings.engine_e2e_s`)."""
        from sqlalchemy import create_engine, select  # noqa: PLC0415

        from auditor.trail.models import AuditRecord  # noqa: PLC0415

        engine = create_engine(self.database_url)
        found: dict[str, tuple[str, float | None]] = {}
        with engine.connect() as conn:
            for start in range(0, len(audit_ids), 500):
                rows = conn.execute(select(AuditRecord.id, AuditRecord.status, AuditRecord.timings)
                                    .where(AuditRecord.id.in_(audit_ids[start : start + 500])))
                found.update({row.id: (row.status, (row.timings or {}).get("engine_e2e_s")) for row in rows})
        engine.dispose()
        return found

    def stop(self) -> None:
        for proc in [*self.workers, self.proc]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in [*self.workers, self.proc]:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def committed(records: dict[str, tuple[str, float | None]]) -> int:
    """How many of `Server.records`' records are not failures (each request's `records_found`)."""
    return sum(1 for status, _ in records.values() if status != "error")


def start_server(*, source_root: Path | None = None, database_url: str | None = None, redis_url: str | None = None,
                 env: dict[str, str] | None = None, ready_timeout_s: float = 600,
                 bytecode_cache: Path | None = None, wait_warm: bool = True) -> Server:
    """`auditor serve` from this checkout, or from `source_root` (another checkout of the project, e.g. main as
    it was, run with this interpreter), on a fresh SQLite file unless `database_url` names another store.
    `bytecode_cache`: compiled modules are written and read there only (PYTHONPYCACHEPREFIX), even where the
    environment forbids writing bytecode, so an empty folder is a cold start and a reused one a warm start.
    `wait_warm`: return only once `/ready` also says warm (False: as soon as it answers 200)."""
    workdir = Path(tempfile.mkdtemp(prefix="service-bench-"))
    port = _free_port()
    database_url = database_url or f"sqlite:///{workdir / 'audit.db'}"
    # one KG-index cache for every server of a checkout a benchmark starts (each runs in its own scratch folder);
    # another checkout gets its own: its code may key the index differently, and a server replaces an index of
    # another key, so two checkouts sharing one would each start cold every time
    index_cache = INDEX_CACHE_DIR if source_root is None else INDEX_CACHE_DIR.with_name(
        f"{INDEX_CACHE_DIR.name}-{hashlib.sha256(str(Path(source_root).resolve()).encode()).hexdigest()[:12]}")
    child_env = {**os.environ, "AUDITOR_DATABASE_URL": database_url, "AUDITOR_ENVIRONMENT": "development",
                 "AUDITOR_METRICS_ACCESS": "open", "AUDITOR_INDEX_CACHE_DIR": str(index_cache), **(env or {})}
    if redis_url:
        child_env["AUDITOR_REDIS_URL"] = redis_url
    if source_root is not None:
        child_env["PYTHONPATH"] = str(source_root)
    if bytecode_cache is not None:
        child_env.pop("PYTHONDONTWRITEBYTECODE", None)
        child_env["PYTHONPYCACHEPREFIX"] = str(bytecode_cache)
    command = [sys.executable, "-m", "auditor.cli"]
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    started = time.perf_counter()
    proc = subprocess.Popen([*command, "serve", "--port", str(port)], cwd=workdir, env=child_env,
                            stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    server = Server(proc, base_url, database_url, 0.0, workdir, started_at=started)
    if redis_url:
        server.workers.append(subprocess.Popen([*command, "worker", "--concurrency", "1"], cwd=workdir, env=child_env,
                                               stdout=log, stderr=subprocess.STDOUT))
    wait_until_ready(proc, base_url, timeout_s=ready_timeout_s, log_path=workdir / "server.log", stop=server.stop)
    server.ready_s = time.perf_counter() - started
    if wait_warm:   # what loads after ready (validator registries) is in before the load starts, as for the engine
        wait_until_ready(proc, base_url, timeout_s=ready_timeout_s, log_path=workdir / "server.log",
                         stop=server.stop, warm=True)
        server.warm_s = time.perf_counter() - started
    return server


_KG_CACHE = "auditor_engine_kg_constraint_"   # the core's KG-constraint cache gauges, one family per kind


def thread_env(threads: int) -> dict[str, str]:
    """The engine's torch threads, for a server of this checkout (AUDITOR_ENGINE_THREADS) or of an older one
    that lacks the setting (OMP_NUM_THREADS, read by torch at start)."""
    return {"AUDITOR_ENGINE_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds these processes have used so far (those that are gone count 0)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])   # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
