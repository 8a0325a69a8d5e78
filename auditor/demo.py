"""`auditor demo`: the whole service on one machine, no servers, no downloads.

Starts the real app (`create_app`) under uvicorn in a background thread on a free 127.0.0.1 port,
with the embedded defaults (SQLite audit store in a demo folder, in-process tasks, the bundled
model), sends a scripted set of finance, medical and legal requests through the HTTP API with
`X-Intent`/`X-Domain` headers, and tabulates what the audit trail recorded for each.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from auditor.settings import Settings


class DemoError(RuntimeError):
    """The demo could not run (service failed to start, a request failed)."""


@dataclass(frozen=True, slots=True)
class ScriptedRequest:
    domain: str
    intent: str
    question: str


# One per domain first: `--quick` sends only these.
SCRIPT: tuple[ScriptedRequest, ...] = (
    ScriptedRequest("finance", "fin-risk", "Is Iran on the FATF call for action list?"),
    ScriptedRequest("medical", "medical-diagnosis", "What is the maximum daily dose of Metformin for adults?"),
    ScriptedRequest("legal", "legal-advice", "What is the citation of Miranda v. Arizona?"),
    ScriptedRequest("finance", "fin-risk", "What currency does Japan use?"),
    ScriptedRequest("finance", "fin-risk", "What amount triggers Currency Transaction Report?"),
    ScriptedRequest("medical", "medical-diagnosis", "Which drugs interact with Warfarin?"),
    ScriptedRequest("medical", "medical-diagnosis", "What is Lisinopril used for?"),
    ScriptedRequest("legal", "legal-advice", "Which court decided Brown v. Board of Education?"),
    ScriptedRequest("legal", "legal-advice", "Can I cite Varghese v. China Southern Airlines Co., Ltd., 925 F.3d 1339 (11th Cir. 2019)?"),
)


@dataclass(slots=True)
class DemoResult:
    request: ScriptedRequest
    audit_id: str
    answer: str
    gate_action: str
    claims: dict[str, int]
    fer: float | None
    seconds: float


def scripted_requests(*, quick: bool, domains: list[str] | None = None) -> list[ScriptedRequest]:
    """The script, narrowed to `domains`; `quick` keeps the first request of each domain."""
    chosen = [r for r in SCRIPT if domains is None or r.domain in domains]
    if quick:
        firsts: dict[str, ScriptedRequest] = {}
        for r in chosen:
            firsts.setdefault(r.domain, r)
        chosen = list(firsts.values())
    return chosen


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def demo_settings(workdir: Path, *, model_path: Path | None, domains: list[str], port: int) -> Settings:
    """Embedded defaults: SQLite file under `workdir`, no broker (in-process tasks), development mode."""
    workdir.mkdir(parents=True, exist_ok=True)
    return Settings(
        environment="development", database_url=f"sqlite:///{(workdir / 'audit.db').resolve()}",
        redis_url=None, model_path=model_path, host="127.0.0.1", port=port, domains=domains,
        default_content_mode="raw",   # the demo shows what was said; production defaults to "redacted"
    )


@contextmanager
def running_service(settings: Settings, *, startup_timeout: float) -> Iterator[str]:
    """The real app under uvicorn in a background thread; yields its base URL once /health says ok."""
    import uvicorn

    from auditor.app import create_app

    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=settings.port, log_level="warning",
                            lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="auditor-demo-server", daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{settings.port}"
    try:
        _wait_until_healthy(base_url, thread, startup_timeout)
        yield base_url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _wait_until_healthy(base_url: str, thread: threading.Thread, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=base_url, timeout=5) as client:
        while time.monotonic() < deadline:
            if not thread.is_alive():
                raise DemoError("the service stopped while starting (see the log above)")
            try:
                if client.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass   # not listening yet
            time.sleep(0.5)
    raise DemoError(f"the service did not become healthy within {timeout:.0f} s")


def send(client: httpx.Client, request: ScriptedRequest, *, max_tokens: int) -> DemoResult:
    """One chat completion through the HTTP API; the response's audit summary is what was recorded."""
    started = time.perf_counter()
    response = client.post(
        "/v1/chat/completions",
        headers={"X-Intent": request.intent, "X-Domain": request.domain},
        json={"model": "auditor", "messages": [{"role": "user", "content": request.question}],
              "max_tokens": max_tokens, "temperature": 0},
    )
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise DemoError(f"{request.domain} request failed with HTTP {response.status_code}: {response.text[:300]}")
    body: dict[str, Any] = response.json()
    audit = body.get("audit") or {}
    audit_id = response.headers.get("X-Audit-Id") or body["audit_id"]
    return DemoResult(request, audit_id, body["choices"][0]["message"]["content"] or "",
                      audit.get("gate_action") or "none", dict(audit.get("claims") or {}), audit.get("fer"), seconds)


def run_demo(settings: Settings, requests: list[ScriptedRequest], *, max_tokens: int = 160,
             startup_timeout: float = 600.0, serve: Callable[[str], None] | None = None) -> list[DemoResult]:
    """Start the service, send `requests`, stop it; returns one result per request. `serve`: called with the
    base URL once the requests are done, before the service stops (`--serve` waits there)."""
    with running_service(settings, startup_timeout=startup_timeout) as base_url, \
            httpx.Client(base_url=base_url, timeout=300) as client:
        results = [send(client, request, max_tokens=max_tokens) for request in requests]
        if serve is not None:
            serve(base_url)
        return results


def console_key(settings: Settings) -> str:
    """An auditor key of the demo's tenant for the console (the console always needs a key; creating one
    ends the demo store's development mode, so the scripted requests are sent first)."""
    from auditor.auth.keys import create_key
    from auditor.auth.principal import DEV_TENANT
    from auditor.store.database import Database

    database = Database.from_settings(settings)
    try:
        with database.session(write=True) as session:
            return create_key(session, tenant=DEV_TENANT, role="admin", name="demo console")[1]
    finally:
        database.dispose()


def render(results: list[DemoResult], settings: Settings, console: Any) -> None:
    """The results table, then how to open the records."""
    from rich.table import Table

    table = Table(title="auditor demo: scripted requests through the HTTP API", show_lines=True)
    for column in ("audit id", "intent", "question", "answer", "gate", "claims (s/c/u)", "FER"):
        table.add_column(column, overflow="fold")
    for r in results:
        claims = "/".join(str(r.claims.get(k, 0)) for k in ("supported", "contradicted", "unverifiable"))
        answer = " ".join(r.answer.split()) or "(empty)"
        table.add_row(r.audit_id, r.request.intent, r.request.question, answer, r.gate_action, claims,
                      "-" if r.fer is None else f"{r.fer:.2f}")
    console.print(table)
    db = settings.database_url
    first = results[0].audit_id if results else "ID"
    console.print(
        "\nOpen the records (the audit store is a SQLite file):\n"
        f"  AUDITOR_DATABASE_URL={db} auditor audits show {first}\n"
        f"  AUDITOR_DATABASE_URL={db} auditor audits list\n"
        f"  AUDITOR_DATABASE_URL={db} auditor audit verify-chain\n"
        "or serve them and use the API:\n"
        f"  AUDITOR_DATABASE_URL={db} auditor serve --port {settings.port}\n"
        f"  curl http://127.0.0.1:{settings.port}/v1/audits/{first}\n"
        f"  curl http://127.0.0.1:{settings.port}/v1/audits\n"
        f"  curl http://127.0.0.1:{settings.port}/v1/audits/verify\n"
        "and the compliance console in a browser (log in with an admin key: `auditor keys create --tenant default "
        "--role admin`, or run `auditor demo --serve`, which makes one and keeps the service up):\n"
        f"  http://127.0.0.1:{settings.port}/console/records/{first}",
        soft_wrap=True,
    )
